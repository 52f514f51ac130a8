package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/faultfs"
)

// crashOp stages a row with a healthy handle, then runs one operation on the faulty handle.
type crashOp struct {
	name string
	// prep brings a fresh delivery to the operation's starting state.
	prep func(t *testing.T, l ledger.Ledger, clock *ledger.ManualClock) (ledger.Delivery, func(l ledger.Ledger) error)
	// after lists the states the row may be in after a failed run (absent is "").
	after []string
}

func crashOps() []crashOp {
	ctx := context.Background()
	return []crashOp{
		{"admit", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(c.Now())
			return d, func(l ledger.Ledger) error { _, err := l.Admit(ctx, d); return err }
		}, []string{"", "pending"}},
		{"readmit-later-signature", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(c.Now())
			mustAdmit(t, l, d)
			later := d
			later.SignedAt = c.Now().Add(time.Second)
			return d, func(l ledger.Ledger) error { _, err := l.Admit(ctx, later); return err }
		}, []string{"pending"}},
		{"claim-execute", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(time.Time{})
			mustAdmit(t, l, d)
			return d, func(l ledger.Ledger) error {
				_, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", 30*time.Second)
				return err
			}
		}, []string{"pending", "running"}},
		{"claim-publish", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(time.Time{})
			mustAdmit(t, l, d)
			mustSave(t, l, *mustClaim(t, l, d, ledger.Execute).Lease, "r")
			c.Advance(time.Minute)
			return d, func(l ledger.Ledger) error {
				_, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", 30*time.Second)
				return err
			}
		}, []string{"saved"}},
		{"renew", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(time.Time{})
			mustAdmit(t, l, d)
			cl := mustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { _, err := l.Renew(ctx, *cl.Lease, time.Minute); return err }
		}, []string{"running"}},
		{"save", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(time.Time{})
			mustAdmit(t, l, d)
			cl := mustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { _, err := l.Save(ctx, *cl.Lease, []byte("verdict")); return err }
		}, []string{"running", "saved"}},
		{"complete", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(c.Now())
			mustAdmit(t, l, d)
			s := mustSave(t, l, *mustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			return d, func(l ledger.Ledger) error { return l.Complete(ctx, s) }
		}, []string{"saved", "done"}},
		{"abandon", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(c.Now())
			mustAdmit(t, l, d)
			s := mustSave(t, l, *mustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			return d, func(l ledger.Ledger) error { return l.Abandon(ctx, s, "provider answered 422") }
		}, []string{"saved", "abandoned"}},
		{"release", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(time.Time{})
			mustAdmit(t, l, d)
			cl := mustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { return l.Release(ctx, *cl.Lease, time.Time{}) }
		}, []string{"running", "pending"}},
		{"cleanup", func(t *testing.T, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := newDelivery(c.Now())
			mustAdmit(t, l, d)
			mustComplete(t, l, mustSave(t, l, *mustClaim(t, l, d, ledger.Execute).Lease, "verdict"))
			c.Advance(2 * time.Hour)
			return d, func(l ledger.Ledger) error {
				_, err := l.Cleanup(ctx, "")
				return err
			}
		}, []string{"done", ""}},
	}
}

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

func stateName(t *testing.T, l ledger.Ledger, d ledger.Delivery) (string, ledger.Row) {
	t.Helper()
	row, err := l.Inspect(context.Background(), d.Key())
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return "", row
	}
	if err != nil {
		t.Fatalf("row not legible: %v", err)
	}
	return row.State.String(), row
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
	for _, op := range crashOps() {
		for _, mode := range crashModes {
			for step := 0; ; step++ {
				if step > 60 {
					t.Fatalf("%s/%s: still failing after %d steps", op.name, mode.name, step)
				}
				d, run := op.prep(t, healthy, clock)
				_, before := stateName(t, healthy, d)
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
						t.Fatalf("%s/%s step %d: failed with nothing injected: %v", op.name, mode.name, step, err)
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
				state, after := stateName(t, l, d)
				if err != nil && !slices.Contains(op.after, state) {
					t.Fatalf("%s/%s step %d: failed operation left the row %q, want one of %q", op.name, mode.name, step, state, op.after)
				}
				if state != "" && after.Fence < before.Fence {
					t.Fatalf("%s/%s step %d: fence went back from %d to %d", op.name, mode.name, step, before.Fence, after.Fence)
				}
				if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
					t.Fatalf("%s/%s step %d: stats %+v %v: capacity understates", op.name, mode.name, step, st, err)
				}
				if state == "" && op.name == "admit" {
					mustAdmit(t, l, d)
				}
				if state != "" {
					finishRow(t, l, clock, d)
				}
				// Cleanup to the end of a lap: it finishes any interrupted batch, and the next
				// step starts from the same amount of work.
				for cur := ledger.Cursor(""); ; {
					rep, err := l.Cleanup(ctx, cur)
					if err != nil {
						t.Fatalf("%s/%s step %d: cleanup after the injection: %v", op.name, mode.name, step, err)
					}
					if rep.Done {
						break
					}
					cur = rep.Next
				}
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
		mustAdmit(t, l, newDelivery(time.Time{}))
		last := newDelivery(clock.Now()) // admitted last: the capacity record's pending key
		mustAdmit(t, l, last)
		mustComplete(t, l, mustSave(t, l, *mustClaim(t, l, last, ledger.Execute).Lease, "r"))
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
		mustAdmit(t, l, newDelivery(time.Time{}))
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
