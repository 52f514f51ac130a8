package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/admlog"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
)

// Attacks of helper-34 on format 3: a process crash at every step of a checkpoint and of a
// replay, followed by another process's operation, then a power cut and a reboot; and
// cleanup's live-entry rule reading a log while its owner appends. The harness is helper-33's
// procFS (attack33_test.go): several processes on one powerfs, log flocks exclusive between
// them and freed when their process dies.

// a34Answer is an admission answered to a sender: after any reboot its row must be there with
// the evaluation id and binding answered.
type a34Answer struct {
	d  ledger.Delivery
	id string
}

func a34Admit(t *testing.T, l *localfs.Ledger, d ledger.Delivery, answers *[]a34Answer) {
	t.Helper()
	a, err := l.Admit(context.Background(), d)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	if a.Outcome == ledger.Admitted || a.Outcome == ledger.Pending || a.Outcome == ledger.Duplicate {
		*answers = append(*answers, a34Answer{d, a.EvaluationID})
	}
}

// a34Reboot cuts the power of m (if not cut yet) and, for each way of recovering, checks that
// every answered admission kept its row as answered, and that the prepared root (after a
// cleanup lap) counts exactly its rows.
func a34Reboot(t *testing.T, m *powerfs.FS, clock *ledger.ManualClock, answers []a34Answer, step int, folders bool, what string) {
	t.Helper()
	if !m.IsCut() {
		m.Cut()
	}
	ps := append(syncPersistences(step), powerfs.Persistence{Keep: powerfs.Everything})
	if folders {
		ps = append(ps, folderPersistences(m)...)
	}
	for _, p := range ps {
		what := fmt.Sprintf("%s, %s", what, p)
		rebooted := m.Recover(p)
		l := openPowered(t, rebooted, clock, false)
		for _, a := range answers {
			state, row := ledgertest.RowState(t, l, a.d)
			if state == "" || row.EvaluationID != a.id || row.Binding != a.d.Binding {
				t.Fatalf("%s: an answered admission (evaluation %s) came back as %q evaluation %q", what, a.id, state, row.EvaluationID)
			}
		}
		l.Close()
		checkPreparedRootWith(t, rebooted, clock, testLimits(), true, what)
	}
}

// The mutating steps a sweep crashes at: a cleanup pass checkpoints in its first 7 (syncfs,
// the closes of the held files, the header's write and fdatasync), then reads the logs; an
// Open replaying three entries takes about 40 (per entry: a row rewritten with its folder
// synced, the record written and synced; then the retiring header). What follows is cleanup's
// and Open's own, tried elsewhere.
const (
	a34CheckpointSteps = 12
	a34ReplaySteps     = 44
)

// a34Stride is how many steps of a sweep to move by: every step under `make powercut`, every
// third in `make test` (the sweeps take a minute and a half each otherwise, several under the
// race detector).
func a34Stride() int {
	if powerScale() > 1 {
		return 1
	}
	return 3
}

// a34Op is what a live process B does after A crashed: a different operation.
type a34Op struct {
	name string
	run  func(t *testing.T, b *localfs.Ledger, k1, k1again ledger.Delivery, s byte, answers *[]a34Answer)
}

func a34Ops() []a34Op {
	ctx := context.Background()
	return []a34Op{
		{"nothing", func(*testing.T, *localfs.Ledger, ledger.Delivery, ledger.Delivery, byte, *[]a34Answer) {}},
		{"B admits K1 again", func(t *testing.T, b *localfs.Ledger, _, again ledger.Delivery, _ byte, ans *[]a34Answer) {
			a34Admit(t, b, again, ans)
		}},
		{"B admits into K1's shard", func(t *testing.T, b *localfs.Ledger, _, _ ledger.Delivery, s byte, ans *[]a34Answer) {
			a34Admit(t, b, deliveryInShard(s), ans)
		}},
		{"B claims K1", func(t *testing.T, b *localfs.Ledger, k1, _ ledger.Delivery, _ byte, _ *[]a34Answer) {
			if _, err := b.Claim(ctx, k1.Key(), k1.Binding.Digest(), "w", time.Minute); err != nil && !errors.Is(err, ledger.ErrUnknownDelivery) {
				t.Fatalf("claim: %v", err)
			}
		}},
		{"B cleans up", func(t *testing.T, b *localfs.Ledger, _, _ ledger.Delivery, _ byte, _ *[]a34Answer) {
			if _, err := b.Cleanup(ctx, ""); err != nil {
				t.Fatalf("cleanup: %v", err)
			}
		}},
		{"C opens", func(t *testing.T, b *localfs.Ledger, _, _ ledger.Delivery, _ byte, _ *[]a34Answer) {}},
	}
}

// a34Then runs what follows a crash in both sweeps: live process B's different operation (or
// a process C's Open), B's end, then the power cut and every reboot's checks (a34Reboot).
func a34Then(t *testing.T, op a34Op, b *localfs.Ledger, procs *logLocks, m *powerfs.FS, clock *ledger.ManualClock,
	k1, again ledger.Delivery, s byte, answers *[]a34Answer, n int, what string) {
	t.Helper()
	op.run(t, b, k1, again, s, answers)
	if op.name == "C opens" {
		c := openProc(t, procs.proc(m), clock, testLimits())
		c.Close()
	}
	b.Close()
	a34Reboot(t, m, clock, *answers, n, n%4 == 0, what)
}

// TestAttack34CrashInCheckpointThenAnotherOperation: process A admits three keys through its
// log (two in shard 0x30, one borrowing nothing elsewhere), then a cleanup pass of A retires its
// log (checkpointOwn: syncfs, write-back checks, the header and its fdatasync) and A dies at
// each mutating step of that pass, before or after its effect. Process B (its own slot, opened
// before) then does a different operation, the power is cut, and after every reboot each
// answered admission must be there as answered and the prepared root must count its rows.
func TestAttack34CrashInCheckpointThenAnotherOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	const s = 0x30
	points := 0
	for _, op := range a34Ops() {
		for _, after := range []bool{false, true} {
			for n := 0; n < a34CheckpointSteps; n += a34Stride() {
				m := base.Clone()
				procs := newProcs()
				pa, pb := procs.proc(m), procs.proc(m)
				var answers []a34Answer
				a := openProc(t, pa, clock, testLimits())
				b := openProc(t, pb, clock, testLimits())
				a34Admit(t, b, deliveryInShard(0x31), &answers) // B takes a slot
				k1 := deliveryInShard(s)
				again := k1
				again.SignedAt = time.Time{}
				a34Admit(t, a, k1, &answers)
				a34Admit(t, a, deliveryInShard(s), &answers)
				a34Admit(t, a, deliveryInShard(0x32), &answers)
				if localfs.LogSlotForTest(a) < 0 || localfs.LogSlotForTest(b) < 0 {
					t.Fatalf("no admission log: A %d, B %d", localfs.LogSlotForTest(a), localfs.LogSlotForTest(b))
				}
				pa.SetRule("crash", faultfs.CrashAfter(n, after))
				_, cerr := a.Cleanup(ctx, "")
				finished := cerr == nil && !pa.Dead()
				pa.Kill()
				a.Close()
				points++
				a34Then(t, op, b, procs, m, clock, k1, again, s, &answers, n,
					fmt.Sprintf("A dies at mutating step %d of its checkpointing cleanup (after effect: %v), then %s", n, after, op.name))
				if finished {
					break
				}
			}
		}
	}
	t.Logf("%d crash points", points)
}

// TestAttack34CrashInReplayThenAnotherOperation: process A admits K2 and K3 through its log and
// dies at K1's rename (K1 unanswered, its slot counted). Process R opens the root and dies at
// each mutating step of its replay of A's log (row rewrites, records, the retiring header).
// Process B (its own slot, opened before A died) then does a different operation (among them
// admitting K1 again, which a partial replay may or may not have written), the power is cut,
// and after every reboot each answered admission must be there as answered and the prepared
// root must count its rows.
func TestAttack34CrashInReplayThenAnotherOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	const s = 0x40
	points := 0
	for _, op := range a34Ops() {
		if op.name == "nothing" || op.name == "B claims K1" {
			continue // the replay test's interest is in what meets a half-done replay
		}
		for _, after := range []bool{false, true} {
			if after && op.name != "B admits K1 again" {
				continue
			}
			for n := 0; n < a34ReplaySteps; n += a34Stride() {
				m := base.Clone()
				procs := newProcs()
				pa, pb, pr := procs.proc(m), procs.proc(m), procs.proc(m)
				var answers []a34Answer
				a := openProc(t, pa, clock, testLimits())
				b := openProc(t, pb, clock, testLimits())
				a34Admit(t, b, deliveryInShard(0x41), &answers) // B takes a slot
				k1 := deliveryInShard(s)
				again := k1
				again.Subject = []byte(`{"sha":"retry"}`)
				a34Admit(t, a, deliveryInShard(s), &answers)
				a34Admit(t, a, deliveryInShard(0x42), &answers)
				pa.SetRule("crash", crashAtRowRename(k1.Key()))
				if _, err := a.Admit(ctx, k1); err == nil {
					t.Fatal("A's admission of K1 survived its crash")
				}
				a.Close()
				pr.SetRule("crash", faultfs.CrashAfter(n, after))
				r, rerr := localfs.Open(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: pr})
				finished := rerr == nil && !pr.Dead()
				if rerr == nil {
					pr.Kill()
					r.Close()
				}
				points++
				a34Then(t, op, b, procs, m, clock, k1, again, s, &answers, n,
					fmt.Sprintf("R dies at mutating step %d of its replay (after effect: %v), then %s", n, after, op.name))
				if finished {
					break
				}
			}
		}
	}
	t.Logf("%d crash points", points)
}

// cleanupRacingALiveLog: process A admits entries keys through its log (slot 0, kept live: C
// runs in this test's process, and a cleanup pass retires the logs its own process owns, so
// A's must stay A's to retire, as another process's would); process C, whose reads of A's log
// are racy (racyLogReads with cut), runs one cleanup pass, and during runs while C's read of
// A's log is half done. It answers C (closed with the test) and the pass's error.
func cleanupRacingALiveLog(t *testing.T, entries, cut int, during func(a *localfs.Ledger)) (*localfs.Ledger, error) {
	t.Helper()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	procs := newProcs()
	a := openProc(t, procs.proc(base), clock, testLimits())
	t.Cleanup(func() { a.Close() })
	for range entries {
		ledgertest.MustAdmit(t, a, newDelivery(time.Time{}))
	}
	if localfs.LogSlotForTest(a) != 0 {
		t.Fatalf("A admits with slot %d", localfs.LogSlotForTest(a))
	}
	if err := localfs.KeepLogLiveForTest(a); err != nil {
		t.Fatal(err)
	}
	cfs := &racyLogReads{procFS: procs.proc(base), cut: cut}
	c, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: cfs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfs.during = func() { during(a) }
	_, err = c.Cleanup(ctx, "")
	return c, err
}

// racyLogReads is a process whose reads of an admission log are not atomic against the
// appends of the log's owner, as read(2) of a file is not on Linux: the kernel copies the
// file's pages one after another, and a page copied early shows what it held then. The hook
// runs between the two halves of the read (what the owner appends meanwhile), and the read
// returns the first sectors as they were before it and the rest as they are after (or, with
// cut, the first cut bytes).
type racyLogReads struct {
	*procFS
	during func()
	// cut, when set, is where the read switches from the bytes before to those after;
	// otherwise, past the sector of the first byte the owner changed.
	cut int
}

func (r *racyLogReads) ReadFile(name string) ([]byte, error) {
	if !isLogPath(name) || !strings.HasSuffix(name, ".log") || r.during == nil {
		return r.procFS.ReadFile(name)
	}
	before, err := r.procFS.ReadFile(name)
	if err != nil {
		return nil, err
	}
	during := r.during
	r.during = nil
	during()
	after, err := r.procFS.ReadFile(name)
	if err != nil || len(after) != len(before) {
		return after, err
	}
	if r.cut > 0 {
		return append(before[:r.cut:r.cut], after[r.cut:]...), nil
	}
	// The reader had copied the pages up to (and including) the sector where the owner's next
	// entry went when the owner wrote it; it copies the rest after.
	d := 0
	for d < len(before) && before[d] == after[d] {
		d++
	}
	if d == len(before) {
		return after, nil
	}
	cut := min(len(before), (d/admlog.Sector+1)*admlog.Sector)
	return append(before[:cut:cut], after[cut:]...), nil
}

// TestAttack34CleanupReadingALiveLogFailsAsCorrupt: cleanup's live-entry rule (liveLogKeys)
// reads every log, the logs of live processes included, with no lock against their appends.
// Process A owns a live log; process C runs a cleanup pass and, while C's read of A's log is
// copying it, A answers two admissions (two entries, each durable before the next is written,
// so the second vouches for the first). C's read shows the first entry's sector as it was
// before and the second entry whole: admlog.Read takes it for a damaged log (a whole entry
// vouching for one that does not decode) and the pass fails with ErrCorrupt. Nothing is
// damaged: it is normal operation, and the next pass succeeds. A cleanup pass that reports
// corruption in normal operation violates "ErrCorrupt only for damaged input; no availability
// failure in normal operation", and an operator is sent to look for damage that is not there.
func TestAttack34CleanupReadingALiveLogFailsAsCorrupt(t *testing.T) {
	ctx := context.Background()
	c, err := cleanupRacingALiveLog(t, 1, 0, func(a *localfs.Ledger) {
		ledgertest.MustAdmit(t, a, newDelivery(time.Time{}))
		ledgertest.MustAdmit(t, a, newDelivery(time.Time{}))
	})
	if err != nil {
		again, aerr := c.Cleanup(ctx, "")
		t.Errorf("a cleanup pass while a live process admits: %v (ErrCorrupt: %v); the next pass: %v %v",
			err, errors.Is(err, ledger.ErrCorrupt), again.Removed, aerr)
	}
}

// TestAttack34CleanupReadingALogAcrossItsCheckpointFailsAsCorrupt is the same race met by a
// checkpoint instead of an append: cleanup's read of A's live log copies the header (generation
// g) before A's checkpointer retires the log (its header, generation g+1) and A's next entry
// overwrites the first entry of generation g; the read then sees generation g's header, a first
// entry that does not decode under it, and generation g's second and third entries whole
// beyond it, vouching for the first: ErrCorrupt, with nothing damaged. A log checkpoints every
// second while its process admits, so any cleanup pass on a busy root can meet this.
func TestAttack34CleanupReadingALogAcrossItsCheckpointFailsAsCorrupt(t *testing.T) {
	_, err := cleanupRacingALiveLog(t, 3, 0, func(a *localfs.Ledger) { // generation g: three live entries
		localfs.AllowLogRetireForTest(a)
		time.Sleep(2 * time.Second) // A's checkpointer retires generation g (checkpointAge)
		ledgertest.MustAdmit(t, a, newDelivery(time.Time{}))
	})
	if err != nil {
		t.Errorf("a cleanup pass while a live process checkpoints and admits: %v (ErrCorrupt: %v)", err, errors.Is(err, ledger.ErrCorrupt))
	}
}
