package localfs_test

import (
	"context"
	"errors"
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

// Supersede ends a saved row under its publishing lease with the checks and the write order
// of Complete and Abandon (ops.go): the row's index entry, then the row with its data synced.

// TestSupersedeCrashAtEveryStepLeavesTheRowSavedOrSuperseded: the process dies (or a step
// fails) at every mutating step of a Supersede. The row is then legible and either still
// saved with its verdict, or superseded by the newer verdict with no report kept; the
// Supersede repeated by another process finishes it, and the root prepares and verifies clean
// with capacity equal to the rows.
func TestSupersedeCrashAtEveryStepLeavesTheRowSavedOrSuperseded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	healthy := openRoot(t, dir, localfs.Config{Clock: clock})
	by := newDelivery(clock.Now()).Key()
	points := 0
	for _, mode := range crashModes {
		for step := 0; ; step++ {
			if step > 30 {
				t.Fatalf("%s: still failing after %d steps", mode.name, step)
			}
			d := newDelivery(clock.Now())
			ledgertest.MustAdmit(t, healthy, d)
			s := ledgertest.MustSave(t, healthy, *ledgertest.MustClaim(t, healthy, d, ledger.Execute).Lease, "the older verdict")
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
			err := faulty.Supersede(ctx, s, by)
			faulty.Close()
			what := fmt.Sprintf("%s step %d", mode.name, step)
			if !fired.Load() {
				if err != nil {
					t.Fatalf("%s: failed with nothing injected: %v", what, err)
				}
				break
			}
			points++
			state, row := ledgertest.RowState(t, healthy, d)
			switch {
			case err == nil && state != "superseded":
				t.Fatalf("%s: Supersede answered and the row is %q", what, state)
			case state == "saved":
				if rep, err := healthy.Report(ctx, d.Key()); err != nil || string(rep) != "the older verdict" {
					t.Fatalf("%s: the row is saved and keeps %q (%v)", what, rep, err)
				}
			case state == "superseded":
				if row.SupersededBy != by {
					t.Fatalf("%s: superseded by %s, want %s", what, row.SupersededBy.Short(), by.Short())
				}
			default:
				t.Fatalf("%s: the row is %q after a failed Supersede (answered %v)", what, state, err)
			}
			// The publisher (here another process) repeats the Supersede under its lease.
			if err := healthy.Supersede(ctx, s, by); err != nil {
				t.Fatalf("%s: the repeated Supersede: %v", what, err)
			}
			if state, row := ledgertest.RowState(t, healthy, d); state != "superseded" || row.SupersededBy != by {
				t.Fatalf("%s: after the repeat the row is %q by %s", what, state, row.SupersededBy.Short())
			}
			if _, err := healthy.Report(ctx, d.Key()); err == nil {
				t.Fatalf("%s: the superseded row still gives its report", what)
			}
		}
	}
	healthy.Close()
	if points == 0 {
		t.Fatal("no step was injected")
	}
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
}

// TestALateSupersedeOrAbandonChangesNothing: a publisher held past its lease, whose row another
// publisher claimed since (a higher fence), may neither supersede nor abandon it: ErrLeaseLost,
// the row still saved under the new lease, which completes it with the same verdict.
func TestALateSupersedeOrAbandonChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, end := range []string{"supersede", "abandon"} {
		clock := ledger.NewManualClock(epoch)
		l := openRoot(t, filepath.Join(t.TempDir(), "root"), localfs.Config{Clock: clock})
		d := newDelivery(clock.Now())
		ledgertest.MustAdmit(t, l, d)
		held := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "the verdict")
		clock.Advance(time.Hour) // the held publisher's lease ends
		fresh := ledgertest.MustClaim(t, l, d, ledger.Publish)
		var err error
		if end == "supersede" {
			err = l.Supersede(ctx, held, newDelivery(clock.Now()).Key())
		} else {
			err = l.Abandon(ctx, held, "late")
		}
		if !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("%s under a stale fence: %v, want ErrLeaseLost", end, err)
		}
		if state, row := ledgertest.RowState(t, l, d); state != "saved" || row.Fence != fresh.Staged.Lease.Fence {
			t.Fatalf("%s under a stale fence left the row %q at fence %d (the new lease holds %d)", end, state, row.Fence, fresh.Staged.Lease.Fence)
		}
		if string(fresh.Staged.Report) != "the verdict" {
			t.Fatalf("the new publisher was given %q", fresh.Staged.Report)
		}
		ledgertest.MustComplete(t, l, *fresh.Staged)
		if state, _ := ledgertest.RowState(t, l, d); state != "done" {
			t.Fatalf("after the new publisher's Complete the row is %q", state)
		}
		l.Close()
	}
}
