package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// HistoryConfig sizes a history check: concurrent workers, each on handles of its own, drive
// deliveries of a sliding window of identities through the contract while a cleaner runs,
// clocks move and the harness injects faults; every call is recorded and the whole history is
// checked against Model, then the store's end state is checked.
type HistoryConfig struct {
	// Histories is how many independent histories run, each on a new store.
	Histories int
	// Workers is how many callers run at once; each has its own handle (its own process).
	Workers int
	// Steps is the number of calls each worker makes.
	Steps int
	// Keys is how many identities are alive at once; the window slides as the history runs,
	// so rows are finished, forgotten and admitted again.
	Keys int
	// Skew spreads the handles' clocks over [-Skew, +Skew] (stepping them from time to time).
	Skew time.Duration
	// FaultRate is the chance that one storage operation of a worker's or the cleaner's
	// handle is hit by a fault the harness chooses (crash, lost answer, held request...).
	FaultRate float64
	// Seed makes the choices of the workload repeatable (not the interleaving).
	Seed uint64
}

// HistoryStats is what a history check went through.
type HistoryStats struct {
	Histories, Ops, Unknown, Reopens, Removed, Rows int
	Faults                                          map[string]int
}

func (s HistoryStats) String() string {
	names := make([]string, 0, len(s.Faults))
	total := 0
	for n, c := range s.Faults {
		names = append(names, fmt.Sprintf("%s %d", n, c))
		total += c
	}
	sort.Strings(names)
	return fmt.Sprintf("%d histories, %d operations checked (%d with unknown outcome), %d faults injected %v, %d handles reopened after a fault, %d rows removed by cleanup, %d rows at the end",
		s.Histories, s.Ops, s.Unknown, total, names, s.Reopens, s.Removed, s.Rows)
}

// HistoryLimits are the limits history stores are created with: short windows, so that a
// few minutes of clock see rows admitted, finished, forgotten and admitted again.
func HistoryLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 10_000, SignedAgeCeiling: 20 * time.Second, QueueCeiling: 10 * time.Second,
		FutureSkew: 5 * time.Second, MaxSubjectBytes: 4 << 10, MaxReportBytes: 8 << 10}
}

const historyLease = 10 * time.Second

// RunHistories runs cfg.Histories history checks against the backend newHarness makes and
// fails t on the first history the model refuses or whose end state breaks the contract.
func RunHistories(t *testing.T, newHarness NewHarness, cfg HistoryConfig) HistoryStats {
	t.Helper()
	total := HistoryStats{Faults: map[string]int{}}
	for i := range cfg.Histories {
		c := cfg
		c.Seed = cfg.Seed + uint64(i)*7919
		st := runHistory(t, newHarness, c)
		total.Histories++
		total.Ops += st.Ops
		total.Unknown += st.Unknown
		total.Reopens += st.Reopens
		total.Removed += st.Removed
		total.Rows += st.Rows
		for k, v := range st.Faults {
			total.Faults[k] += v
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("history check: %s", total)
	return total
}

// world is one history's clocks: a base clock all others derive from, and the highest
// reading any of them gave (the ledger's now never exceeds it).
type world struct {
	base    *ledger.ManualClock
	maxRead atomic.Int64
	steps   bool // the base may step back (never for a store's own clock)
}

func (w *world) saw(t time.Time) {
	n := t.UnixNano()
	for {
		cur := w.maxRead.Load()
		if n <= cur || w.maxRead.CompareAndSwap(cur, n) {
			return
		}
	}
}

// hostClock is a handle's clock: the base moved by a skew that may step, recording reads.
type hostClock struct {
	w    *world
	skew atomic.Int64
}

func (c *hostClock) Now() time.Time {
	t := c.w.base.Now().Add(time.Duration(c.skew.Load()))
	c.w.saw(t)
	return t
}

// storeClock is the store's own clock (the base), recording reads.
type storeClock struct{ w *world }

func (c storeClock) Now() time.Time {
	t := c.w.base.Now()
	c.w.saw(t)
	return t
}

// recorder collects the operations of one history.
type recorder struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	seq atomic.Int64

	hwFloor atomic.Int64 // the high-water of the last completed cleanup
	unknown atomic.Int64

	verdicts sync.Map // evaluation id -> *sync.Map of report digests
	breaks   []string
}

func (r *recorder) add(o Op) {
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
	r.mu.Unlock()
	if o.Unknown {
		r.unknown.Add(1)
	}
}

// broken records a break of the contract seen outside the model.
func (r *recorder) broken(what string) {
	r.mu.Lock()
	r.breaks = append(r.breaks, what)
	r.mu.Unlock()
}

// verdict records a report seen for an evaluation (saved or handed out for publication).
func (r *recorder) verdict(eval, digest string) {
	m, _ := r.verdicts.LoadOrStore(eval, &sync.Map{})
	m.(*sync.Map).Store(digest, true)
}

// caller is one client of a history: a handle, the clock it decides with, and its bookkeeping.
type caller struct {
	id     int
	h      Harness
	l      ledger.Ledger
	host   *hostClock
	decide ledger.Clock
	w      *world
	rec    *recorder
	res    time.Duration
	opts   Options
	limits ledger.Limits
	faulty bool
}

// call records one call: its interval, the bounds of the ledger's now, and its answer.
func (c *caller) call(o Op, do func(o *Op) error) (Op, error) {
	o.Client = c.id
	lo1 := c.decide.Now()
	o.Call = c.rec.seq.Add(1)
	err := do(&o)
	o.Return = c.rec.seq.Add(1)
	lo2 := c.decide.Now()
	o.Lo = min(lo1.UnixNano(), lo2.UnixNano()) - int64(c.res)
	o.Hi = c.w.maxRead.Load()
	if class, known := ErrClass(err); known {
		o.Err = class
	} else {
		o.Unknown, o.Return, o.Hi = true, Timeless, Timeless
	}
	c.rec.add(o)
	return o, err
}

// reopen replaces the handle, as a process restarted after a crash (with faults of its own).
func (c *caller) reopen(ctx context.Context) error {
	if c.l != nil {
		c.l.Close()
	}
	if c.opts.Faults != nil {
		plan := *c.opts.Faults
		plan.Seed = plan.Seed*6364136223846793005 + 1442695040888963407
		c.opts.Faults = &plan
	}
	l, err := c.h.Open(ctx, c.limits, c.opts)
	if err != nil {
		return err
	}
	c.l = l
	return nil
}

func historyDelivery(id int, signedAt time.Time) ledger.Delivery {
	body := fmt.Appendf(nil, `{"history":%d}`, id)
	d := ledger.Delivery{Binding: ledger.Binding{Route: "history", Scheme: "standard-webhooks", Identity: fmt.Sprintf("h-%d", id),
		BodyDigest: ledger.SumBody(body)}, Subject: body, SignedAt: signedAt}
	if id%7 == 0 {
		d.Binding.Scheme, d.SignedAt = "github-sha256", time.Time{}
	}
	return d
}

func digest(b []byte) string { return ledger.SumBody(b).String() }

func runHistory(t *testing.T, newHarness NewHarness, cfg HistoryConfig) HistoryStats {
	t.Helper()
	ctx := context.Background()
	h, err := newHarness(ctx, t)
	if err != nil {
		t.Fatalf("new harness: %v", err)
	}
	defer h.Close()
	limits := HistoryLimits()
	w := &world{base: ledger.NewManualClock(Epoch), steps: !h.UsesStoreClock()}
	w.saw(Epoch)
	rec := &recorder{}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	var rngMu sync.Mutex
	newCaller := func(id int, faulty bool) *caller {
		rngMu.Lock()
		defer rngMu.Unlock()
		host := &hostClock{w: w}
		if cfg.Skew > 0 {
			host.skew.Store(rng.Int64N(2*int64(cfg.Skew)+1) - int64(cfg.Skew))
		}
		c := &caller{id: id, h: h, host: host, w: w, rec: rec, res: h.Resolution(), limits: limits, faulty: faulty}
		c.decide = host
		if h.UsesStoreClock() {
			c.decide = storeClock{w}
		}
		c.opts = Options{Clock: host, StoreClock: storeClock{w}, StrandedAfter: time.Minute, CleanupBatch: 50}
		if faulty && cfg.FaultRate > 0 {
			c.opts.Faults = &FaultPlan{Rate: cfg.FaultRate, Seed: rng.Uint64()}
		}
		if err := c.reopen(ctx); err != nil {
			t.Fatalf("open: %v", err)
		}
		return c
	}

	var window atomic.Int64
	var reopens atomic.Int64
	stop := make(chan struct{})
	var cleanerWG sync.WaitGroup
	cleaner := newCaller(cfg.Workers, true)
	cleanerWG.Add(1)
	go func() {
		defer cleanerWG.Done()
		cur := ledger.Cursor("")
		for {
			select {
			case <-stop:
				return
			default:
			}
			rep, err := cleanupRecorded(ctx, cleaner, cur)
			switch {
			case err == nil:
				cur = rep.Next
			case errors.Is(err, ledger.ErrBusy):
			default:
				reopens.Add(1)
				if err := cleaner.reopen(ctx); err != nil {
					t.Errorf("cleaner reopen: %v", err)
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for i := range cfg.Workers {
		c := newCaller(i, true)
		seed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker{c: c, rng: rand.New(rand.NewPCG(seed, uint64(i))), cfg: cfg, window: &window, held: map[int]*ledger.Staged{},
				leases: map[int]ledger.Lease{}}
			for step := range cfg.Steps {
				if i == 0 && step%10 == 9 {
					window.Add(1)
				}
				if err := wk.step(ctx); err != nil {
					reopens.Add(1)
					wk.forget()
					if err := c.reopen(ctx); err != nil {
						t.Errorf("worker %d reopen: %v", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	cleanerWG.Wait()
	if t.Failed() {
		return HistoryStats{}
	}

	// The end: a healthy handle finishes every row, then cleanup forgets what it may.
	fin := newCaller(cfg.Workers+1, false)
	defer fin.l.Close()
	cleaner.l.Close()
	rows := finishAll(t, ctx, fin)
	checkVerdicts(t, rec)
	for _, b := range rec.breaks {
		t.Errorf("%s", b)
	}
	w.base.Set(time.Unix(0, w.maxRead.Load()).Add(2 * (limits.SignedAgeCeiling + limits.QueueCeiling)))
	removed := 0
	for lap := 0; ; lap++ {
		if lap > 20 {
			t.Fatalf("cleanup keeps removing rows after 20 laps")
		}
		n := 0
		for cur := ledger.Cursor(""); ; {
			rep, err := cleanupRecorded(ctx, fin, cur)
			if err != nil {
				t.Fatalf("cleanup at the end: %v", err)
			}
			n += len(rep.Removed)
			if rep.Done {
				break
			}
			cur = rep.Next
		}
		removed += n
		if n == 0 {
			break
		}
	}
	if err := fin.reopen(ctx); err != nil {
		t.Fatalf("reopen at the end: %v", err)
	}
	st, err := fin.l.Stats(ctx)
	if err != nil {
		t.Fatalf("stats at the end: %v", err)
	}
	if st.CapacityUsed != st.Rows {
		t.Fatalf("after cleanup the capacity record counts %d slots for %d rows", st.CapacityUsed, st.Rows)
	}
	if st.Damaged != 0 || st.ByState[ledger.StatePending]+st.ByState[ledger.StateRunning]+st.ByState[ledger.StateSaved] != 0 {
		t.Fatalf("at the end: %+v: every row must be finished and legible", st)
	}
	_ = rows
	checkModel(t, rec, limits)
	return HistoryStats{Ops: len(rec.ops), Unknown: int(rec.unknown.Load()), Reopens: int(reopens.Load()), Removed: removed,
		Rows: int(st.Rows), Faults: h.Faults()}
}

// cleanupRecorded runs one cleanup pass and records the rows it reports removed, each as a
// removal over the pass's interval; it checks that the pass names each key at most once.
func cleanupRecorded(ctx context.Context, c *caller, cur ledger.Cursor) (ledger.CleanupReport, error) {
	lo1 := c.decide.Now()
	call := c.rec.seq.Add(1)
	rep, err := c.l.Cleanup(ctx, cur)
	ret := c.rec.seq.Add(1)
	lo2 := c.decide.Now()
	hi := c.w.maxRead.Load()
	seen := map[ledger.Key]bool{}
	for _, r := range rep.Removed {
		if seen[r.Key] {
			c.rec.broken(fmt.Sprintf("cleanup reported %s removed twice in one pass", r.Key))
		}
		seen[r.Key] = true
		c.rec.add(Op{Client: c.id, Key: r.Key, Kind: OpRemove, Eval: r.EvaluationID, Call: call, Return: ret,
			Lo: min(lo1.UnixNano(), lo2.UnixNano()) - int64(c.res), Hi: hi})
	}
	if err == nil {
		floor := rep.HighWater.UnixNano() - int64(c.res)
		for {
			cur := c.rec.hwFloor.Load()
			if floor <= cur || c.rec.hwFloor.CompareAndSwap(cur, floor) {
				break
			}
		}
	}
	return rep, err
}

// worker drives deliveries as runners and ingresses would, with a pause here and a stale
// lease there.
type worker struct {
	c      *caller
	rng    *rand.Rand
	cfg    HistoryConfig
	window *atomic.Int64
	held   map[int]*ledger.Staged // publishing leases, by identity
	leases map[int]ledger.Lease   // executing leases, by identity
	stale  []ledger.Lease
}

// forget drops what the worker holds: a restarted process remembers nothing.
func (k *worker) forget() {
	k.held = map[int]*ledger.Staged{}
	k.leases = map[int]ledger.Lease{}
}

// step makes one call. An error whose outcome is unknown is returned: the caller restarts.
func (k *worker) step(ctx context.Context) error {
	c := k.c
	id := int(k.window.Load()) + k.rng.IntN(k.cfg.Keys)
	now := c.w.base.Now()
	p := k.rng.Float64()
	switch {
	case p < 0.08:
		k.moveClock()
		return nil
	case p < 0.12 && len(k.stale) > 0:
		return k.replayStale(ctx)
	}
	if l, ok := k.leases[id]; ok {
		return k.execute(ctx, id, l)
	}
	if s, ok := k.held[id]; ok {
		return k.publish(ctx, id, s)
	}
	switch q := k.rng.Float64(); {
	case q < 0.45:
		return k.admit(ctx, id, now)
	case q < 0.95:
		return k.claim(ctx, id)
	default:
		d := historyDelivery(id, time.Time{})
		_, err := c.call(Op{Key: d.Key(), Kind: OpRevive}, func(o *Op) error {
			row, err := c.l.Revive(ctx, d.Key(), "")
			o.OutState = row.State
			return err
		})
		return unknownOnly(err)
	}
}

// unknownOnly keeps the errors whose outcome is unknown: the worker restarts on those.
func unknownOnly(err error) error {
	if _, known := ErrClass(err); known {
		return nil
	}
	return err
}

func (k *worker) moveClock() {
	w := k.c.w
	switch p := k.rng.Float64(); {
	case p < 0.05 && w.steps:
		w.base.Advance(-time.Duration(5+k.rng.IntN(20)) * time.Second) // a clock stepped back
	case p < 0.15 && !k.c.h.UsesStoreClock():
		// A host's clock stepped. (A backend on the store's clock measures elapsed time on
		// the monotonic clock, which never steps; its hosts differ only from handle to
		// handle.)
		k.c.host.skew.Store(int64(time.Duration(k.rng.IntN(2*int(k.cfg.Skew/time.Second)+1))*time.Second - k.cfg.Skew))
	default:
		w.base.Advance(time.Duration(1+k.rng.IntN(6)) * time.Second)
	}
}

func (k *worker) admit(ctx context.Context, id int, now time.Time) error {
	c := k.c
	signed := now.Add(-time.Duration(k.rng.IntN(4)) * time.Second).Truncate(time.Second)
	switch p := k.rng.Float64(); {
	case p < 0.15:
		signed = signed.Add(-time.Minute) // a replay of an old signature
	case p < 0.2:
		signed = signed.Add(20 * time.Second) // signed far ahead
	}
	d := historyDelivery(id, signed)
	o := Op{Key: d.Key(), Kind: OpAdmit, HWFloor: c.rec.hwFloor.Load()}
	if !d.SignedAt.IsZero() {
		o.SignedAt = d.SignedAt.UnixNano()
	}
	_, err := c.call(o, func(o *Op) error {
		a, err := c.l.Admit(ctx, d)
		o.Outcome, o.OutEval = a.Outcome.String(), a.EvaluationID
		if !a.RetainUntil.IsZero() {
			o.RetainUntil = a.RetainUntil.UnixNano()
		}
		return err
	})
	return unknownOnly(err)
}

func (k *worker) claim(ctx context.Context, id int) error {
	c := k.c
	d := historyDelivery(id, time.Time{})
	_, err := c.call(Op{Key: d.Key(), Kind: OpClaim, LeaseFor: historyLease}, func(o *Op) error {
		cl, err := c.l.Claim(ctx, d.Key(), d.Binding.Digest(), fmt.Sprintf("w%d", c.id), historyLease)
		if err != nil {
			return err
		}
		o.Outcome, o.OutEval = cl.Outcome.String(), cl.EvaluationID
		switch cl.Outcome {
		case ledger.Execute:
			o.OutFence, o.Expires = cl.Lease.Fence, cl.Lease.Expires.UnixNano()
			k.leases[id] = *cl.Lease
		case ledger.Publish:
			o.OutFence, o.Expires = cl.Staged.Lease.Fence, cl.Staged.Lease.Expires.UnixNano()
			o.OutReport = digest(cl.Staged.Report)
			c.rec.verdict(cl.EvaluationID, o.OutReport)
			k.held[id] = cl.Staged
		}
		return nil
	})
	return unknownOnly(err)
}

func (k *worker) leaseOp(kind OpKind, l ledger.Lease) Op {
	return Op{Key: l.Key, Kind: kind, Fence: l.Fence, Eval: l.EvaluationID, Phase: l.Phase}
}

// execute acts on an executing lease: save (mostly), renew, release, or a pause that lets it
// run out.
func (k *worker) execute(ctx context.Context, id int, l ledger.Lease) error {
	c := k.c
	switch p := k.rng.Float64(); {
	case p < 0.1:
		delete(k.leases, id)
		k.stale = append(k.stale, l)
		return nil // paused: the lease runs out while others move the clock
	case p < 0.25:
		o := k.leaseOp(OpRenew, l)
		o.LeaseFor = historyLease
		_, err := c.call(o, func(o *Op) error {
			nl, err := c.l.Renew(ctx, l, historyLease)
			if err == nil {
				o.Expires = nl.Expires.UnixNano()
				k.leases[id] = nl
			}
			return err
		})
		if err != nil {
			delete(k.leases, id)
		}
		return unknownOnly(err)
	case p < 0.33:
		delete(k.leases, id)
		o := k.leaseOp(OpRelease, l)
		nb := c.w.base.Now().Add(time.Duration(k.rng.IntN(3)) * time.Second)
		o.NotBefore = nb.UnixNano()
		_, err := c.call(o, func(o *Op) error { return c.l.Release(ctx, l, nb) })
		return unknownOnly(err)
	}
	delete(k.leases, id)
	report := fmt.Appendf(nil, "verdict of %s under fence %d by worker %d", l.EvaluationID, l.Fence, c.id)
	o := k.leaseOp(OpSave, l)
	o.Report = digest(report)
	_, err := c.call(o, func(o *Op) error {
		s, err := c.l.Save(ctx, l, report)
		if err == nil {
			c.rec.verdict(l.EvaluationID, digest(s.Report))
			k.held[id] = &s
		}
		return err
	})
	k.stale = append(k.stale, l)
	return unknownOnly(err)
}

// publish acts on a publishing lease: complete (mostly), abandon, release, renew.
func (k *worker) publish(ctx context.Context, id int, s *ledger.Staged) error {
	c := k.c
	delete(k.held, id)
	o := k.leaseOp(OpComplete, s.Lease)
	o.Report = digest(s.Report)
	var err error
	switch p := k.rng.Float64(); {
	case p < 0.08:
		o.Kind = OpAbandon
		_, err = c.call(o, func(*Op) error { return c.l.Abandon(ctx, *s, "the provider refuses it") })
	case p < 0.16:
		o.Kind = OpRelease
		o.NotBefore = c.w.base.Now().UnixNano()
		_, err = c.call(o, func(*Op) error { return c.l.Release(ctx, s.Lease, time.Unix(0, o.NotBefore)) })
	case p < 0.24:
		o.Kind, o.LeaseFor = OpRenew, historyLease
		_, err = c.call(o, func(o *Op) error {
			nl, err := c.l.Renew(ctx, s.Lease, historyLease)
			if err == nil {
				o.Expires = nl.Expires.UnixNano()
				renewed := *s
				renewed.Lease = nl
				k.held[id] = &renewed
			}
			return err
		})
	default:
		_, err = c.call(o, func(*Op) error { return c.l.Complete(ctx, *s) })
	}
	return unknownOnly(err)
}

// replayStale presents a lease the worker held before (a paused holder waking up): save,
// renew or release under it.
func (k *worker) replayStale(ctx context.Context) error {
	c := k.c
	i := k.rng.IntN(len(k.stale))
	l := k.stale[i]
	k.stale = append(k.stale[:i], k.stale[i+1:]...)
	var err error
	switch p := k.rng.Float64(); {
	case p < 0.5 && l.Phase == ledger.PhaseExecute:
		report := fmt.Appendf(nil, "late verdict of %s under fence %d by worker %d", l.EvaluationID, l.Fence, c.id)
		o := k.leaseOp(OpSave, l)
		o.Report = digest(report)
		_, err = c.call(o, func(o *Op) error {
			s, err := c.l.Save(ctx, l, report)
			if err == nil {
				c.rec.verdict(l.EvaluationID, digest(s.Report))
			}
			return err
		})
	case p < 0.8:
		o := k.leaseOp(OpRenew, l)
		o.LeaseFor = historyLease
		_, err = c.call(o, func(o *Op) error {
			nl, err := c.l.Renew(ctx, l, historyLease)
			if err == nil {
				o.Expires = nl.Expires.UnixNano()
			}
			return err
		})
	default:
		o := k.leaseOp(OpRelease, l)
		_, err = c.call(o, func(*Op) error { return c.l.Release(ctx, l, time.Time{}) })
	}
	return unknownOnly(err)
}

// finishAll drives every row to done or abandoned with a healthy handle, recording each call.
func finishAll(t *testing.T, ctx context.Context, c *caller) int {
	t.Helper()
	rows := 0
	for cur := ledger.Cursor(""); ; {
		page, err := c.l.Rows(ctx, cur, 200)
		if err != nil {
			t.Fatalf("rows at the end: %v", err)
		}
		if len(page.Damaged) > 0 {
			t.Fatalf("damaged rows at the end: %v", page.Damaged)
		}
		for _, row := range page.Rows {
			rows++
			finishRecorded(t, ctx, c, row)
		}
		if page.Next == "" {
			return rows
		}
		cur = page.Next
	}
}

func finishRecorded(t *testing.T, ctx context.Context, c *caller, row ledger.Row) {
	t.Helper()
	for range 20 {
		var cl ledger.Claim
		_, err := c.call(Op{Key: row.Key, Kind: OpClaim, LeaseFor: historyLease}, func(o *Op) error {
			var err error
			cl, err = c.l.Claim(ctx, row.Key, row.Binding.Digest(), "finisher", historyLease)
			if err != nil {
				return err
			}
			o.Outcome, o.OutEval = cl.Outcome.String(), cl.EvaluationID
			switch cl.Outcome {
			case ledger.Execute:
				o.OutFence, o.Expires = cl.Lease.Fence, cl.Lease.Expires.UnixNano()
			case ledger.Publish:
				o.OutFence, o.Expires, o.OutReport = cl.Staged.Lease.Fence, cl.Staged.Lease.Expires.UnixNano(), digest(cl.Staged.Report)
				c.rec.verdict(cl.EvaluationID, o.OutReport)
			}
			return nil
		})
		if errors.Is(err, ledger.ErrUnknownDelivery) {
			return // forgotten meanwhile
		}
		if err != nil {
			t.Fatalf("finish %s: claim: %v", row.Key, err)
		}
		var s ledger.Staged
		switch cl.Outcome {
		case ledger.ClaimDuplicate:
			return
		case ledger.Busy:
			if wait := cl.RetryAt.Sub(c.decide.Now()); wait >= 0 {
				c.w.base.Advance(wait + c.res + time.Nanosecond)
			}
			continue
		case ledger.Execute:
			report := fmt.Appendf(nil, "final verdict of %s", cl.EvaluationID)
			o := Op{Key: row.Key, Kind: OpSave, Fence: cl.Lease.Fence, Eval: cl.EvaluationID, Phase: ledger.PhaseExecute, Report: digest(report)}
			if _, err := c.call(o, func(*Op) error {
				var err error
				s, err = c.l.Save(ctx, *cl.Lease, report)
				return err
			}); err != nil {
				t.Fatalf("finish %s: save: %v", row.Key, err)
			}
			c.rec.verdict(cl.EvaluationID, digest(s.Report))
		case ledger.Publish:
			s = *cl.Staged
		}
		o := Op{Key: row.Key, Kind: OpComplete, Fence: s.Lease.Fence, Eval: s.Lease.EvaluationID, Phase: ledger.PhasePublish, Report: digest(s.Report)}
		if _, err := c.call(o, func(*Op) error { return c.l.Complete(ctx, s) }); err != nil {
			t.Fatalf("finish %s: complete: %v", row.Key, err)
		}
		return
	}
	t.Fatalf("finish %s: the row never finished", row.Key)
}

// checkVerdicts fails when an evaluation saved or handed out two different reports.
func checkVerdicts(t *testing.T, rec *recorder) {
	t.Helper()
	rec.verdicts.Range(func(eval, m any) bool {
		n := 0
		m.(*sync.Map).Range(func(any, any) bool { n++; return true })
		if n > 1 {
			t.Errorf("evaluation %s has %d different verdicts", eval, n)
		}
		return true
	})
}

// checkModel checks the whole history against the model; a refused history is written out as
// porcupine's visualization for reading.
func checkModel(t *testing.T, rec *recorder, limits ledger.Limits) {
	t.Helper()
	m := Model(limits, 0)
	res, info := porcupine.CheckOperationsVerbose(m, rec.ops, 5*time.Minute)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("the history of %d operations could not be checked within the time limit", len(rec.ops))
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("amiss-history-%d.html", time.Now().UnixNano()))
	if f, err := os.Create(path); err == nil {
		porcupine.Visualize(m, info, f)
		f.Close()
	}
	t.Fatalf("the history of %d operations is not linearizable under the contract's model (visualization: %s)", len(rec.ops), path)
}
