package localfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Group commit (durable.go): rounds that gather operations of every kind, the process killed at
// every step of a round, and the power cut at every step.

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

// groupOp is one operation of a power-cut group-commit round.
type groupOp struct {
	name string
	d    ledger.Delivery
	// run performs it on l; durable says whether its answer promises a power loss keeps it.
	run     func(l ledger.Ledger) error
	durable bool
	// allowed are the states the row may be in after the reboot when the answer promises
	// nothing ("" for absent); want, when the answer promises, is the state it must be in.
	allowed []string
	want    string
	report  string
	fence   uint64
	// check, for an answered durable operation, checks the row further.
	check func(row ledger.Row) error
}

// TestPowerCutGroupCommitRound runs operations of every kind at once in one process whose
// group-commit rounds gather them (admissions borrowing a slot from another shard, a
// re-admission that lengthens retention, a save, a complete, an unclaim, a renew, a release,
// a revive), and cuts the power at every change and sync of the group in turn, then after the
// answers. After each reboot: answered durable operations are kept as answered, the others
// left nothing or their whole effect, rows are legible, capacity never understates, every
// row's work finishes, and the prepared root's capacity equals its rows.
func TestPowerCutGroupCommitRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := smallCapLimits()
	clock := ledger.NewManualClock(epoch)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	var ops []*groupOp
	signed := func(d ledger.Delivery) ledger.Delivery {
		d.SignedAt = clock.Now()
		d.Binding.Scheme = "standard-webhooks"
		return d
	}
	// Two admissions into a full folder (0x30 holds one row already): both borrow.
	ledgertest.MustAdmit(t, l, deliveryInShard(0x30))
	for range 2 {
		d := deliveryInShard(0x30)
		ops = append(ops, &groupOp{name: "admit-borrowing", d: d, durable: true, want: "pending", allowed: []string{"", "pending"},
			run: func(l ledger.Ledger) error {
				a, err := l.Admit(ctx, d)
				if err == nil && a.Outcome != ledger.Admitted {
					err = fmt.Errorf("answered %v", a.Outcome)
				}
				return err
			}})
		o := ops[len(ops)-1]
		o.check = func(row ledger.Row) error {
			if row.Attempts != 0 || row.Fence != 0 {
				return fmt.Errorf("not a fresh row: %+v", row)
			}
			return nil
		}
	}
	{
		d := signed(deliveryInShard(0x31))
		ledgertest.MustAdmit(t, l, d)
		later := d
		later.SignedAt = clock.Now().Add(30 * time.Second)
		var answer ledger.Admission
		ops = append(ops, &groupOp{name: "readmit-later-signature", d: d, durable: true, want: "pending", allowed: []string{"pending"},
			run: func(l ledger.Ledger) (err error) { answer, err = l.Admit(ctx, later); return err },
			check: func(row ledger.Row) error {
				if !row.RetainUntil.Equal(answer.RetainUntil) || !row.SignedAt.Equal(later.SignedAt) {
					return fmt.Errorf("retention %v (signed %v), answered %v", row.RetainUntil, row.SignedAt, answer.RetainUntil)
				}
				return nil
			}})
	}
	{
		d := deliveryInShard(0x31)
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
		o := &groupOp{name: "save", d: d, durable: true, want: "saved", allowed: []string{"running", "saved"}, report: "verdict of the round", fence: lease.Fence}
		o.run = func(l ledger.Ledger) error { _, err := l.Save(ctx, lease, []byte(o.report)); return err }
		ops = append(ops, o)
	}
	{
		d := signed(deliveryInShard(0x32))
		ledgertest.MustAdmit(t, l, d)
		s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "r")
		ops = append(ops, &groupOp{name: "complete", d: d, allowed: []string{"saved", "done"},
			run: func(l ledger.Ledger) error { return l.Complete(ctx, s) }})
	}
	{
		d := deliveryInShard(0x32)
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
		ops = append(ops, &groupOp{name: "unclaim", d: d, allowed: []string{"running", "pending"},
			run: func(l ledger.Ledger) error { return l.Unclaim(ctx, lease, time.Time{}) }})
	}
	{
		d := deliveryInShard(0x33)
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
		ops = append(ops, &groupOp{name: "renew", d: d, allowed: []string{"running"},
			run: func(l ledger.Ledger) error { _, err := l.Renew(ctx, lease, time.Hour); return err }})
	}
	{
		d := deliveryInShard(0x33)
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
		ops = append(ops, &groupOp{name: "release", d: d, allowed: []string{"running", "pending"},
			run: func(l ledger.Ledger) error { return l.Release(ctx, lease, time.Time{}) }})
	}
	{
		d := signed(deliveryInShard(0x30))
		ledgertest.MustAdmit(t, l, d)
		s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "abandoned verdict")
		if err := l.Abandon(ctx, s, "422"); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &groupOp{name: "revive", d: d, durable: true, want: "saved", allowed: []string{"abandoned", "saved"},
			run: func(l ledger.Ledger) error { _, err := l.Revive(ctx, d.Key(), s.Lease.EvaluationID); return err }})
	}
	l.Close()
	base.SyncAll()
	before := map[ledger.Key]ledger.Row{}
	{
		l := openPoweredWith(t, base.Clone(), clock, limits, false)
		for _, o := range ops {
			_, before[o.d.Key()] = ledgertest.RowState(t, l, o.d)
		}
		l.Close()
	}
	points, steps := 0, 0
	var biggest atomic.Int32
	for step := 0; ; step++ {
		if step > 400 {
			t.Fatalf("the group still runs after %d cuts", step)
		}
		fsys := base.Clone()
		faulty := openPoweredWith(t, fsys, clock, limits, false)
		localfs.SetSyncGatherForTest(faulty, len(ops), 20*time.Millisecond)
		localfs.SetAfterSyncForTest(faulty, func(n int) {
			for m := biggest.Load(); n > int(m) && !biggest.CompareAndSwap(m, int32(n)); m = biggest.Load() {
			}
		})
		fsys.CutAfter(step)
		errs := make([]error, len(ops))
		done := make(chan int)
		for i, o := range ops {
			go func() { errs[i] = o.run(faulty); done <- i }()
		}
		for range ops {
			<-done
		}
		answered := !fsys.IsCut()
		for i, o := range ops {
			if answered && errs[i] != nil {
				t.Fatalf("%s failed with no cut: %v", o.name, errs[i])
			}
		}
		fsys.Cut()
		faulty.Close()
		if step%2 == 1 && powerScale() == 1 && !answered {
			continue // every other step in make test; every step in make powercut
		}
		steps++
		for _, p := range stepPersistences(step) {
			points++
			what := fmt.Sprintf("group, power cut at step %d (answered %v), %s", step, answered, p)
			rebooted := fsys.Recover(p)
			clock := ledger.NewManualClock(clock.Now())
			l := openPoweredWith(t, rebooted, clock, limits, false)
			for i, o := range ops {
				state, row := ledgertest.RowState(t, l, o.d)
				if errs[i] == nil && o.durable {
					if state != o.want {
						t.Fatalf("%s: answered %s not kept: the row is %q, want %q", what, o.name, state, o.want)
					}
					if o.check != nil {
						if err := o.check(row); err != nil {
							t.Fatalf("%s: answered %s not kept: %v", what, o.name, err)
						}
					}
				}
				if !slices.Contains(o.allowed, state) {
					t.Fatalf("%s: %s (answer %v) left the row %q, want one of %q", what, o.name, errs[i], state, o.allowed)
				}
				if b, ok := before[o.d.Key()]; ok && state != "" && row.Fence < b.Fence {
					t.Fatalf("%s: %s: fence went back from %d to %d", what, o.name, b.Fence, row.Fence)
				}
				if o.name == "save" && state == "saved" {
					if rep, err := l.Report(ctx, o.d.Key()); err != nil || string(rep) != o.report {
						t.Fatalf("%s: saved report %q %v", what, rep, err)
					}
				}
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			for _, o := range ops {
				if state, _ := ledgertest.RowState(t, l, o.d); state == "" {
					ledgertest.MustAdmit(t, l, o.d)
				}
				ledgertest.FinishRow(t, l, clock, o.d)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, clock, limits, true, what)
		}
		if answered {
			break
		}
	}
	if biggest.Load() < 4 {
		t.Errorf("no group-commit round carried more than %d requests", biggest.Load())
	}
	t.Logf("%d power cuts over %d steps of a group of %d operations (rounds of up to %d requests)", points, steps, len(ops), biggest.Load())
}
