package ledgertest

import (
	"context"
	"encoding/json"
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
	// StoreSkew, for a backend on the store's clock, makes the store many nodes whose clocks
	// disagree: each handle talks to a node of its own, set at most StoreSkew from the base,
	// and from time to time a node's clock steps forward (up to StoreSkew from the base) and
	// later back, while requests may be held in flight. A handle reads that node's time in
	// every Date; the deliveries a worker signs are signed at its node's time. Zero: the store
	// has one clock, the base.
	StoreSkew time.Duration
	// FaultRate is the chance that one storage operation of a worker's or the cleaner's
	// handle is hit by a fault the harness chooses (crash, lost answer, held request...).
	FaultRate float64
	// Seed makes the choices of the workload repeatable (not the interleaving).
	Seed uint64
	// Forget moves the clock past the subject horizon (and the request life) four times in each
	// history, the workers parked between two calls, and the cleaner forgets what nothing can
	// land on before they go on, so that subject records and rows are forgotten during the
	// history, amid the faults; a run that forgot no subject record fails. It needs every
	// process to share the history's provider (one process).
	Forget bool
}

// HistoryStats is what a history check went through.
type HistoryStats struct {
	Histories, Ops, Unknown, Reopens, Removed, Rows int
	// Faults counts the faults the harness injected, by kind (HeldAcrossStep is not one).
	Faults map[string]int
	// StoreSteps counts the steps of the store's nodes' clocks (HistoryConfig.StoreSkew), and
	// HeldAcrossSteps the requests held in flight while one was made (Faults[HeldAcrossStep]).
	StoreSteps, HeldAcrossSteps int
	// SubjectCalls counts the calls on subject records, Posts the statuses posted under their
	// grants, and Superseded the verdicts a newer one superseded.
	SubjectCalls, Posts, Superseded int
	// SubjectsRemoved counts the subject records the cleaner forgot while the workers ran
	// (FinishHistory's own passes are not counted), and LateGrants the grants to post that
	// were late (the poster read back what stood first).
	SubjectsRemoved, LateGrants int
}

// HeldAcrossStep is the kind under which a harness counts, in Harness.Faults, the requests it
// held in flight (or copied and delivered later) while a clock of the store stepped: it
// compares NodeClock.Steps when it holds a request and when it lets it land.
const HeldAcrossStep = "held-across-clock-step"

// NodeClock is the store clock a handle is given (Options.StoreClock) when the store is nodes
// whose clocks disagree and step (HistoryConfig.StoreSkew): the clock of the node the handle
// talks to. A harness stamps the Date of every answer it lets reach the handle with Answer
// (Now serves every other reading), and counts held requests across Steps, the steps of every
// node's clock so far.
type NodeClock interface {
	ledger.Clock
	Answer() time.Time
	Steps() int64
	// Holding is told by a harness that holds one of the handle's requests in flight, before
	// it lets the request land (not for a copy sent later): the first request a history
	// holds so sees its node's clock step meanwhile, so that every history checks what a
	// step does to a request in flight, however the workers' own steps fall.
	Holding()
}

func (s HistoryStats) String() string {
	names := make([]string, 0, len(s.Faults))
	total := 0
	for n, c := range s.Faults {
		if n == HeldAcrossStep {
			continue
		}
		names = append(names, fmt.Sprintf("%s %d", n, c))
		total += c
	}
	sort.Strings(names)
	return fmt.Sprintf("%d histories, %d operations checked (%d with unknown outcome), %d faults injected %v, %d handles reopened after a fault, %d rows removed by cleanup, %d rows at the end, %d steps of a store node's clock, %d held requests spanned one, %d subject calls, %d posts, %d verdicts superseded, %d subject records forgotten while workers ran, %d late grants",
		s.Histories, s.Ops, s.Unknown, total, names, s.Reopens, s.Removed, s.Rows, s.StoreSteps, s.HeldAcrossSteps, s.SubjectCalls, s.Posts, s.Superseded,
		s.SubjectsRemoved, s.LateGrants)
}

// HistoryLimits are the limits history stores are created with: short windows, so that a
// few minutes of clock see rows admitted, finished, forgotten and admitted again.
func HistoryLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 10_000, SignedAgeCeiling: 20 * time.Second, QueueCeiling: 10 * time.Second,
		FutureSkew: 5 * time.Second, MaxChangeBytes: 4 << 10, MaxReportBytes: 8 << 10}
}

const historyLease = 10 * time.Second

// RunHistories runs cfg.Histories history checks against the backend newHarness makes, its
// callers goroutines of one process, and fails t on the first history the model refuses or
// whose end state breaks the contract.
func RunHistories(t *testing.T, newHarness NewHarness, cfg HistoryConfig) HistoryStats {
	t.Helper()
	total := HistoryStats{Faults: map[string]int{}}
	for i := range cfg.Histories {
		c := cfg
		c.Seed = cfg.Seed + uint64(i)*7919
		st := runHistory(t, newHarness, c)
		total.add(st)
		if t.Failed() {
			break
		}
	}
	t.Logf("history check: %s", total)
	if !t.Failed() && total.Removed == 0 {
		// The S3 histories once ran for months removing nothing (a row outlived every
		// history's span of time), and nobody saw that removal went unchecked.
		t.Errorf("no history removed a row: cleanup's removals went unchecked (does the backend forget rows within a history's span of time?)")
	}
	if !t.Failed() && cfg.Forget && total.SubjectsRemoved == 0 {
		// The S3 histories once forgot no subject record at all, and a held copy of a
		// record's create landing after its forgetting went unseen.
		t.Errorf("no history forgot a subject record while its workers ran: the forgetting of subject records went unchecked")
	}
	if !t.Failed() && cfg.StoreSkew > 0 && total.HeldAcrossSteps == 0 {
		t.Errorf("no held request spanned a step of the store's clock (%d steps): the histories did not check what a step does to a request in flight", total.StoreSteps)
	}
	return total
}

func (s *HistoryStats) add(o HistoryStats) {
	s.Histories++
	s.Ops += o.Ops
	s.Unknown += o.Unknown
	s.Reopens += o.Reopens
	s.Removed += o.Removed
	s.Rows += o.Rows
	s.StoreSteps += o.StoreSteps
	s.HeldAcrossSteps += o.HeldAcrossSteps
	s.SubjectCalls += o.SubjectCalls
	s.Posts += o.Posts
	s.Superseded += o.Superseded
	s.SubjectsRemoved += o.SubjectsRemoved
	s.LateGrants += o.LateGrants
	if s.Faults == nil {
		s.Faults = map[string]int{}
	}
	for k, v := range o.Faults {
		s.Faults[k] += v
	}
}

func runHistory(t *testing.T, newHarness NewHarness, cfg HistoryConfig) HistoryStats {
	t.Helper()
	ctx := context.Background()
	h, err := newHarness(ctx, t)
	if err != nil {
		t.Fatalf("new harness: %v", err)
	}
	defer h.Close()
	sink := &memSink{}
	env := &HistoryEnv{
		Open: func(ctx context.Context, o Options) (ledger.Ledger, error) {
			return h.Open(ctx, HistoryLimits(), o)
		},
		World: newMemWorld(), Sink: sink, Resolution: h.Resolution(), StoreClocked: h.UsesStoreClock(),
		Steps: !h.UsesStoreClock(), Config: cfg,
	}
	// The root is made first, without faults: the history checks the ledger's operations, and
	// making a root is a one-time step with tests of its own.
	first, err := newCaller(ctx, env, cfg.Workers+1, false, rand.New(rand.NewPCG(cfg.Seed, 0)))
	if err != nil {
		t.Fatalf("make the root: %v", err)
	}
	first.l.Close()
	var reopens atomic.Int64
	stop := make(chan struct{})
	cleaned := make(chan int, 1)
	go func() { cleaned <- RunHistoryCleaner(ctx, env, cfg.Workers, cfg.Seed, stop) }()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	for i := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := RunHistoryWorker(ctx, env, i, cfg.Seed+uint64(i)*104729)
			reopens.Add(int64(n))
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(stop)
	reopens.Add(int64(<-cleaned))
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	forgotten := int(env.subjectsRemoved.Load()) // before FinishHistory's passes
	removed, st := FinishHistory(t, ctx, env, cfg.Workers+1)
	ops := sink.ops
	CheckHistory(t, ops, HistoryLimits(), h.Resolution())
	faults := h.Faults()
	out := HistoryStats{Ops: len(ops), Reopens: int(reopens.Load()), Removed: removed,
		Rows: int(st.Rows), Faults: faults, StoreSteps: int(env.nodeSteps.Load()), HeldAcrossSteps: faults[HeldAcrossStep],
		SubjectsRemoved: forgotten}
	out.CountOps(ops)
	return out
}

// CountOps counts, in ops, the calls of unknown outcome and the subject calls, posts and
// verdicts superseded.
func (s *HistoryStats) CountOps(ops []Op) {
	for _, o := range ops {
		switch {
		case o.Unknown:
			s.Unknown++
		case o.Kind == OpPost:
			s.Posts++
		case o.Kind == OpSupersede && o.Err == "":
			s.Superseded++
		case o.Kind == OpAcquireSubject && o.Late:
			s.LateGrants++
		}
		if o.Kind == OpAcquireSubject || o.Kind == OpReportSubject {
			s.SubjectCalls++
		}
	}
}

// HistoryWorld is what every caller of one history shares, across goroutines or processes: a
// base clock all others derive from, the highest reading any clock gave (the ledger's now
// never exceeds it), the real-time order of calls, the window of live identities, and the
// high-water of the last completed cleanup.
type HistoryWorld interface {
	// Now reads the base clock; Advance moves it (back when negative). SteppedBack is the
	// sum of every step back so far: a clock read during a call is no lower than its reading
	// at the call less the steps back until the call returned.
	Now() time.Time
	Advance(d time.Duration)
	SteppedBack() int64
	// Saw records a clock reading; MaxRead is the highest recorded (Unix nanoseconds).
	// SawStore records a reading of the store's own clock (and Saw's it too); MaxStoreRead
	// is the highest of those: the bound of the now of a ledger that decides on the store's
	// clock, which host clocks ahead of it must not loosen.
	Saw(t time.Time)
	MaxRead() int64
	SawStore(t time.Time)
	MaxStoreRead() int64
	// Tick returns the next instant of the history's real-time order.
	Tick() int64
	// Window is the lowest live identity; Slide moves the window on by one.
	Window() int64
	Slide()
	// HWFloor is the lowest now a completed cleanup guarantees every later admission;
	// RaiseHWFloor raises it.
	HWFloor() int64
	RaiseHWFloor(n int64)
}

// OpSink receives the calls of a history.
type OpSink interface {
	// Begin is told of a call about to be made, with an unknown outcome: a process that
	// dies during the call leaves it so.
	Begin(o Op)
	// End is told of the call as it returned.
	End(o Op)
}

// memWorld is the world of callers in one process.
type memWorld struct {
	base     *ledger.ManualClock
	back     atomic.Int64
	maxRead  atomic.Int64
	maxStore atomic.Int64
	seq      atomic.Int64
	window   atomic.Int64
	hw       atomic.Int64
}

func newMemWorld() *memWorld {
	w := &memWorld{base: ledger.NewManualClock(Epoch)}
	w.SawStore(Epoch)
	return w
}

func (w *memWorld) Now() time.Time { return w.base.Now() }
func (w *memWorld) Advance(d time.Duration) {
	if d < 0 {
		w.back.Add(int64(-d)) // counted first: a reader that sees the step sees it counted
	}
	w.base.Advance(d)
}
func (w *memWorld) SteppedBack() int64 { return w.back.Load() }
func (w *memWorld) Saw(t time.Time)    { RaiseInt64(&w.maxRead, t.UnixNano()) }
func (w *memWorld) MaxRead() int64     { return w.maxRead.Load() }
func (w *memWorld) SawStore(t time.Time) {
	RaiseInt64(&w.maxStore, t.UnixNano())
	w.Saw(t)
}
func (w *memWorld) MaxStoreRead() int64  { return w.maxStore.Load() }
func (w *memWorld) Tick() int64          { return w.seq.Add(1) }
func (w *memWorld) Window() int64        { return w.window.Load() }
func (w *memWorld) Slide()               { w.window.Add(1) }
func (w *memWorld) HWFloor() int64       { return w.hw.Load() }
func (w *memWorld) RaiseHWFloor(n int64) { RaiseInt64(&w.hw, n) }

// RaiseInt64 raises v to at least n.
func RaiseInt64(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// memSink keeps the calls of a history in memory.
type memSink struct {
	mu  sync.Mutex
	ops []Op
}

func (s *memSink) Begin(Op) {}
func (s *memSink) End(o Op) {
	s.mu.Lock()
	s.ops = append(s.ops, o)
	s.mu.Unlock()
}

// hostClock is a handle's clock: the base moved by a skew that may step, recording reads.
// Wall is its wall clock, which a suspension of the host (the skew falling behind, on a
// backend on the store's clock) does not hold back.
type hostClock struct {
	w         HistoryWorld
	skew      atomic.Int64
	suspended atomic.Int64 // how far suspensions held Now back
}

func (c *hostClock) Now() time.Time {
	t := c.w.Now().Add(time.Duration(c.skew.Load()))
	c.w.Saw(t)
	return t
}

func (c *hostClock) Wall() time.Time {
	return c.w.Now().Add(time.Duration(c.skew.Load() + c.suspended.Load()))
}

// storeClock is the store's own clock (the base), recording reads.
type storeClock struct{ w HistoryWorld }

func (c storeClock) Now() time.Time {
	t := c.w.Now()
	c.w.SawStore(t)
	return t
}

// nodeClock is the clock of one node of the store (HistoryConfig.StoreSkew): the base moved
// by the node's offset, which steps forward and back. Reads are recorded as the store's. Only
// the worker whose handle talks to the node steps it, between its calls, and the harness under
// the first request a history holds in flight (NodeClock.Holding), while its caller waits.
type nodeClock struct {
	w      HistoryWorld
	steps  *atomic.Int64 // every node's steps (HistoryEnv.nodeSteps)
	home   time.Duration // the node's offset when its clock is right by its own account
	offset atomic.Int64
	// limit is how far from the base a step forward may take the clock (Config.StoreSkew);
	// heldStep is set once a step was made under a held request (HistoryEnv.heldStep).
	limit    time.Duration
	heldStep *atomic.Bool
}

func (c *nodeClock) Now() time.Time {
	t := c.w.Now().Add(time.Duration(c.offset.Load()))
	c.w.SawStore(t)
	return t
}

// handleNode is a node's clock as one handle sees it (Options.StoreClock, a NodeClock): it
// keeps the latest Date the handle was answered with, and the node's offset then. Each handle
// has its own, so that the late answer of a handle that died counts for none that came after
// it.
type handleNode struct {
	*nodeClock
	answered atomic.Int64 // Unix nanoseconds; zero before the first answer
	// lastOffset is the node's offset from the base when it last answered the handle; valid
	// once answered is not zero.
	lastOffset atomic.Int64
}

func (c *handleNode) Answer() time.Time {
	off := c.offset.Load()
	t := c.w.Now().Add(time.Duration(off))
	c.w.SawStore(t)
	c.lastOffset.Store(off)
	RaiseInt64(&c.answered, t.UnixNano())
	return t
}

// sawEstimate records, as a reading of the store's clock, the highest estimate of the store's
// time the handle can make now without asking: the latest Date it was answered with plus the
// time elapsed since, which is the base now moved by the node's offset when it answered. The
// node's clock may have stepped back since: the estimate then runs ahead of every clock of the
// store by the step, until the handle's next answer, and the ledger decides on it (a lease
// decided on a cached row); the history's bound of the ledger's now must count it, as it
// counts every other reading of a clock the ledger decides on. (A suspended host measures
// less elapsed time: its estimate is lower, never higher.)
func (c *handleNode) sawEstimate() {
	if c.answered.Load() == 0 {
		return
	}
	c.w.SawStore(c.w.Now().Add(time.Duration(c.lastOffset.Load())))
}

// handleHost is a handle's host clock (Options.Clock) on a store of nodes: every reading of
// it, which the handle makes to estimate the store's time, records that estimate
// (handleNode.sawEstimate), after the host's reading, so that no estimate made from it is
// higher than what was recorded.
type handleHost struct {
	*hostClock
	node *handleNode
}

func (h handleHost) Now() time.Time {
	t := h.hostClock.Now()
	h.node.sawEstimate()
	return t
}

func (c *handleNode) Steps() int64 { return c.steps.Load() }

// Holding steps the node's clock under the first request a history holds in flight. The
// handle's caller is inside that call, so the node's own worker, which steps it only between
// its calls, does not step it at the same time.
func (c *handleNode) Holding() {
	if !c.heldStep.CompareAndSwap(false, true) {
		return
	}
	c.step(rand.New(rand.NewPCG(uint64(c.w.Now().UnixNano()), 0)), c.limit)
}

// cachedNow bounds from below the now of a decision the handle makes without asking the store:
// its estimate of the store's time, never below the latest Date it was answered with, may be
// behind its node's clock (the node stepped forward, or the host was suspended, since).
func (c *handleNode) cachedNow() time.Time {
	now := c.Now()
	if a := c.answered.Load(); a != 0 && a < now.UnixNano() {
		return time.Unix(0, a)
	}
	return now
}

// step moves the node's clock forward, to at most limit from the base (a second at least),
// or back home when it is ahead.
func (c *nodeClock) step(rng *rand.Rand, limit time.Duration) {
	next := c.home
	if time.Duration(c.offset.Load()) == c.home {
		next = c.home + time.Second + time.Duration(rng.Int64N(int64(max(time.Second, limit-c.home))))
	}
	c.offset.Store(int64(next))
	c.steps.Add(1)
}

// HistoryEnv is what the callers of a history need: how to open a handle, the world, where the
// calls go, and what the backend is like.
type HistoryEnv struct {
	// Open opens a new handle with the given options (clocks, faults, cleanup settings).
	Open  func(ctx context.Context, o Options) (ledger.Ledger, error)
	World HistoryWorld
	Sink  OpSink
	// Resolution and StoreClocked are the harness's (Resolution, UsesStoreClock).
	Resolution   time.Duration
	StoreClocked bool
	// Steps says whether the base clock may step back (never for a store's own clock).
	Steps  bool
	Config HistoryConfig

	nodeSteps       atomic.Int64 // steps of the store's nodes' clocks (Config.StoreSkew)
	heldStep        atomic.Bool  // a node's clock was stepped under a held request (NodeClock.Holding)
	subjectsRemoved atomic.Int64 // subject records the cleaner's passes forgot
	provider        provider     // what the subjects show, in this process
	// jumpsAsked and jumpsMade count the jumps of the clock past the subject horizon
	// (Config.Forget) a worker asked for and the cleaner made; parked counts the workers
	// waiting for one, and finished those whose steps are all made.
	jumpsAsked, jumpsMade, parked, finished atomic.Int64
}

// jump asks for a jump of the clock past the subject horizon (Config.Forget): hours pass with
// nothing happening (a long outage, a quiet weekend), every record's newest verdict goes past
// the horizon and every write past a request's life; the cleaner then forgets what nothing can
// land on, and the workers go on, their faults with them.
func (env *HistoryEnv) jump() { env.jumpsAsked.Add(1) }

// park waits, between a worker's calls, while a jump is under way (at most a minute).
func (env *HistoryEnv) park() {
	if env.jumpsMade.Load() >= env.jumpsAsked.Load() {
		return
	}
	env.parked.Add(1)
	defer env.parked.Add(-1)
	for deadline := time.Now().Add(time.Minute); env.jumpsMade.Load() < env.jumpsAsked.Load() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// jumpWanted reports whether a jump was asked for; the cleaner then waits (a while) until the
// workers are parked, moves the clock, and runs its passes before it lets them go on.
func (env *HistoryEnv) jumpWanted() bool {
	if env.jumpsMade.Load() >= env.jumpsAsked.Load() {
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); env.parked.Load()+env.finished.Load() < int64(env.Config.Workers) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// provider is the history's provider: what stands on each subject (the last status posted), in
// real time. A post and a read-back are atomic with their place in the history's order.
type provider struct {
	mu     sync.Mutex
	stands map[ledger.SubjectKey]ledger.VerdictID
}

// post carries out the post a grant g to verdict v allows, at the history's next instant (at),
// if the poster is still inside its grant then (live; a runner never sends after it): it reads
// back first when the grant says so, and posts unless v stands already (or, late, another
// status does). It answers what became of it; posted says whether a status was made.
//
// The instant is taken before live is asked, so that whoever takes the grant over (at a ledger
// time past its end, which some clock read first) posts later.
func (p *provider) post(w HistoryWorld, subject ledger.SubjectKey, v ledger.VerdictID, g ledger.SubjectGrant, live func() bool) (post ledger.PostOutcome, posted bool, at int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at = w.Tick()
	if !live() {
		return ledger.PostRefused, false, at // too late to send: nothing posted
	}
	if p.stands == nil {
		p.stands = map[ledger.SubjectKey]ledger.VerdictID{}
	}
	st, ok := p.stands[subject]
	if g.ReadBack {
		switch {
		case ok && st == v:
			return ledger.PostApplied, false, at
		case ok && g.Late:
			return ledger.PostOverridden, false, at
		}
	}
	p.stands[subject] = v
	return ledger.PostApplied, true, at
}

// maxStepBack is the furthest a worker steps the base clock back at once.
const maxStepBack = 25 * time.Second

// caller is one client of a history: a handle, the clock it decides with, and its bookkeeping.
type caller struct {
	id     int
	env    *HistoryEnv
	l      ledger.Ledger
	host   *hostClock
	node   *nodeClock  // the store node its handles talk to (Config.StoreSkew); nil: the base
	seen   *handleNode // that node as the current handle sees it
	decide ledger.Clock
	opts   Options
}

func newCaller(ctx context.Context, env *HistoryEnv, id int, faulty bool, rng *rand.Rand) (*caller, error) {
	host := &hostClock{w: env.World}
	if skew := env.Config.Skew; skew > 0 {
		host.skew.Store(rng.Int64N(2*int64(skew)+1) - int64(skew))
	}
	c := &caller{id: id, env: env, host: host, decide: ledger.Clock(host)}
	var store ledger.Clock = storeClock{env.World}
	if skew := env.Config.StoreSkew; skew > 0 && env.StoreClocked {
		c.node = &nodeClock{w: env.World, steps: &env.nodeSteps, home: time.Duration(rng.Int64N(2*int64(skew)+1) - int64(skew)),
			limit: skew, heldStep: &env.heldStep}
		c.node.offset.Store(int64(c.node.home))
		store = c.node
	}
	if env.StoreClocked {
		c.decide = store
	}
	c.opts = Options{Clock: host, StoreClock: store, StrandedAfter: time.Minute, CleanupBatch: 50}
	if faulty && env.Config.FaultRate > 0 {
		c.opts.Faults = &FaultPlan{Rate: env.Config.FaultRate, Seed: rng.Uint64()}
	}
	return c, c.reopen(ctx)
}

// call records one call: its interval, the bounds of the ledger's now, and its answer.
func (c *caller) call(o Op, do func(o *Op) error) (Op, error) {
	w, res := c.env.World, int64(c.env.Resolution)
	o.Client = c.id
	back1 := w.SteppedBack()
	decide := c.decide.Now
	if c.node != nil {
		// A backend on the store's clock may decide on what it has cached, without asking
		// the store (Complete and Release always; any call while its host was not suspended):
		// at its own estimate, which with the store's nodes apart a later decision on
		// another node may be below of.
		decide = c.seen.cachedNow
	}
	lo1 := decide()
	o.Call = w.Tick()
	// Should this process die during the call, its decision came after lo1 less the steps
	// back of the clock until it died (Back lets the reader of Begin work that out).
	o.Lo, o.Back, o.Unknown, o.Return, o.Hi = lo1.UnixNano()-res, back1, true, Timeless, Timeless
	c.env.Sink.Begin(o)
	err := do(&o)
	o.Return = w.Tick()
	lo2 := decide()
	o.Lo = min(lo1.UnixNano()-(w.SteppedBack()-back1), lo2.UnixNano()) - res
	o.Hi = c.maxNow()
	if class, known := ErrClass(err); known {
		o.Err, o.Unknown = class, false
	} else {
		o.Return, o.Hi = Timeless, Timeless
	}
	c.env.Sink.End(o)
	return o, err
}

// maxNow bounds the ledger's now at the end of a call: the highest reading of any clock it
// may decide on. A ledger on the store's clock never reads a host's: its bound is the store's
// alone (a host clock ahead would hide a live lease taken over, or a row removed inside its
// retention).
func (c *caller) maxNow() int64 {
	if c.env.StoreClocked {
		return c.env.World.MaxStoreRead()
	}
	return c.env.World.MaxRead()
}

// reopen replaces the handle, as a process restarted after a crash (with faults of its own;
// a start that a fault hits is tried again, as a process would be restarted again).
func (c *caller) reopen(ctx context.Context) error {
	if c.l != nil {
		c.l.Close()
		c.l = nil
	}
	if c.node != nil {
		c.seen = &handleNode{nodeClock: c.node} // a new handle has been answered nothing yet
		c.opts.StoreClock = c.seen
		c.opts.Clock = handleHost{hostClock: c.host, node: c.seen}
	}
	var err error
	for range 20 {
		if c.opts.Faults != nil {
			plan := *c.opts.Faults
			plan.Seed = plan.Seed*6364136223846793005 + 1442695040888963407
			c.opts.Faults = &plan
		}
		var l ledger.Ledger
		if l, err = c.env.Open(ctx, c.opts); err == nil {
			c.l = l
			return nil
		}
	}
	return err
}

func historyDelivery(id int, signedAt time.Time) ledger.Delivery {
	body := fmt.Appendf(nil, `{"history":%d}`, id)
	d := ledger.Delivery{Binding: ledger.Binding{Route: "history", Scheme: "standard-webhooks", Identity: fmt.Sprintf("h-%d", id),
		BodyDigest: ledger.SumBody(body)}, Change: body, SignedAt: signedAt}
	if id%7 == 0 {
		d.Binding.Scheme, d.SignedAt = "github-sha256", time.Time{}
	}
	return d
}

func digest(b []byte) string { return ledger.SumBody(b).String() }

// RunHistoryWorker is one worker of a history: env.Config.Steps calls, on a handle it reopens
// (a restarted process, remembering nothing) after every call of unknown outcome. Worker 0
// slides the window. It reports how often it reopened; an error means it could not go on.
func RunHistoryWorker(ctx context.Context, env *HistoryEnv, id int, seed uint64) (int, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	c, err := newCaller(ctx, env, id, true, rng)
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	defer func() {
		if c.l != nil {
			c.l.Close()
		}
	}()
	k := &worker{c: c, rng: rng, cfg: env.Config}
	k.forget()
	defer env.finished.Add(1)
	reopens := 0
	for step := range env.Config.Steps {
		if id == 0 && step%10 == 9 {
			env.World.Slide()
		}
		if id == 0 && env.Config.Forget && step > 0 && step%(env.Config.Steps/5) == 0 && step <= 4*env.Config.Steps/5 {
			env.jump()
		}
		env.park()
		if err := k.step(ctx); err != nil {
			reopens++
			k.forget()
			if err := c.reopen(ctx); err != nil {
				return reopens, fmt.Errorf("reopen: %w", err)
			}
		}
	}
	return reopens, nil
}

// RunHistoryCleaner runs cleanup passes, one after the other, until stop is closed; it
// reopens its handle after a failed pass. It reports how often it reopened.
func RunHistoryCleaner(ctx context.Context, env *HistoryEnv, id int, seed uint64, stop <-chan struct{}) int {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	c, err := newCaller(ctx, env, id, true, rng)
	if err != nil {
		return 0
	}
	defer func() { c.l.Close() }()
	reopens := 0
	cur := ledger.Cursor("")
	for {
		select {
		case <-stop:
			return reopens
		default:
		}
		if env.jumpWanted() {
			env.World.Advance(forgetJump)
			// A few passes (a pass may meet a fault): what was finished before the jump is
			// forgotten before anything else happens.
			for range 3 {
				if _, err := cleanupRecorded(ctx, c, ""); err != nil && !errors.Is(err, ledger.ErrBusy) {
					reopens++
					if c.reopen(ctx) != nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			}
			env.jumpsMade.Add(1)
		}
		rep, err := cleanupRecorded(ctx, c, cur)
		switch {
		case err == nil:
			cur = rep.Next
		case errors.Is(err, ledger.ErrBusy):
		default:
			reopens++
			if c.reopen(ctx) != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// forgetJump is how far the clock moves at once in a history that forgets (HistoryConfig.Forget):
// past the subject horizon of HistoryLimits, and past any request's life.
var forgetJump = HistoryLimits().SubjectHorizon() + 10*time.Minute

// cleanupRecorded runs one cleanup pass and records the rows it reports removed, each as a
// removal over the pass's interval (CheckHistory checks that a pass names a key once).
func cleanupRecorded(ctx context.Context, c *caller, cur ledger.Cursor) (ledger.CleanupReport, error) {
	w, res := c.env.World, int64(c.env.Resolution)
	back1 := w.SteppedBack()
	lo1 := c.decide.Now()
	call := w.Tick()
	rep, err := c.l.Cleanup(ctx, cur)
	ret := w.Tick()
	lo2 := c.decide.Now()
	hi := c.maxNow()
	for _, r := range rep.Removed {
		c.env.Sink.End(Op{Client: c.id, Key: r.Key, Kind: OpRemove, Eval: r.EvaluationID, Call: call, Return: ret,
			Lo: min(lo1.UnixNano()-(w.SteppedBack()-back1), lo2.UnixNano()) - res, Hi: hi})
	}
	if err == nil {
		w.RaiseHWFloor(rep.HighWater.UnixNano() - res)
	}
	c.env.subjectsRemoved.Add(int64(rep.RemovedSubjects))
	return rep, err
}

// worker drives deliveries as runners and ingresses would, with a pause here and a stale
// lease there.
type worker struct {
	c      *caller
	rng    *rand.Rand
	cfg    HistoryConfig
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
	id := int(c.env.World.Window()) + k.rng.IntN(k.cfg.Keys)
	now := c.env.World.Now()
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
	env := k.c.env
	switch p := k.rng.Float64(); {
	case p < 0.05 && env.Steps:
		env.World.Advance(-time.Duration(5+k.rng.IntN(int(maxStepBack/time.Second)-4)) * time.Second) // a clock stepped back
	case p < 0.15 && !env.StoreClocked:
		// A host's clock stepped.
		k.c.host.skew.Store(int64(time.Duration(k.rng.IntN(2*int(k.cfg.Skew/time.Second)+1))*time.Second - k.cfg.Skew))
	case p < 0.15:
		// A backend on the store's clock measures elapsed time on the host's monotonic clock,
		// which never steps forward or back, but stops while the host is suspended: the
		// host falls behind (its wall clock does not).
		d := int64(time.Duration(1+k.rng.IntN(60)) * time.Second)
		k.c.host.skew.Add(-d)
		k.c.host.suspended.Add(d)
	case p < 0.3 && k.c.node != nil:
		// The clock of the store node this handle talks to steps forward, or back.
		k.c.node.step(k.rng, k.cfg.StoreSkew)
	default:
		env.World.Advance(time.Duration(1+k.rng.IntN(6)) * time.Second)
	}
}

func (k *worker) admit(ctx context.Context, id int, now time.Time) error {
	c := k.c
	if c.node != nil {
		now = c.node.Now() // the sender's clock agrees with the node its request reaches
	}
	signed := now.Add(-time.Duration(k.rng.IntN(4)) * time.Second).Truncate(time.Second)
	switch p := k.rng.Float64(); {
	case p < 0.15:
		signed = signed.Add(-time.Minute) // a replay of an old signature
	case p < 0.2:
		signed = signed.Add(20 * time.Second) // signed far ahead
	}
	d := historyDelivery(id, signed)
	o := Op{Key: d.Key(), Kind: OpAdmit, HWFloor: c.env.World.HWFloor()}
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
		nb := c.env.World.Now().Add(time.Duration(k.rng.IntN(3)) * time.Second)
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
		o.NotBefore = c.env.World.Now().UnixNano()
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
	case p < 0.32:
		_, err = c.call(o, func(*Op) error { return c.l.Complete(ctx, *s) })
	default:
		return k.publishInOrder(ctx, id, s)
	}
	return unknownOnly(err)
}

// The history's deliveries publish to a few subjects, so that the verdicts of several meet on
// one; each post is made under the subject record's grant, to a provider the history keeps as
// posts (OpPost) in its real-time order.
const (
	historySubjects = 3
	historyHold     = 8 * time.Second
	historySettle   = 4 * time.Second
)

func historySubject(id int) ledger.Subject {
	return ledger.Subject{Publisher: "history", Repository: "acme/app", SHA: fmt.Sprintf("%040d", id%historySubjects),
		Context: "amiss/history"}
}

func subjectOp(kind OpKind, q ledger.SubjectRequest) Op {
	o := Op{Kind: kind, Subject: q.Subject.Key(), Key: q.Order.Key, Eval: q.EvaluationID, AdmittedAt: q.Order.AdmittedAt.UnixNano(),
		HoldFor: q.HoldFor}
	if !q.Order.EventAt.IsZero() {
		o.EventAt = q.Order.EventAt.UnixNano()
	}
	return o
}

// publishInOrder publishes the saved verdict s of identity id as the runner does: it asks the
// subject's record, posts under the grant (or stops as a killed runner would, or is refused),
// reports, and ends the row as the record answers.
func (k *worker) publishInOrder(ctx context.Context, id int, s *ledger.Staged) error {
	c := k.c
	q := ledger.SubjectRequest{Subject: historySubject(id), Order: s.Lease.Order(), EvaluationID: s.Lease.EvaluationID,
		HoldFor: historyHold, Settle: historySettle}
	var g ledger.SubjectGrant
	_, err := c.call(subjectOp(OpAcquireSubject, q), func(o *Op) error {
		var err error
		if g, err = c.l.AcquireSubject(ctx, q); err == nil {
			o.Outcome, o.OutFence, o.By, o.Late = g.Outcome.String(), g.Fence, g.By, g.Late
		}
		return err
	})
	if err != nil {
		return unknownOnly(err)
	}
	switch g.Outcome {
	case ledger.SubjectSuperseded:
		return k.endRow(ctx, s, OpSupersede, g.By)
	case ledger.SubjectStanding:
		return k.endRow(ctx, s, OpComplete, ledger.Key{})
	case ledger.SubjectWait:
		return nil // the row's lease ends by itself; the next claim asks again
	}
	post := ledger.PostApplied
	switch p := k.rng.Float64(); {
	case p < 0.1:
		return errors.New("the poster died under its grant") // restarts: the grant ends without a report
	case p < 0.2:
		post = ledger.PostRefused
	default:
		// Read back first when the grant says so, and post unless this verdict stands
		// already (or, late, another status does), as the runner does.
		var posted bool
		var at int64
		live := func() bool { return c.maxNow() < g.Decided.Add(q.HoldFor).UnixNano() }
		post, posted, at = c.env.provider.post(c.env.World, q.Subject.Key(), ledger.VerdictID{Key: q.Order.Key, Evaluation: q.EvaluationID}, g, live)
		if !posted {
			break
		}
		o := subjectOp(OpPost, q)
		o.Client, o.Call, o.Return = c.id, at, at
		c.env.Sink.End(o)
		if k.rng.Float64() < 0.2 {
			post = ledger.PostUnknown // the answer was lost
		}
	}
	var a ledger.SubjectGrant
	ro := subjectOp(OpReportSubject, q)
	ro.Fence, ro.Post = g.Fence, post.String()
	_, err = c.call(ro, func(o *Op) error {
		var err error
		if a, err = c.l.ReportSubject(ctx, g, post); err == nil {
			o.Outcome = a.Outcome.String()
		}
		return err
	})
	if err != nil {
		return unknownOnly(err)
	}
	switch a.Outcome {
	case ledger.SubjectStanding:
		return k.endRow(ctx, s, OpComplete, ledger.Key{})
	case ledger.SubjectSuperseded:
		return k.endRow(ctx, s, OpSupersede, ledger.Key{})
	}
	return nil // to be confirmed, or tried again: the next claim asks again
}

// endRow completes or supersedes (by) the saved row s.
func (k *worker) endRow(ctx context.Context, s *ledger.Staged, kind OpKind, by ledger.Key) error {
	c := k.c
	o := k.leaseOp(kind, s.Lease)
	o.Report, o.By = digest(s.Report), by
	_, err := c.call(o, func(*Op) error {
		if kind == OpSupersede {
			return c.l.Supersede(ctx, *s, by)
		}
		return c.l.Complete(ctx, *s)
	})
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
			_, err := c.l.Save(ctx, l, report)
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

// FinishHistory ends a history with a healthy handle: it drives every row to done or
// abandoned, moves the clock past every retention, runs cleanup until it removes nothing,
// reopens, and checks that every row is finished and legible and that the capacity record
// counts exactly the rows. Every call is recorded. It reports the rows removed and the stats.
func FinishHistory(t *testing.T, ctx context.Context, env *HistoryEnv, id int) (int, ledger.Stats) {
	t.Helper()
	c, err := newCaller(ctx, env, id, false, rand.New(rand.NewPCG(uint64(id), 7)))
	if err != nil {
		t.Fatalf("open at the end: %v", err)
	}
	defer func() { c.l.Close() }()
	for cur := ledger.Cursor(""); ; {
		page, err := c.l.Rows(ctx, cur, 200)
		if err != nil {
			t.Fatalf("rows at the end: %v", err)
		}
		if len(page.Damaged) > 0 {
			t.Fatalf("damaged rows at the end: %v", page.Damaged)
		}
		for _, row := range page.Rows {
			finishRecorded(t, ctx, c, row)
		}
		if page.Next == "" {
			break
		}
		cur = page.Next
	}
	limits := HistoryLimits()
	env.World.Advance(time.Unix(0, env.World.MaxRead()).Sub(env.World.Now()) + 2*(limits.SignedAgeCeiling+limits.QueueCeiling+env.Config.Skew))
	removed := 0
	for lap := 0; ; lap++ {
		if lap > 20 {
			t.Fatalf("cleanup keeps removing rows after 20 laps")
		}
		n := 0
		for cur := ledger.Cursor(""); ; {
			rep, err := cleanupRecorded(ctx, c, cur)
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
	if err := c.reopen(ctx); err != nil {
		t.Fatalf("reopen at the end: %v", err)
	}
	st, err := c.l.Stats(ctx)
	if err != nil {
		t.Fatalf("stats at the end: %v", err)
	}
	if st.CapacityUsed != st.Rows {
		t.Fatalf("after cleanup the capacity record counts %d slots for %d rows", st.CapacityUsed, st.Rows)
	}
	if st.Damaged != 0 || st.ByState[ledger.StatePending]+st.ByState[ledger.StateRunning]+st.ByState[ledger.StateSaved] != 0 {
		t.Fatalf("at the end: %+v: every row must be finished and legible", st)
	}
	return removed, st
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
				c.env.World.Advance(wait + c.env.Resolution + time.Nanosecond)
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

// CheckHistory checks a recorded history: one verdict per evaluation (every report saved or
// handed out for publication under one evaluation is the same), each key at most once in the
// report of one cleanup pass, and the whole history linearizable under Model. A refused
// history is written out as porcupine's visualization for reading.
func CheckHistory(t *testing.T, ops []Op, limits ledger.Limits, resolution time.Duration) {
	t.Helper()
	verdicts := map[string]map[string]bool{}
	seen := func(eval, report string) {
		if verdicts[eval] == nil {
			verdicts[eval] = map[string]bool{}
		}
		verdicts[eval][report] = true
	}
	type pass struct {
		client int
		call   int64
	}
	removed := map[pass]map[ledger.Key]bool{}
	hist := make([]porcupine.Operation, 0, len(ops))
	checkStanding(t, ops)
	for _, o := range ops {
		if o.Kind == OpPost {
			continue // the provider's, not the ledger's
		}
		switch {
		case o.Unknown:
		case o.Kind == OpSave && o.Err == "":
			seen(o.Eval, o.Report)
		case o.Kind == OpClaim && o.Outcome == ledger.Publish.String():
			seen(o.OutEval, o.OutReport)
		case o.Kind == OpRemove:
			p := pass{o.Client, o.Call}
			if removed[p] == nil {
				removed[p] = map[ledger.Key]bool{}
			}
			if removed[p][o.Key] {
				t.Errorf("one cleanup pass reported %s removed twice", o.Key)
			}
			removed[p][o.Key] = true
		}
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
	}
	for eval, reports := range verdicts {
		if len(reports) > 1 {
			t.Errorf("evaluation %s has %d different verdicts", eval, len(reports))
		}
	}
	m := Model(limits, 0, resolution)
	res, info := porcupine.CheckOperationsVerbose(m, hist, 5*time.Minute)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("the history of %d operations could not be checked within the time limit", len(hist))
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("amiss-history-%d.html", time.Now().UnixNano()))
	if f, err := os.Create(path); err == nil {
		porcupine.Visualize(m, info, f)
		f.Close()
	}
	t.Fatalf("the history of %d operations is not linearizable under the contract's model (visualization: %s)\n%s",
		len(hist), path, refusedKey(m, hist))
}

// checkStanding checks what the provider took for each subject against what the subject's
// record called standing: once a verdict was called standing, no status of an older verdict is
// posted (across forgotten records too: a verdict older than the horizon reads back what
// stands), and the last post is of a verdict no older than the newest one called standing.
// (The record's other promises, one grant at a time and none to an older verdict, are the
// model's to check.)
func checkStanding(t *testing.T, ops []Op) {
	t.Helper()
	standing := map[ledger.SubjectKey]ledger.Order{}
	last := map[ledger.SubjectKey]Op{}
	var posts, called []Op
	for _, o := range ops {
		switch {
		case o.Kind == OpPost:
			posts = append(posts, o)
			if l, ok := last[o.Subject]; !ok || o.Call > l.Call {
				last[o.Subject] = o
			}
		case (o.Kind == OpAcquireSubject || o.Kind == OpReportSubject) && !o.Unknown && o.Err == "" &&
			o.Outcome == ledger.SubjectStanding.String():
			called = append(called, o)
			if cur, ok := standing[o.Subject]; !ok || cur.Before(o.order()) {
				standing[o.Subject] = o.order()
			}
		}
	}
	for _, p := range posts {
		for _, c := range called {
			if c.Subject == p.Subject && c.Return < p.Call && p.order().Before(c.order()) {
				t.Errorf("subject %s: verdict %s was posted after verdict %s, newer, was called standing",
					p.Subject.Short(), p.Key.Short(), c.Key.Short())
			}
		}
	}
	for subj, newest := range standing {
		l, ok := last[subj]
		if !ok {
			t.Errorf("subject %s: verdict %s called standing, and nothing was ever posted", subj.Short(), newest.Key.Short())
			continue
		}
		if l.order().Before(newest) {
			t.Errorf("subject %s: the last status posted is verdict %s's, older than verdict %s, which the record called standing",
				subj.Short(), l.Key.Short(), newest.Key.Short())
		}
	}
}

// refusedKey describes the calls on the first key whose history the model refuses.
func refusedKey(m porcupine.Model, hist []porcupine.Operation) string {
	for _, part := range m.Partition(hist) {
		if porcupine.CheckOperations(m, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		out := fmt.Sprintf("calls on key %s:\n", part[0].Input.(Op).Key)
		if os.Getenv("AMISS_HISTORY_DUMP") != "" {
			var ops []Op
			for _, p := range part {
				ops = append(ops, p.Input.(Op))
			}
			if b, err := json.Marshal(ops); err == nil {
				os.WriteFile(os.Getenv("AMISS_HISTORY_DUMP"), b, 0o600)
			}
		}
		at := func(n int64) string {
			if n == Timeless {
				return "-"
			}
			return time.Unix(0, n).UTC().Format("15:04:05.000")
		}
		for _, p := range part {
			o := p.Input.(Op)
			ret := fmt.Sprint(o.Return)
			if o.Return == Timeless {
				ret = "?"
			}
			out += fmt.Sprintf("  [%d,%s] client %d %-8s now in [%s, %s] fence %d eval %.8s signed %s report %.8s -> unknown %v err %q %s eval %.8s fence %d expires %s retain %s report %.8s state %v\n",
				o.Call, ret, o.Client, o.Kind, at(o.Lo), at(o.Hi), o.Fence, o.Eval, at(o.SignedAt), o.Report,
				o.Unknown, o.Err, o.Outcome, o.OutEval, o.OutFence, at(o.Expires), at(o.RetainUntil), o.OutReport, o.OutState)
		}
		return out
	}
	return ""
}
