package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Attacks on the power-loss guarantees that the power-cut tests of powercut_test.go leave
// untried: a cleanup batch of many rows across shards (slots borrowed from other shards),
// group-commit rounds of several operations, operations FaultOps does not list.

// smallCapLimits has one slot per capacity shard: a second key in a shard borrows.
func smallCapLimits() ledger.Limits {
	l := testLimits()
	l.RecordCap = 256
	return l
}

func openPoweredWith(t testing.TB, fsys *powerfs.FS, clock *ledger.ManualClock, limits ledger.Limits, create bool) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: fsys, Create: create})
	if err != nil {
		t.Fatalf("open the root: %v", err)
	}
	return l
}

// checkPreparedRootWith is checkPreparedRoot for a root of the given limits; it also runs a
// cleanup lap first when lap is set (a lap settles what interrupted admissions left pending).
func checkPreparedRootWith(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock, limits ledger.Limits, lap bool, what string) {
	t.Helper()
	ctx := context.Background()
	p, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if err != nil {
		t.Fatalf("%s: prepare: %v", what, err)
	}
	defer p.Close()
	v, err := p.Verify(ctx, nil)
	if err != nil || !v.OK() {
		t.Fatalf("%s: verify: %v %v", what, err, v.Problems)
	}
	if lap {
		cleanupLap(t, p)
	}
	st, err := p.Stats(ctx)
	if err != nil || st.CapacityUsed != st.Rows {
		t.Fatalf("%s: after prepare: capacity %d for %d rows (%v)", what, st.CapacityUsed, st.Rows, err)
	}
}

// TestPowerCutCleanupBatchAcrossShards cuts the power at every step (see cutSteps) of one cleanup
// pass whose batch removes many rows held in several shards' slots (most borrowed: the root
// has one slot per shard and the keys crowd three row folders), beside rows it must keep. After
// each reboot: every kept row is exactly as it was, every removable row is either as it was or
// gone, capacity never understates, an answered pass removed every removable row and kept its
// high-water, a removed row's signature is stale even with the clock stepped back to before its
// retention ended (only the persisted high-water says so), and prepare plus a cleanup lap leave
// capacity equal to the rows.
func TestPowerCutCleanupBatchAcrossShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := smallCapLimits()
	start := epoch
	clock := ledger.NewManualClock(start)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	shards := []byte{0x20, 0x21, 0x22}
	var removable, kept []ledger.Delivery
	for i := range 15 {
		d := deliveryInShard(shards[i%len(shards)])
		switch i % 5 {
		case 4: // permanent and done: never removed
			ledgertest.MustAdmit(t, l, d)
			ledgertest.FinishRow(t, l, clock, d)
			kept = append(kept, d)
		case 3: // signed, still pending: never removed
			d.SignedAt = clock.Now()
			d.Binding.Scheme = "standard-webhooks"
			ledgertest.MustAdmit(t, l, d)
			kept = append(kept, d)
		default: // signed and done (one abandoned): removed once its retention ends
			d.SignedAt = clock.Now()
			d.Binding.Scheme = "standard-webhooks"
			ledgertest.MustAdmit(t, l, d)
			c := ledgertest.MustClaim(t, l, d, ledger.Execute)
			s := ledgertest.MustSave(t, l, *c.Lease, "verdict")
			if i == 1 {
				if err := l.Abandon(ctx, s, "gone"); err != nil {
					t.Fatal(err)
				}
			} else {
				ledgertest.MustComplete(t, l, s)
			}
			removable = append(removable, d)
		}
	}
	// Settled, as a busy root's records are: a slot still pending is given back by settling
	// whenever its row is missing, which would hide a removal whose release was lost.
	if err := localfs.SettleAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	// One slot per shard: all but one row of each crowded folder hold a borrowed slot.
	borrowed := 15 - len(shards)
	st, err := l.Stats(ctx)
	if err != nil || st.CapacityUsed != 15 || st.Rows != 15 {
		t.Fatalf("before: %+v %v", st, err)
	}
	l.Close()
	base.SyncAll()
	clock.Advance(3 * time.Hour) // every signed row's retention (65 minutes) has ended
	before := map[ledger.Key]ledger.Row{}
	{
		l := openPoweredWith(t, base.Clone(), clock, limits, false)
		for _, d := range append(append([]ledger.Delivery{}, removable...), kept...) {
			_, row := ledgertest.RowState(t, l, d)
			before[d.Key()] = row
		}
		l.Close()
	}
	points := 0
	steps := cutSteps(base, func(m *powerfs.FS) {
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		l.Cleanup(ctx, "")
		l.Close()
	})
	for _, step := range steps {
		fsys := base.Clone()
		faulty := openPoweredWith(t, fsys, clock, limits, false)
		fsys.ResetCalls()
		fsys.CutAfter(step)
		rep, err := faulty.Cleanup(ctx, "")
		answered := !fsys.IsCut()
		if answered && err != nil {
			t.Fatalf("cleanup failed with no cut: %v", err)
		}
		if answered && len(rep.Removed) != len(removable) {
			t.Fatalf("cleanup removed %d rows, want %d", len(rep.Removed), len(removable))
		}
		fsys.Cut()
		faulty.Close()
		for _, p := range append(syncPersistences(step), folderPersistences(fsys)...) {
			points++
			what := fmt.Sprintf("cleanup, power cut at step %d (answered %v), %s", step, answered, p)
			rebooted := fsys.Recover(p)
			// The machine comes back with its clock stepped back to the rows' admission:
			// only the persisted high-water keeps their signatures stale.
			back := ledger.NewManualClock(start.Add(time.Minute))
			l := openPoweredWith(t, rebooted, back, limits, false)
			for _, d := range kept {
				if state, row := ledgertest.RowState(t, l, d); state == "" || !reflect.DeepEqual(row, before[d.Key()]) {
					t.Fatalf("%s: kept row %s changed:\n got  %q %+v\n want %+v", what, d.Key().Short(), state, row, before[d.Key()])
				}
			}
			for _, d := range removable {
				state, row := ledgertest.RowState(t, l, d)
				switch {
				case state == "":
					a, err := l.Admit(ctx, d)
					if err != nil || a.Outcome != ledger.Stale {
						t.Fatalf("%s: removed row %s: its signature, replayed with the clock back, answered %v %v (want stale)", what, d.Key().Short(), a.Outcome, err)
					}
				case answered:
					t.Fatalf("%s: the answered pass removed %s, and it is back (%s)", what, d.Key().Short(), state)
				case !reflect.DeepEqual(row, before[d.Key()]):
					t.Fatalf("%s: removable row %s changed:\n got  %+v\n want %+v", what, d.Key().Short(), row, before[d.Key()])
				}
			}
			if answered {
				if st, err := l.Stats(ctx); err != nil || st.HighWater.Before(rep.HighWater) {
					t.Fatalf("%s: high-water %v after the answered pass persisted %v (%v)", what, st.HighWater, rep.HighWater, err)
				}
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, ledger.NewManualClock(clock.Now()), limits, true, what)
		}
	}
	t.Logf("%d power cuts of a batch of %d rows (%d holding borrowed slots)", points, len(removable), borrowed)
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
				if !slicesContains(o.allowed, state) {
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

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestPowerCutHistoriesCrowded runs the power-cut histories of TestPowerCutHistories (with
// Unclaim among the lifecycles) on a root of 16 slots, one in each of the first 16 shards,
// with keys spread over six row folders: most admissions borrow a slot from another shard,
// some are refused Full until cleanup gives slots back (an admission that meets Full finishes
// a crashed cleanup's batch first), and cleanup releases slots into shards other than the
// rows' folders.
func TestPowerCutHistoriesCrowded(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.RecordCap = 16
	powerCutHistories(t, limits, []byte{0x00, 0x05, 0x10, 0x11, 0x80, 0xff}, 8*powerScale())
}

func powerCutHistories(t *testing.T, limits ledger.Limits, shards []byte, histories int) {
	const (
		workers  = 4
		steps    = 40
		leaseFor = 24 * time.Hour
	)
	ctx := context.Background()
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPoweredWith(t, base, ledger.NewManualClock(epoch), limits, true).Close()
	base.SyncAll()
	fulls := atomic.Int64{}
	cuts, answered, removed, midway := 0, atomic.Int64{}, atomic.Int64{}, 0
	for h := range histories {
		rng := rand.New(rand.NewPCG(uint64(h), 7))
		clock := ledger.NewManualClock(epoch.Add(time.Duration(h) * time.Hour))
		fsys := base.Clone()
		l := openPoweredWith(t, fsys, clock, limits, false)
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
						if a.Outcome == ledger.Full {
							fulls.Add(1)
						}
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
							err = l.Unclaim(ctx, *lease, time.Time{})
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
			l := openPoweredWith(t, rebooted, clock, limits, false)
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
			checkPreparedRootWith(t, rebooted, clock, limits, false, what)
		}
	}
	t.Logf("%d histories (%d cut while running), %d operations answered, %d admissions answered Full, %d rows removed by cleanup, %d reboots",
		histories, midway, answered.Load(), fulls.Load(), removed.Load(), cuts)
	if midway == 0 || removed.Load() == 0 {
		t.Errorf("the histories never met a cut while running (%d) or never removed a row (%d): what they check went untried", midway, removed.Load())
	}
}

// syncFault is a process's view of a powerfs whose syncs go wrong while the machine, and its
// page cache, go on: the process dies (every sync fails from then on) at its first folder sync
// of a row folder (dieAtRowFolder: what it renamed stays in the page cache, nothing made it
// durable) or at its first syncfs (dieAtSyncFS), or a row folder's sync fails with an I/O
// error, once (failRowFolderOnce) or every time (failRowFolderAlways), and the process lives on.
type syncFault struct {
	*powerfs.FS
	dieAtRowFolder, dieAtSyncFS, failRowFolderOnce, failRowFolderAlways bool
	// dieAtFirstSync: the process dies at its first sync of any kind (a file's fsync or
	// write-back, a folder's sync, syncfs), whatever round its operation takes.
	dieAtFirstSync bool
	dead, failed   atomic.Bool
}

// OpenFile wraps files for dieAtFirstSync.
func (f *syncFault) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !f.dieAtFirstSync {
		return file, err
	}
	return &faultFile{File: file, f: f}, nil
}

// faultFile is a file of a syncFault that dies at its first sync.
type faultFile struct {
	vfs.File
	f *syncFault
}

func (w *faultFile) die() error {
	if w.f.dieAtFirstSync {
		w.f.dead.Store(true)
	}
	if w.f.dead.Load() {
		return errProcessDied
	}
	return nil
}

func (w *faultFile) Sync() error {
	if err := w.die(); err != nil {
		return err
	}
	return w.File.Sync()
}

func (w *faultFile) WriteBack() error {
	if err := w.die(); err != nil {
		return err
	}
	return vfs.WriteBack(w.File)
}

func (w *faultFile) CheckWriteback() error { return vfs.CheckWriteback(w.File) }

func (w *faultFile) Flock(how int) error { return vfs.Flock(w.File, how) }

var (
	errProcessDied      = errors.New("the process died")
	errFolderSyncFailed = errors.New("sync folder: input/output error")
)

func (f *syncFault) SyncDir(name string) error {
	row := strings.Contains(name, "/"+localfs.RowsDir+"/")
	if row && f.dieAtRowFolder || f.dieAtFirstSync {
		f.dead.Store(true)
	}
	if f.dead.Load() {
		return errProcessDied
	}
	if row && (f.failRowFolderAlways || f.failRowFolderOnce && f.failed.CompareAndSwap(false, true)) {
		return errFolderSyncFailed
	}
	return f.FS.SyncDir(name)
}

func (f *syncFault) SyncFS(name string) error {
	if f.dieAtSyncFS || f.dieAtFirstSync {
		f.dead.Store(true)
	}
	if f.dead.Load() {
		return errProcessDied
	}
	return f.FS.SyncFS(name)
}

// TestPowerCutAfterAProcessCrashLosesNoAnsweredAdmission: a process dies in an admission after
// renaming the row into place and before syncing its folder (an OOM kill, a Lambda timeout),
// so the row is in the page cache and not on disk. The sender retries, a new process answers
// the retry (Pending: the row is there, "already admitted"), and then the power goes. The
// answered admission must still be there after the reboot (file-ledger.md: "the sender was
// told 202 and will not send again"; here it was told 200).
func TestPowerCutAfterAProcessCrashLosesNoAnsweredAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	d := newDelivery(time.Time{})
	first := openOn(t, dying, clock)
	if _, err := first.Admit(ctx, d); err == nil {
		t.Fatal("the admission was answered although its process died before the folder sync")
	}
	first.Close()
	// A new process answers the sender's retry.
	second := openPowered(t, fsys, clock, false)
	// Answered Pending ("already admitted; queued again": HTTP 200 from the ingress, which
	// also enqueues it), the sender stops sending, as it does for Admitted.
	a, err := second.Admit(ctx, d)
	if err != nil || (a.Outcome != ledger.Admitted && a.Outcome != ledger.Pending) {
		t.Fatalf("retry: %+v %v", a, err)
	}
	second.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the retry was answered %v (evaluation %s)", a.Outcome, a.EvaluationID), "pending")
}

// TestPowerCutAfterAProcessCrashKeepsAPublishedVerdict: a worker's process dies in a Save after
// renaming the saved row into place and before syncing its folder. A new worker claims the row,
// is told to publish the saved verdict (read from the page cache), publishes it and completes;
// then the power goes. After the reboot the row must not run again: its verdict was published,
// and a second evaluation could publish another (file-ledger.md: "the verdict is published next
// and must never be evaluated again").
func TestPowerCutAfterAProcessCrashKeepsAPublishedVerdict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys, d := poweredRootWithARow(t, clock)
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	first := openOn(t, dying, clock)
	lease := *ledgertest.MustClaim(t, first, d, ledger.Execute).Lease
	if _, err := first.Save(ctx, lease, []byte("first verdict")); err == nil {
		t.Fatal("the save was answered although its process died before the folder sync")
	}
	first.Close()
	clock.Advance(2 * time.Hour) // the dead worker's lease has run out
	second := openPowered(t, fsys, clock, false)
	c := ledgertest.MustClaim(t, second, d, ledger.Publish)
	if string(c.Staged.Report) != "first verdict" {
		t.Fatalf("publishing %q", c.Staged.Report)
	}
	ledgertest.MustComplete(t, second, *c.Staged) // published
	second.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the verdict %q was published: a row neither saved nor done is evaluated again", c.Staged.Report),
		"saved", "done")
}
