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
// cleanup that dies before its count write: the open and the admission that settle the pending
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
		// A new process opens (settling the pending key) and admits (settling it again).
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
