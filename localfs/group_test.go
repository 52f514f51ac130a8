package localfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// TestGroupCommitCrashAtEveryStep runs admissions (new keys, in the home shard and borrowing)
// and saves at once in one process whose group-commit rounds gather all of them, and kills
// the process at every mutating step of the group in turn, and also right after each round's
// sync, before its callers are answered. A new process then checks every operation: one that
// was answered success left its whole effect, durable; one that failed left nothing or its
// whole effect; every row is legible, capacity never understates, and every row's work can
// finish.
func TestGroupCommitCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 4
	limits := testLimits()
	limits.RecordCap = 16 // one slot in each of the first 16 shards: most admissions borrow
	clock := ledger.NewManualClock(epoch)
	var dir string
	points := 0
	type outcome struct {
		d      ledger.Delivery
		save   bool
		report string
		err    error
	}
	run := func(what string, rule faultfs.Rule, killAfterRound int) (fired bool) {
		dir = filepath.Join(t.TempDir(), "root") // a fresh root each time, so its shards have room
		healthy := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
		var ops []outcome
		var leases []ledger.Lease
		for i := range n {
			d := newDelivery(time.Time{})
			if i%2 == 1 {
				ledgertest.MustAdmit(t, healthy, d)
				leases = append(leases, *ledgertest.MustClaim(t, healthy, d, ledger.Execute).Lease)
				ops = append(ops, outcome{d: d, save: true, report: fmt.Sprintf("verdict %s", d.Binding.Identity)})
			} else {
				leases = append(leases, ledger.Lease{})
				ops = append(ops, outcome{d: d})
			}
		}
		healthy.Close()
		fsys := faultfs.New(localfs.OSFS{}, nil)
		faulty := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
		localfs.SetSyncGatherForTest(faulty, n, 50*time.Millisecond)
		var roundsSeen atomic.Int32
		var injected atomic.Bool
		localfs.SetAfterSyncForTest(faulty, func(int) {
			if int(roundsSeen.Add(1)) == killAfterRound {
				injected.Store(true)
				fsys.Kill() // the process dies with the round synced, its callers unanswered
			}
		})
		if rule != nil {
			fsys.SetRule("inject", func(o faultfs.Op, p string) faultfs.Action {
				a := rule(o, p)
				if a != faultfs.Pass {
					injected.Store(true)
				}
				return a
			})
		}
		var wg sync.WaitGroup
		for i := range ops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ops[i].save {
					_, ops[i].err = faulty.Save(ctx, leases[i], []byte(ops[i].report))
				} else {
					var a ledger.Admission
					a, ops[i].err = faulty.Admit(ctx, ops[i].d)
					if ops[i].err == nil && a.Outcome != ledger.Admitted {
						ops[i].err = fmt.Errorf("admission answered %v", a.Outcome)
						t.Errorf("%s: %v", what, ops[i].err)
					}
				}
			}()
		}
		wg.Wait()
		faulty.Close()
		if !injected.Load() {
			for _, o := range ops {
				if o.err != nil {
					t.Fatalf("%s: failed with nothing injected: %v", what, o.err)
				}
			}
		}
		// A new process looks.
		l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
		defer l.Close()
		for _, o := range ops {
			state, row := ledgertest.RowState(t, l, o.d)
			switch {
			case !o.save && o.err == nil && state != "pending":
				t.Fatalf("%s: admission answered Admitted, row is %q after the crash", what, state)
			case !o.save && state != "" && state != "pending":
				t.Fatalf("%s: interrupted admission left %q", what, state)
			case o.save && o.err == nil && state != "saved":
				t.Fatalf("%s: save answered, row is %q after the crash", what, state)
			case o.save && state != "running" && state != "saved":
				t.Fatalf("%s: interrupted save left %q", what, state)
			}
			if o.save && state == "saved" {
				rep, err := l.Report(ctx, o.d.Key())
				if err != nil || string(rep) != o.report {
					t.Fatalf("%s: saved report %q %v, want %q", what, rep, err, o.report)
				}
			}
			_ = row
		}
		if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
			t.Fatalf("%s: stats %+v %v: capacity understates", what, st, err)
		}
		// Every delivery's work finishes.
		for _, o := range ops {
			if state, _ := ledgertest.RowState(t, l, o.d); state == "" {
				ledgertest.MustAdmit(t, l, o.d)
			}
			ledgertest.FinishRow(t, l, clock, o.d)
		}
		clock.Advance(time.Minute)
		return injected.Load()
	}
	for _, mode := range crashModes[:2] {
		for step := 0; ; step++ {
			if step > 200 {
				t.Fatalf("%s: still failing after %d steps", mode.name, step)
			}
			if !run(fmt.Sprintf("%s step %d", mode.name, step), mode.rule(step), 0) {
				break
			}
			points++
		}
	}
	for round := 1; ; round++ {
		if !run(fmt.Sprintf("killed after round %d", round), nil, round) {
			break
		}
		points++
	}
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: limits, Clock: clock})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer p.Close()
	if v, err := p.Verify(ctx, nil); err != nil || !v.OK() {
		t.Fatalf("verify after crashes: %v %v", err, v.Problems)
	}
	t.Logf("%d crash points in groups of %d", points, n)
}
