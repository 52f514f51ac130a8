package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
)

// powerRoot is where the power-cut tests keep their root inside a powerfs.
const powerRoot = "/power/root"

// powerPersistences are the ways a power loss is recovered from at each cut: nothing unsynced
// kept, everything kept, and at random, in order (a journaling file system) or any subset (no
// journal, the disk of the project's own machine).
func powerPersistences() []powerfs.Persistence {
	ps := []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}}
	for s := range 8 {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Random, Seed: uint64(s + 1), Ordered: s%2 == 0})
	}
	return ps
}

// stepPersistences are the ways a cut at one step of many is recovered from: nothing kept,
// everything kept, and one at random that changes from step to step.
func stepPersistences(step int) []powerfs.Persistence {
	return []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything},
		{Keep: powerfs.Random, Seed: uint64(step) + 1, Ordered: step%2 == 0}}
}

// historyPersistences are the ways history h's cut is recovered from: nothing kept,
// everything kept, and three at random (in order, any subset, then either).
func historyPersistences(h int) []powerfs.Persistence {
	ps := []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}}
	for i := range 3 {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Random, Seed: uint64(3*h + i + 1), Ordered: (h+i)%2 == 0})
	}
	return ps
}

// durableOps are the operations whose answer promises that a power loss keeps their effect:
// someone outside the host relies on it (file-ledger.md, "What each write makes durable").
// The others may be forgotten by a power loss, never half kept.
var durableOps = []string{"admit", "readmit-later-signature", "save", "revive"}

func openPowered(t testing.TB, fsys *powerfs.FS, clock *ledger.ManualClock, create bool) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys, Create: create})
	if err != nil {
		t.Fatalf("open the root: %v", err)
	}
	return l
}

// newPoweredRoot returns a powerfs holding a new root, everything synced.
func newPoweredRoot(t testing.TB, clock *ledger.ManualClock) *powerfs.FS {
	t.Helper()
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPowered(t, fsys, clock, true).Close()
	fsys.SyncAll()
	return fsys
}

// errAnsweredThenCut stands for the answer of an operation that succeeded just before the
// power was cut, when its effect may be forgotten: nothing of it, or all of it.
var errAnsweredThenCut = errors.New("answered success, then the power was cut")

// TestPowerCutAtEveryStep cuts the power at every change and sync of every operation, and
// right after its answer, then reboots with each way of keeping what no sync made durable
// (powerfs), from nothing to everything. After each it checks what the process-crash test
// checks (the row legible, nothing or all of an unanswered operation, fences never back,
// capacity never understated, the row's work can finish), that an answered admission, save,
// re-admission or revive is kept exactly as answered, and that the root verifies clean with
// every slot accounted for once preparation has run.
func TestPowerCutAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	continuations := ledgertest.Continuations()
	points := 0
	for _, op := range ledgertest.FaultOps() {
		for step := 0; ; step++ {
			if step > 80 {
				t.Fatalf("%s: the operation still runs after %d cuts", op.Name, step)
			}
			fsys := base.Clone()
			healthy := openPowered(t, fsys, clock, false)
			d, run := op.Prep(t, healthy, clock)
			_, before := ledgertest.RowState(t, healthy, d)
			healthy.Close()
			fsys.SyncAll() // what came before the operation was answered and is durable
			answered := false
			for _, p := range stepPersistences(step) {
				points++
				// Each reboot goes on from the same instant: what follows one (finishing the
				// row, cleanup) moves its own clock only.
				clock := ledger.NewManualClock(clock.Now())
				m := fsys.Clone()
				faulty := openPowered(t, m, clock, false)
				m.CutAfter(step)
				err := run(faulty)
				answered = !m.IsCut()
				var want ledger.Row
				if answered {
					if err != nil {
						t.Fatalf("%s: failed with no cut: %v", op.Name, err)
					}
					_, want = ledgertest.RowState(t, faulty, d)
					m.Cut()
					if !slices.Contains(durableOps, op.Name) {
						err = errAnsweredThenCut
					}
				}
				faulty.Close()
				what := fmt.Sprintf("%s, power cut at step %d (answered: %v), %s", op.Name, step, answered, p)
				rebooted := m.Recover(p)
				l := openPowered(t, rebooted, clock, false)
				if answered && err == nil {
					if _, got := ledgertest.RowState(t, l, d); !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: the answered row was not kept:\n got  %+v\n want %+v", what, got, want)
					}
				}
				next := continuations[points%len(continuations)]
				ledgertest.CheckAfterFault(t, l, clock, op, what, d, before, err, next)
				l.Close()
				checkPreparedRoot(t, ctx, rebooted, clock, what)
			}
			if answered {
				break
			}
		}
	}
	t.Logf("%d power cuts", points)
}

// checkPreparedRoot prepares the root (as a restarted process does) and checks that it
// verifies clean and that its capacity counts exactly its rows.
func checkPreparedRoot(t *testing.T, ctx context.Context, fsys *powerfs.FS, clock *ledger.ManualClock, what string) {
	t.Helper()
	p, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys})
	if err != nil {
		t.Fatalf("%s: prepare: %v", what, err)
	}
	defer p.Close()
	v, err := p.Verify(ctx, nil)
	if err != nil || !v.OK() {
		t.Fatalf("%s: verify: %v %v", what, err, v.Problems)
	}
	st, err := p.Stats(ctx)
	if err != nil || st.CapacityUsed != st.Rows {
		t.Fatalf("%s: after prepare: capacity %d for %d rows (%v)", what, st.CapacityUsed, st.Rows, err)
	}
}

// powerKey is one delivery a worker of a power-cut history drives, and what the answers it
// got promise about it.
type powerKey struct {
	d ledger.Delivery
	// last is the row as read after the last answered operation (valid when read).
	last ledger.Row
	read bool
	// admitted: an admission was answered; saved: a save was answered, with this report.
	admitted bool
	saved    ledger.Digest
	// fence is the fence of the last answered save: never to come back lower.
	fence uint64
}

// TestPowerCutHistories runs concurrent workers on one root (their keys share two row folders,
// so their writes share group-commit rounds and folder syncs), each driving deliveries through
// random lifecycles, with cleanup passes and a moving clock; the power is cut at a random call.
// After every way of recovering, each key must keep what its answers promised (an answered
// admission keeps its row, an answered save its verdict and fence, unless cleanup could have
// forgotten the row), every row must be legible and its work able to finish, and the prepared
// root must verify clean with capacity counting its rows exactly.
func TestPowerCutHistories(t *testing.T) {
	t.Parallel()
	const (
		histories = 30
		workers   = 4
		steps     = 40
		leaseFor  = 24 * time.Hour
	)
	ctx := context.Background()
	base := newPoweredRoot(t, ledger.NewManualClock(epoch))
	shards := []byte{0x10, 0x11}
	cuts, answered, removed, midway := 0, atomic.Int64{}, atomic.Int64{}, 0
	for h := range histories {
		rng := rand.New(rand.NewPCG(uint64(h), 7))
		clock := ledger.NewManualClock(epoch.Add(time.Duration(h) * time.Hour))
		fsys := base.Clone()
		l := openPowered(t, fsys, clock, false)
		fsys.CutAfter(rng.IntN(800)) // a history makes about 850 changes and syncs
		var mu sync.Mutex
		var keys []*powerKey
		var wg sync.WaitGroup
		for w := range workers {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				wr := rand.New(rand.NewPCG(seed, uint64(w)))
				var k *powerKey
				var lease *ledger.Lease
				var staged *ledger.Staged
				for range steps {
					if wr.IntN(6) == 0 {
						// A cleanup pass, the clock moved on by a few minutes: finished
						// rows past their retention are forgotten.
						clock.Advance(3 * time.Minute)
						rep, err := l.Cleanup(ctx, "")
						if err != nil {
							if !fsys.IsCut() {
								t.Errorf("cleanup failed with the power on: %v", err)
							}
							return
						}
						removed.Add(int64(len(rep.Removed)))
						continue
					}
					if k == nil || k.read && k.last.State.Terminal() {
						signed := time.Time{}
						if wr.IntN(2) == 0 {
							signed = clock.Now()
						}
						d := deliveryInShard(shards[wr.IntN(len(shards))])
						d.SignedAt = signed
						if !signed.IsZero() {
							d.Binding.Scheme = "standard-webhooks"
						}
						k, lease, staged = &powerKey{d: d}, nil, nil
						mu.Lock()
						keys = append(keys, k)
						mu.Unlock()
						a, err := l.Admit(ctx, d)
						if err != nil {
							return // the power is cut
						}
						// (A refusal, Stale when the clock moved past the signature's age
						// ceiling, makes no row.)
						k.admitted = a.Outcome == ledger.Admitted
						answered.Add(1)
					} else {
						var err error
						switch {
						case staged != nil && wr.IntN(2) == 0:
							err = l.Complete(ctx, *staged)
						case staged != nil:
							err = l.Abandon(ctx, *staged, "provider answered 422")
						case lease != nil && wr.IntN(4) == 0:
							err = l.Release(ctx, *lease, time.Time{})
							lease = nil
						case lease != nil && wr.IntN(4) == 0:
							var nl ledger.Lease
							if nl, err = l.Renew(ctx, *lease, leaseFor); err == nil {
								lease = &nl
							}
						case lease != nil:
							report := fmt.Appendf(nil, "verdict %d", wr.IntN(1000))
							var s ledger.Staged
							if s, err = l.Save(ctx, *lease, report); err == nil {
								staged, lease = &s, nil
								k.saved, k.fence = ledger.SumBody(report), s.Lease.Fence
							}
						case k.last.State == ledger.StateAbandoned:
							_, err = l.Revive(ctx, k.d.Key(), k.last.EvaluationID)
						default:
							var c ledger.Claim
							if c, err = l.Claim(ctx, k.d.Key(), k.d.Binding.Digest(), "w", leaseFor); err == nil {
								switch c.Outcome {
								case ledger.Execute:
									lease = c.Lease
								case ledger.Publish:
									staged = c.Staged
								}
							}
						}
						if err != nil {
							if !fsys.IsCut() {
								t.Errorf("a history's operation failed with the power on: %v", err)
							}
							return
						}
						answered.Add(1)
						if staged != nil && (k.last.State == ledger.StateDone || k.last.State == ledger.StateAbandoned) {
							staged = nil
						}
					}
					row, err := l.Inspect(ctx, k.d.Key())
					if errors.Is(err, ledger.ErrUnknownDelivery) && !k.admitted {
						k = nil // refused: the next step admits another
						continue
					}
					if err != nil {
						if !fsys.IsCut() {
							t.Errorf("inspect failed with the power on: %v", err)
						}
						return
					}
					k.last, k.read = row, true
					if row.State.Terminal() {
						staged = nil
					}
				}
			}()
		}
		wg.Wait()
		if fsys.IsCut() {
			midway++
		}
		fsys.Cut()
		l.Close()
		for _, p := range historyPersistences(h) {
			cuts++
			what := fmt.Sprintf("history %d, %s", h, p)
			rebooted := fsys.Recover(p)
			clock := ledger.NewManualClock(clock.Now())
			l := openPowered(t, rebooted, clock, false)
			for _, k := range keys {
				checkPowerKey(t, l, clock, k, what)
			}
			for _, k := range keys {
				if state, _ := ledgertest.RowState(t, l, k.d); state != "" {
					ledgertest.FinishRow(t, l, clock, k.d)
				}
			}
			cleanupLap(t, l)
			l.Close()
			checkPreparedRoot(t, ctx, rebooted, clock, what)
		}
	}
	t.Logf("%d histories (%d cut while running), %d operations answered, %d rows removed by cleanup, %d reboots",
		histories, midway, answered.Load(), removed.Load(), cuts)
	if midway == 0 || removed.Load() == 0 {
		t.Errorf("the histories never met a cut while running (%d) or never removed a row (%d): what they check went untried", midway, removed.Load())
	}
}

// checkPowerKey checks what k's answers promised after a reboot.
func checkPowerKey(t *testing.T, l ledger.Ledger, clock *ledger.ManualClock, k *powerKey, what string) {
	t.Helper()
	what = fmt.Sprintf("%s, key %s", what, k.d.Key().Short())
	state, row := ledgertest.RowState(t, l, k.d)
	if state == "" {
		// Only cleanup may forget a row whose admission was answered: one finished and past
		// its retention when last read.
		if k.admitted && !(k.read && k.last.State.Terminal() && k.last.Removable(k.last.Now(clock.Now(), time.Time{}))) {
			t.Fatalf("%s: the answered admission was lost (last read %q)", what, k.last.State)
		}
		return
	}
	if !k.saved.IsZero() {
		switch row.State {
		case ledger.StateSaved, ledger.StateAbandoned:
			if row.Report.Digest != k.saved {
				t.Fatalf("%s: the answered save's verdict %s became %s", what, k.saved, row.Report.Digest)
			}
		case ledger.StateDone:
		default:
			t.Fatalf("%s: the answered save was lost: the row is %s", what, row.State)
		}
		if row.Fence < k.fence {
			t.Fatalf("%s: fence went back from %d to %d", what, k.fence, row.Fence)
		}
	}
}

// loadTree copies the folder src of the real file system into fsys at dst, synced.
func loadTree(t *testing.T, fsys *powerfs.FS, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if e.IsDir() {
			if err := fsys.Mkdir(to, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := fsys.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatalf("load %s: %v", src, err)
	}
	fsys.SyncAll()
}

// TestPowerCutWhileOpening cuts the power before every sync of making a new root and of
// migrating a format 1 root, and after the answer, then reboots with each way of keeping what was not synced: the next start
// opens the root (making it again where the first start was never answered), which verifies
// clean, keeps the migrated root's rows as they were, and counts its capacity exactly.
func TestPowerCutWhileOpening(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := powerfs.New()
	if err := empty.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	empty.SyncAll()
	v1 := empty.Clone()
	loadTree(t, v1, filepath.Join("testdata", "format-v1"), powerRoot)
	cases := []struct {
		name   string
		fsys   *powerfs.FS
		limits ledger.Limits
		check  func(t *testing.T, l *localfs.Ledger, what string)
	}{
		{"new root", empty, testLimits(), func(*testing.T, *localfs.Ledger, string) {}},
		{"format 1 migration", v1, fixtureLimits(), func(t *testing.T, l *localfs.Ledger, what string) {
			for i, want := range fixtureStates {
				d := fixtureDelivery(i)
				row, err := l.Inspect(ctx, d.Key())
				if err != nil || row.State != want || row.Binding != d.Binding {
					t.Fatalf("%s: delivery %d: %+v %v, want %v", what, i, row, err, want)
				}
			}
		}},
	}
	for _, c := range cases {
		// A start without a cut tells where its syncs are: the power is cut just before each,
		// and after the answer (see powerfs.FS.Syncs).
		dry := c.fsys.Clone()
		l, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: c.limits, Clock: ledger.NewManualClock(fixtureEpoch.Add(time.Hour)), FS: dry, Create: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		l.Close()
		cutPoints := append(dry.Syncs(), dry.Calls())
		points := 0
		for _, step := range cutPoints {
			for _, p := range powerPersistences() {
				points++
				m := c.fsys.Clone()
				clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
				cfg := localfs.Config{Limits: c.limits, Clock: clock, FS: m, Create: true}
				m.CutAfter(step)
				l, err := localfs.Prepare(ctx, powerRoot, cfg)
				answered := !m.IsCut()
				if answered {
					if err != nil {
						t.Fatalf("%s: failed with no cut: %v", c.name, err)
					}
					l.Close()
					m.Cut()
				}
				what := fmt.Sprintf("%s, power cut at step %d (answered: %v), %s", c.name, step, answered, p)
				rebooted := m.Recover(p)
				cfg.FS, cfg.Create = rebooted, !answered
				l, err = localfs.Prepare(ctx, powerRoot, cfg)
				if err != nil {
					t.Fatalf("%s: the next start: %v", what, err)
				}
				c.check(t, l, what)
				if v, err := l.Verify(ctx, nil); err != nil || !v.OK() {
					t.Fatalf("%s: verify: %v %v", what, err, v.Problems)
				}
				if st, err := l.Stats(ctx); err != nil || st.CapacityUsed != st.Rows {
					t.Fatalf("%s: capacity %d for %d rows (%v)", what, st.CapacityUsed, st.Rows, err)
				}
				ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
				l.Close()
			}
		}
		t.Logf("%s: %d power cuts", c.name, points)
	}
}
