package localfs_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/admlog"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Attacks on format 3 (logged admission, checkpoint, replay, cleanup's live-entry rule).
//
// Several processes on one host are modelled by procFS: each process is a faultfs wrapper of
// one shared powerfs (so a process can die: faultfs's Crash, or Kill), and the flocks of the
// admission logs are exclusive between processes, as flock(2) is, and released when their
// process dies (the kernel closes a dead process's descriptors). powerfs alone grants every
// lock, so two processes on it would both own slot 0.

// logLocks is the host's table of admission log flocks, by path.
type logLocks struct {
	mu    sync.Mutex
	owner map[string]*procFile
}

// procFS is one process's view of the host's file system.
type procFS struct {
	*faultfs.FS
	locks *logLocks
}

func newProcs() *logLocks { return &logLocks{owner: map[string]*procFile{}} }

func (t *logLocks) proc(base *powerfs.FS) *procFS {
	return &procFS{FS: faultfs.New(base, nil), locks: t}
}

func (p *procFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := p.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &procFile{File: f, p: p, name: name}, nil
}

type procFile struct {
	vfs.File
	p    *procFS
	name string
}

func isLogPath(name string) bool { return strings.Contains(name, "/"+localfs.LogsDir+"/") }

func (f *procFile) Flock(how int) error {
	if !isLogPath(f.name) {
		return vfs.Flock(f.File, how) // powerfs: granted
	}
	t := f.p.locks
	t.mu.Lock()
	defer t.mu.Unlock()
	if how&unix.LOCK_UN != 0 {
		if t.owner[f.name] == f {
			delete(t.owner, f.name)
		}
		return nil
	}
	if o := t.owner[f.name]; o != nil && o != f && !o.p.Dead() {
		return unix.EWOULDBLOCK
	}
	t.owner[f.name] = f
	return nil
}

func (f *procFile) Close() error {
	t := f.p.locks
	t.mu.Lock()
	if t.owner[f.name] == f {
		delete(t.owner, f.name)
	}
	t.mu.Unlock()
	return f.File.Close()
}

func (f *procFile) CheckWriteback() error { return vfs.CheckWriteback(f.File) }
func (f *procFile) WriteBack() error      { return vfs.WriteBack(f.File) }
func (f *procFile) StartWriteBack() error { return vfs.StartWriteBack(f.File) }

// openProc opens the root of powerRoot as process p (format 3: the admission log on).
func openProc(t testing.TB, p *procFS, clock *ledger.ManualClock, limits ledger.Limits) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: p})
	if err != nil {
		t.Fatalf("open the root: %v", err)
	}
	return l
}

// crashAtRowRename kills the process at the rename of key's row into place (after its log
// entry is durable and its capacity record written): the rename does not happen.
func crashAtRowRename(key ledger.Key) faultfs.Rule {
	return func(op faultfs.Op, path string) faultfs.Action {
		if op == faultfs.OpRename && strings.HasSuffix(path, ".state") && strings.Contains(path, key.String()) {
			return faultfs.Crash
		}
		return faultfs.Pass
	}
}

// TestAttack33AnsweredReadmissionReplacedByDeadEntry: process A (log slot 0) dies between its
// entry's fdatasync and its row's rename for key K (its record counts the slot), and its sender
// gets an error. The sender sends again (same identity, a newer signature, another body) and
// process B, which took slot 1 earlier, admits it: the row is missing, so B answers Admitted
// with its own evaluation id, binding and retention, its row renamed unsynced. The power goes
// before B's checkpoint. At the reboot replay resolves slot 0 first: the row is missing, so it
// writes A's row (an admission nobody was told of); slot 1's entry then finds "another id"
// and gives its slot back. The answered admission is replaced: the queue message B's ingress
// sent carries B's binding digest, which the row no longer holds (its claim is refused), and
// the row's retention is A's, shorter than the one B answered.
func TestAttack33AnsweredReadmissionReplacedByDeadEntry(t *testing.T) {
	ctx := context.Background()
	for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Random, Seed: 3}, {Keep: powerfs.Random, Seed: 4, Ordered: true}} {
		clock := ledger.NewManualClock(epoch)
		base := newPoweredRoot(t, clock)
		procs := newProcs()
		pa, pb := procs.proc(base), procs.proc(base)
		a := openProc(t, pa, clock, testLimits())
		ledgertest.MustAdmit(t, a, newDelivery(time.Time{})) // A takes slot 0
		b := openProc(t, pb, clock, testLimits())
		ledgertest.MustAdmit(t, b, newDelivery(time.Time{})) // B takes slot 1
		first := newDelivery(epoch.Add(-3 * time.Minute))
		again := first // the sender's retry: same identity, newer signature and body
		again.SignedAt = epoch.Add(-time.Minute)
		again.Binding.BodyDigest = ledger.SumBody([]byte(`{"retry":true}`))
		again.Subject = []byte(`{"sha":"retry"}`)
		pa.SetRule("crash", crashAtRowRename(first.Key()))
		if _, err := a.Admit(ctx, first); err == nil {
			t.Fatal("A's admission was answered although A died before its rename")
		}
		if !pa.Dead() {
			t.Fatal("A did not die at its rename")
		}
		got, err := b.Admit(ctx, again)
		if err != nil || got.Outcome != ledger.Admitted {
			t.Fatalf("B's admission: %+v %v", got, err)
		}
		base.Cut() // before B's checkpoint (a second away)
		a.Close()
		b.Close()
		what := fmt.Sprintf("%s: B answered Admitted (evaluation %s, retained until %s)", p, got.EvaluationID, got.RetainUntil.Format(time.TimeOnly))
		rebooted := base.Recover(p)
		l := openPowered(t, rebooted, clock, false)
		state, row := ledgertest.RowState(t, l, again)
		if state == "" {
			t.Fatalf("%s, and after the reboot the row is gone", what)
		}
		if row.EvaluationID != got.EvaluationID || row.Binding.Digest() != again.Binding.Digest() || row.RetainUntil.Before(got.RetainUntil) {
			c, cerr := l.Claim(ctx, again.Key(), again.Binding.Digest(), "w", time.Minute)
			t.Errorf("%s, and after the reboot the row is A's unanswered admission (evaluation %s, retained until %s); "+
				"the claim of B's queue message answers %v %v",
				what, row.EvaluationID, row.RetainUntil.Format(time.TimeOnly), c.Outcome, cerr)
		}
		l.Close()
		checkPreparedRootWith(t, rebooted, clock, testLimits(), true, what)
	}
}

// TestAttack33MarkedShardRefusesEveryAdmission (availability, fails closed): a long-lived root
// (generations near 10^8: about three years of one checkpoint a second; ~300 admissions per
// generation) where eight processes admitted into one shard and died, and Open replayed their
// logs. The shard's record then holds eight Applied and eight Replayed marks and nothing
// pending: 405 bytes, within one sector. An admission the format 2 way (a process that found
// every slot taken, or the maintenance lock busy for 20 ms and so admits without a log for
// slotRetry, or NoAdmissionLog) adds one pending entry (138 bytes), and shardFile refuses any
// record with marks over 512 bytes; admitIn's tooLong settles only when something is already
// pending, and nothing prunes marks of other slots. Every such admission into the shard fails
// with ErrTooLarge. (A format 3 handle still admits there: its logged admission fits, and it
// drops its own slot's Replayed mark.)
func TestAttack33MarkedShardRefusesEveryAdmission(t *testing.T) {
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	const s = 0x42
	logs := powerRoot + "/" + localfs.LogsDir
	if err := base.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	for slot := range 8 {
		if err := admlog.Create(base, fmt.Sprintf("%s/%02d.log", logs, slot), 1<<20, 100_000_000+uint64(slot)); err != nil {
			t.Fatal(err)
		}
	}
	base.SyncAll()
	procs := newProcs()
	var dead []*localfs.Ledger
	var ps []*procFS
	for range 8 {
		p := procs.proc(base)
		l := openProc(t, p, clock, testLimits())
		for range 299 {
			d := newDelivery(time.Time{})
			for d.Key()[0] == s {
				d = newDelivery(time.Time{})
			}
			ledgertest.MustAdmit(t, l, d)
		}
		ledgertest.MustAdmit(t, l, deliveryInShard(s))
		ps = append(ps, p)
		dead = append(dead, l)
	}
	for i, l := range dead { // the eight die (before their checkpoints: a second away)
		ps[i].Kill()
		l.Close()
	}
	base.SyncAll()
	// A process opens the root: it replays the eight dead logs.
	l := openPowered(t, base, clock, false)
	defer l.Close()
	for _, cfg := range []struct {
		name string
		l    *localfs.Ledger
	}{{"NoAdmissionLog handle", openPoweredF2(t, base, clock, false)}, {"format 3 handle", l}} {
		a, err := cfg.l.Admit(ctx, deliveryInShard(s))
		if err != nil || a.Outcome != ledger.Admitted {
			t.Errorf("%s: an admission into shard %02x after its marks grew: %+v %v", cfg.name, s, a.Outcome, err)
		}
	}
}
