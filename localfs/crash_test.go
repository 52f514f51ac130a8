package localfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// Process crashes: the process dies at a step of an operation (what it wrote stays in the page
// cache) and another process answers, finishes or cleans up what it left.

type crashMode struct {
	name string
	rule func(n int) faultfs.Rule
	// dies: the handle is dead after the injection, so the test reopens.
	dies bool
}

var crashModes = []crashMode{
	{"crash-before", func(n int) faultfs.Rule { return faultfs.CrashAfter(n, false) }, true},
	{"crash-after-effect", func(n int) faultfs.Rule { return faultfs.CrashAfter(n, true) }, true},
	{"fail-before", func(n int) faultfs.Rule { return faultfs.FailNth(n, false) }, false},
	{"fail-after-effect", func(n int) faultfs.Rule { return faultfs.FailNth(n, true) }, false},
}

// TestCrashAtEveryStep injects, for every operation, at every mutating step, each failure mode;
// it then reopens (or, for a failure the process survives, goes on), and checks that the row is
// legible, that the operation left nothing or its whole effect, that fences never went back, that
// capacity never understates, and that the row's work can finish.
func TestCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	healthy := openRoot(t, dir, localfs.Config{Clock: clock})
	defer healthy.Close()
	points := 0
	// Each crash point is followed by the next continuation in turn: over an operation's steps,
	// a crash is followed by each of them, not only by the same operation again.
	continuations := ledgertest.Continuations()
	for _, op := range ledgertest.FaultOps() {
		for _, mode := range crashModes {
			for step := 0; ; step++ {
				if step > 60 {
					t.Fatalf("%s/%s: still failing after %d steps", op.Name, mode.name, step)
				}
				d, run := op.Prep(t, healthy, clock)
				_, before := ledgertest.RowState(t, healthy, d)
				fsys := faultfs.New(localfs.OSFS{}, nil)
				faulty := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys})
				var fired atomic.Bool
				rule := mode.rule(step)
				fsys.SetRule("inject", func(o faultfs.Op, p string) faultfs.Action {
					a := rule(o, p)
					if a != faultfs.Pass {
						fired.Store(true)
					}
					return a
				})
				err := run(faulty)
				if !fired.Load() {
					faulty.Close()
					if err != nil {
						t.Fatalf("%s/%s step %d: failed with nothing injected: %v", op.Name, mode.name, step, err)
					}
					break
				}
				points++
				var l ledger.Ledger = faulty
				if mode.dies {
					faulty.Close()
					l = openRoot(t, dir, localfs.Config{Clock: clock})
				} else {
					fsys.SetRule("inject", nil)
				}
				what := fmt.Sprintf("%s/%s step %d", op.Name, mode.name, step)
				next := continuations[points%len(continuations)]
				ledgertest.CheckAfterFault(t, l, clock, op, what, d, before, err, next)
				if l != ledger.Ledger(faulty) {
					l.Close()
				}
				faulty.Close()
			}
		}
	}
	// Everything left behind is collected by prepare, and the root verifies clean.
	healthy.Close()
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits(), Clock: clock})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer p.Close()
	v, err := p.Verify(ctx, nil)
	if err != nil || !v.OK() {
		t.Fatalf("verify after crashes: %v %v", err, v.Problems)
	}
	st, _ := p.Stats(ctx)
	if st.CapacityUsed != st.Rows {
		t.Fatalf("after prepare: capacity %d for %d rows", st.CapacityUsed, st.Rows)
	}
	t.Logf("%d crash points", points)
	fmt.Printf("%d crash points\n", points)
}

// TestCleanupCrashAfterRemovingThePendingRow covers the pending key's row being removed by a
// cleanup that dies before its count write: the open and the admission that recount the pending
// key afterwards must not give its slot back a second time.
func TestCleanupCrashAfterRemovingThePendingRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for step := 0; ; step++ {
		dir := filepath.Join(t.TempDir(), "root")
		clock := ledger.NewManualClock(epoch)
		l := openRoot(t, dir, localfs.Config{Clock: clock})
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
		last := newDelivery(clock.Now()) // admitted last: the capacity record's pending key
		ledgertest.MustAdmit(t, l, last)
		ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, last, ledger.Execute).Lease, "r"))
		clock.Advance(2 * time.Hour)
		l.Close()

		fsys := faultfs.New(localfs.OSFS{}, nil)
		faulty := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys})
		fsys.SetRule("crash", faultfs.CrashAfter(step, true))
		_, err := faulty.Cleanup(ctx, "")
		faulty.Close()
		if err == nil {
			break
		}
		// A new process opens (recounting the pending key) and admits (recounting it again).
		l = openRoot(t, dir, localfs.Config{Clock: clock})
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
		for cur := ledger.Cursor(""); ; {
			rep, err := l.Cleanup(ctx, cur)
			if err != nil {
				t.Fatalf("step %d: cleanup: %v", step, err)
			}
			if rep.Done {
				break
			}
			cur = rep.Next
		}
		st, err := l.Stats(ctx)
		if err != nil || st.Rows != 2 || st.CapacityUsed != 2 {
			t.Fatalf("step %d: %d rows, capacity %d (%v): want 2 and 2", step, st.Rows, st.CapacityUsed, err)
		}
		l.Close()
	}
}

// TestACrashedBatchIsFinishedAtThePersistedNow: "cleanup removes only rows ... whose retention
// ended strictly before the effective now, after persisting that now as the high-water", so that "a
// replay of a forgotten signed delivery is Stale, never admitted again". A cleanup that dies after
// writing its batch leaves the batch to be finished by the next Prepare, Cleanup or refused
// admission, in any process. That finisher judges each batch row at its OWN effective now, which it
// never persists. Between the crash and the finishing, the row was re-admitted with a later signed
// time (answered Duplicate, retention lengthened past the persisted high-water); a finisher whose
// clock runs a few minutes ahead judges it removable and removes it. A replay of that later
// signature to a process with the right clock is then fresh by the persisted high-water, finds no
// row, and is admitted again: a second evaluation, a second verdict. The finisher must judge the
// batch's rows at the persisted high-water.
func TestACrashedBatchIsFinishedAtThePersistedNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.QueueCeiling = 0 // retention: signed time + 5 minutes
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, l, d)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "v"))

	// A cleanup at epoch+6m (row ends at epoch+5m) dies at its first removal, batch written.
	clock.Set(epoch.Add(6 * time.Minute))
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die at the removal", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRemove && filepath.Ext(p) == ".state" {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	cleaner := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if _, err := cleaner.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup survived its crash")
	}
	cleaner.Close()

	// The sender re-signs its retry: the row records the later signed time (Duplicate),
	// retained until epoch+9m.
	retry := d
	retry.SignedAt = epoch.Add(4 * time.Minute)
	if a, err := l.Admit(ctx, retry); err != nil || a.Outcome != ledger.Duplicate || !a.RetainUntil.Equal(epoch.Add(9*time.Minute)) {
		t.Fatalf("re-signed retry: %+v %v, want duplicate retained until epoch+9m", a, err)
	}

	// Another process, whose clock is four minutes ahead, prepares the root: it finishes the batch.
	fast := ledger.NewManualClock(epoch.Add(10 * time.Minute))
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: limits, Clock: fast})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	p.Close()

	// The same re-signed retry arrives again at a process with the right clock.
	clock.Set(epoch.Add(6*time.Minute + 30*time.Second))
	a, err := l.Admit(ctx, retry)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if a.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a delivery answered Duplicate was admitted again (%+v): the batch finisher removed the row "+
			"at a now it never persisted", a)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestAReadmissionCutDuringABatchLeaksNoSlot: "a slot is never held for good". A cleanup dies after
// removing a signed row and before releasing its slot (the batch is left). The sender's retry,
// signed anew (the same key), is admitted into the same shard and dies after its slot is durable
// and before its row is renamed: its slot is pending under the same key. The batch, finished later,
// releases the old slot and deletes the key from the shard's pending keys, so the new admission's
// slot is counted with no pending key and no row: nothing ever gives it back. The batch must erase
// only the entry of the row it removed.
func TestAReadmissionCutDuringABatchLeaksNoSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, l, d)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "v"))

	clock.Set(epoch.Add(6 * time.Minute))
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die before the removals are durable", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpSyncFS {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	cleaner := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if _, err := cleaner.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup survived its crash")
	}
	cleaner.Close()
	if _, err := l.Inspect(ctx, d.Key()); err == nil {
		t.Fatal("the batch did not remove the row before its crash")
	}

	// The retry, signed anew, dies between its durable slot and its row's rename.
	retry := d
	retry.SignedAt = epoch.Add(6 * time.Minute)
	afs := faultfs.New(localfs.OSFS{}, nil)
	afs.SetRule("die at the row's rename", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	admitter := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: afs})
	if _, err := admitter.Admit(ctx, retry); err == nil {
		t.Fatal("the admission survived its crash")
	}
	admitter.Close()

	cleanupLap(t, l) // finishes the batch, then recounts every shard
	cleanupLap(t, l)
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 0 || st.CapacityUsed != 0 {
		t.Fatalf("after the batch and two cleanup laps: %d rows, %d slots used: a slot is held for good", st.Rows, st.CapacityUsed)
	}
}
