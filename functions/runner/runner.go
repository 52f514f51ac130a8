// Package runner claims queued deliveries, evaluates them under a kept lease, freezes the
// verdict, publishes it as a commit status and marks the delivery done.
//
// Ownership is the ledger's to decide: the runner keeps its lease by renewing it before the
// window closes (timed on the monotonic clock), and losing it cancels the evaluation's context;
// the work is then dropped, never saved, never published, and the message is handed back to
// come again when the lease ends (as for Busy), so the delivery never waits on a sweep. A
// verdict saved before the lease was lost is published by whoever claims next, exactly as
// frozen.
//
// Publication is retried for as long as the delivery can matter: on an exponential schedule
// with jitter, never sooner than the provider asked (Retry-After, rate-limit resets), until the
// publish budget (counted from when the verdict was saved or revived) is spent. Only a refusal
// that can never succeed for this verdict abandons the row at once; 401, 403 and 404 are
// retried like outages, and logged as errors for an operator to fix.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// Route is what the runner needs of a route.
type Route struct {
	Evaluator evaluate.Evaluator
	Publisher publish.Publisher
	Context   string
	TargetURL string
}

// Runner processes queue messages. It is safe for concurrent use.
type Runner struct {
	Ledger ledger.Ledger
	// Routes returns the runtime of a route by name, within ctx (it may read secrets).
	Routes func(ctx context.Context, name string) (*Route, error)
	// Owner names this runner in leases.
	Owner string
	// Lease is the lease window (default 60 seconds), cut so that it ends Margin before the
	// context's deadline (a Lambda's remaining time).
	Lease  time.Duration
	Margin time.Duration
	// RenewEvery is how often a kept lease is renewed (default a third of the window).
	RenewEvery time.Duration
	// MaxAttempts is how many Execute attempts fail before an error verdict is published
	// (default 3).
	MaxAttempts int
	// RetryDelay is how long a failed evaluation waits before the next claim (default 30 s).
	RetryDelay time.Duration
	// PublishBudget is how long publication of a saved verdict is retried, counted from when
	// it was saved or revived, before the row is abandoned (default 72 hours; the controller's
	// is its publish_budget, by default the queue ceiling).
	PublishBudget time.Duration
	// PublishRetry is the wait after the first failed publication (default 30 s); each further
	// failure doubles it, up to PublishRetryMax (default 30 minutes). Each wait is drawn
	// between half and all of that (jitter), and is never shorter than the provider asked.
	PublishRetry, PublishRetryMax time.Duration
	// Jitter returns a number in [0, 1) (default math/rand/v2's).
	Jitter func() float64
	Log    *slog.Logger
	// Metrics receives counters and latencies (nil: none).
	Metrics Metrics
	// Now is the wall clock for notBefore times (default time.Now).
	Now func() time.Time
}

// Metrics receives the runner's measurements.
type Metrics interface {
	Count(name string, n int)
	Latency(name string, d time.Duration)
}

// Result says what became of a message.
type Result struct {
	// Done: the message can be acknowledged.
	Done bool
	// RetryAt: when the message should come back (when not Done).
	RetryAt time.Time
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) count(name string) {
	if r.Metrics != nil {
		r.Metrics.Count(name, 1)
	}
}

func (r *Runner) latency(name string, since time.Time) {
	if r.Metrics != nil {
		r.Metrics.Latency(name, time.Since(since))
	}
}

func (r *Runner) margin() time.Duration {
	if r.Margin > 0 {
		return r.Margin
	}
	return 5 * time.Second
}

// window is the lease window configured (Lease, by default a minute).
func (r *Runner) window() time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return time.Minute
}

// startKey holds when the invocation a context belongs to started (FirstOfInvocation).
type startKey struct{}

// FirstOfInvocation marks ctx as an invocation starting now (the SQS handler marks each
// batch's). A message reached while at most a margin of the invocation is spent has all the
// time the deployment gives any message: it is claimed with whatever time is left (more
// than two margins), and an evaluation of it cut by the deadline is a failed attempt. A later
// one needs a whole lease window besides to be claimed, and its cut evaluation is handed
// back, since its time went to the messages before it. Without the mark (a caller that
// says nothing of the invocation), a message with a deadline is a later one.
func FirstOfInvocation(ctx context.Context) context.Context {
	return context.WithValue(ctx, startKey{}, time.Now())
}

// fresh reports whether at most a margin of ctx's invocation is spent (FirstOfInvocation).
func (r *Runner) fresh(ctx context.Context) bool {
	start, ok := ctx.Value(startKey{}).(time.Time)
	return ok && time.Since(start) <= r.margin()
}

// leaseFor is the lease window: Lease, cut to end a margin before the invocation's deadline.
func (r *Runner) leaseFor(ctx context.Context) time.Duration {
	lease := r.window()
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - r.margin(); left < lease {
			lease = left
		}
	}
	return lease
}

// route builds a route within the invocation's time: a secret read that hangs ends two
// margins before the deadline, as an evaluation does, so the route's error is handled (the
// attempt handed back, or the publication retried) instead of the invocation dying at its
// deadline with the attempt lost.
func (r *Runner) route(ctx context.Context, name string) (*Route, error) {
	bctx, cancel := r.evaluationContext(ctx)
	defer cancel()
	route, err := r.Routes(bctx, name)
	if err == nil && route == nil {
		err = fmt.Errorf("route %q: none built", name)
	}
	return route, err
}

// evaluationContext bounds an evaluation to end two margins before the invocation's deadline:
// running out of that time is a failed attempt, and the margin before the lease ends is left
// to save its error verdict.
func (r *Runner) evaluationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-2*r.margin()))
	}
	return context.WithCancel(ctx)
}

// Process handles one message. An error is returned only when the ledger or a provider could
// not be reached; the message should then come back.
func (r *Runner) Process(ctx context.Context, m queue.Message) (Result, error) {
	log := r.log().With("key", m.Key.String())
	leaseFor := r.leaseFor(ctx)
	// Whether this message has all the time the deployment gives any (FirstOfInvocation),
	// judged as it is taken up: the runner's own work on it (the claim, the route) spends none
	// of its fairness.
	fair := r.fresh(ctx)
	if dl, ok := ctx.Deadline(); ok {
		// An evaluation ends two margins before the deadline, and running out of time is a
		// failed attempt for a fair message: a later one is claimed only when a whole lease
		// window is left besides, and otherwise comes back at once, to an invocation of its
		// own.
		left, need := time.Until(dl), 2*r.margin()
		if !fair {
			need += r.window()
		}
		if leaseFor <= 0 || left <= need {
			log.Info("not claimed: too little time left in this invocation for an attempt; back to the queue", "left", left, "need", need)
			return Result{RetryAt: r.now()}, nil
		}
	} else if leaseFor <= 0 {
		return Result{RetryAt: r.now()}, errors.New("runner: no lease window")
	}
	sent := r.now()
	c, err := r.Ledger.Claim(ctx, m.Key, m.Binding, r.Owner, leaseFor)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		log.Warn("message for a delivery the ledger does not hold; acknowledged")
		return Result{Done: true}, nil
	}
	if err != nil {
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: claim: %w", err)
	}
	switch c.Outcome {
	case ledger.Busy:
		r.count("busy")
		// RetryAt is the ledger's time: the wait it means is counted from this runner's now,
		// since the queue's delay is reckoned by this runner's clock.
		at := c.RetryAt
		if !c.Decided.IsZero() {
			at = r.now().Add(c.RetryAt.Sub(c.Decided))
		}
		log.Info("busy", "retry_at", c.RetryAt, "wait", c.RetryAt.Sub(c.Decided))
		return Result{RetryAt: at}, nil
	case ledger.ClaimDuplicate:
		log.Info("duplicate", "evaluation", c.EvaluationID)
		return Result{Done: true}, nil
	case ledger.ClaimConflict:
		log.Warn("binding conflict: the message does not match the delivery; acknowledged")
		return Result{Done: true}, nil
	case ledger.Execute:
		return r.execute(ctx, log, newLeaseClock(*c.Lease, leaseFor, sent), fair)
	case ledger.Publish:
		return r.publish(ctx, log, *c.Staged, newLeaseClock(c.Staged.Lease, leaseFor, sent))
	}
	return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: claim answered %v", c.Outcome)
}

// detached is ctx without its cancellation (a shutdown), for a step that must finish once
// begun, bounded by d and by ctx's deadline (past which the invocation is gone anyway).
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	if dl, ok := ctx.Deadline(); ok {
		c2, cancel2 := context.WithDeadline(c, dl)
		return c2, func() { cancel2(); cancel() }
	}
	return c, cancel
}

// maxAttempts is how many failed evaluations make an error verdict (MaxAttempts, default 3).
func (r *Runner) maxAttempts() int {
	if r.MaxAttempts > 0 {
		return r.MaxAttempts
	}
	return 3
}

// maxLost is how many attempts lost without an answer end the wait: three times maxAttempts.
// A lost attempt cannot be told from a crash, so the bound is generous: a runner paused past
// its lease, or a hand-back that did not land, is rare; a crash loop makes one per redelivery.
func (r *Runner) maxLost() int { return 3 * r.maxAttempts() }

func (r *Runner) retryDelay() time.Duration {
	if r.RetryDelay > 0 {
		return r.RetryDelay
	}
	return 30 * time.Second
}

// keeper renews a lease until stopped; losing it cancels the work's context.
type keeper struct {
	mu    chan struct{} // guards the fields below
	lease ledger.Lease
	// granted and sent are the ledger's time of the last grant or renewal whose answer this
	// runner heard, and the runner's time just before it sent that request (leaseClock).
	granted, sent time.Time
	// gen changes when the lease is swapped (after Save): a renewal answered for an older
	// lease changes nothing.
	gen int
	// saving is set while a Save is in flight: a renewal of the executing lease that lands
	// after the Save is refused, and the Save's answer, not the refusal, decides.
	saving bool
	ending sync.Once
	lost   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// leaseClock reckons the ledger's time from a grant, so that no time this runner hands the
// ledger comes from its own wall clock: the ledger granted or renewed a lease for leaseFor at
// granted (its expiry less leaseFor) by its own clock, no sooner than sent by the runner's
// clock, and the runner's clock is trusted only for the time elapsed since (monotonic in
// production). granted and sent always come from the same request.
type leaseClock struct {
	lease    ledger.Lease // the lease held (after Save, the publishing lease)
	leaseFor time.Duration
	granted  time.Time
	sent     time.Time
}

func newLeaseClock(l ledger.Lease, leaseFor time.Duration, sent time.Time) leaseClock {
	return leaseClock{lease: l, leaseFor: leaseFor, granted: l.Expires.Add(-leaseFor), sent: sent}
}

// after is the ledger's time d from now: at least what the ledger's clock will read after d
// (the grant was made no sooner than sent).
func (r *Runner) after(c leaseClock, d time.Duration) time.Time {
	return c.granted.Add(r.now().Sub(c.sent)).Add(d)
}

// local is this runner's time when the ledger's clock reads at (such as a lease's end): the
// wait from the grant, added to the time the request for it was sent. A Result's RetryAt is
// always this runner's time, since the queue's delay is reckoned by this runner's clock.
func (c leaseClock) local(at time.Time) time.Time {
	return c.sent.Add(at.Sub(c.granted))
}

func (r *Runner) keep(ctx context.Context, cancel context.CancelFunc, lc leaseClock) *keeper {
	leaseFor := lc.leaseFor
	k := &keeper{mu: make(chan struct{}, 1), lease: lc.lease, granted: lc.granted, sent: lc.sent,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	every := r.RenewEvery
	if every <= 0 {
		every = max(leaseFor/3, time.Millisecond) // a ticker needs a positive interval
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(every) // tickers run on the monotonic clock
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Never past the invocation's deadline less the margin, as at the claim: a lease
			// left by an invocation killed at its deadline would hold off the next claim.
			d := r.leaseFor(ctx)
			if d <= 0 {
				continue // the lease granted last runs out by itself
			}
			k.mu <- struct{}{}
			cur, gen := k.lease, k.gen
			<-k.mu
			sent := r.now()
			nl, err := r.Ledger.Renew(ctx, cur, d)
			select {
			case <-k.stop:
				return // halted meanwhile: the work has ended, and this answer decides nothing
			default:
			}
			k.mu <- struct{}{}
			current := gen == k.gen
			if err == nil && current {
				k.lease, k.granted, k.sent = nl, nl.Expires.Add(-d), sent
			}
			lost := errors.Is(err, ledger.ErrLeaseLost) && current && !k.saving
			<-k.mu
			if lost {
				r.count("lease_lost")
				close(k.lost)
				cancel()
				return
			}
		}
	}()
	return k
}

// clock is the kept lease with its last grant heard.
func (k *keeper) clock(leaseFor time.Duration) leaseClock {
	k.mu <- struct{}{}
	defer func() { <-k.mu }()
	return leaseClock{lease: k.lease, leaseFor: leaseFor, granted: k.granted, sent: k.sent}
}

func (k *keeper) isLost() bool {
	select {
	case <-k.lost:
		return true
	default:
		return false
	}
}

// halt tells the keeper to renew no more, without waiting for a renewal in flight, whose
// answer then changes nothing and counts nothing.
func (k *keeper) halt() {
	k.ending.Do(func() { close(k.stop) })
}

// end stops the renewals and waits for the keeper to be done.
func (k *keeper) end() {
	k.halt()
	<-k.done
}

func (r *Runner) execute(ctx context.Context, log *slog.Logger, lc leaseClock, fair bool) (Result, error) {
	l, leaseFor := lc.lease, lc.leaseFor
	log = log.With("evaluation", l.EvaluationID, "attempt", l.Attempt, "route", l.Route)
	// Earlier attempts that ended with neither a verdict, a failure nor a hand-back.
	lost := l.Attempt - 1 - l.Failures
	if lost >= r.maxLost()+r.maxAttempts() {
		// Past the crash-loop bound (below) and still no answer: the runner dies before it
		// gets there, while building the route (a secret read that hangs past the deadline).
		// The verdict is frozen without building the route.
		return r.unroutable(ctx, log, lc, fmt.Errorf("the runner stopped while building it, %d attempts in a row", lost))
	}
	built := time.Now()
	// The lease is kept from here on: building the route (a secret read) may take longer
	// than the lease, up to the evaluation's bound, and a lease left to run out meanwhile
	// would let a duplicate message claim the row and make this attempt a lost one.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, lc)
	route, err := r.route(wctx, l.Route)
	if k.isLost() {
		k.end()
		log.Warn("lease lost while building the route; the message comes back when the lease ends")
		kc := k.clock(leaseFor)
		return Result{RetryAt: kc.local(kc.lease.Expires)}, nil
	}
	if err != nil {
		k.end()
		lc = k.clock(leaseFor)
		l = lc.lease
		// A route that cannot be built is the operator's to fix: nothing was evaluated, so the
		// attempt is handed back (never counted: neither a failed evaluation nor a lost
		// attempt). Only once twice the publish budget has passed since admission, long after
		// the delivery stopped mattering, does it end the wait (unroutable); a route failing
		// once after a long outage within that is just tried again. A shutdown that cut the
		// build (a secret read in flight) hands it back for the next claim at once.
		shutdown := ctx.Err() != nil
		if !shutdown && !l.AdmittedAt.IsZero() && lc.granted.Sub(l.AdmittedAt) >= 2*r.publishBudget() {
			return r.unroutable(ctx, log, lc, err)
		}
		wait := r.retryDelay()
		if shutdown {
			wait = 0
		}
		// The hand-back runs with a context of its own: the caller's may be the one that
		// ended. A failed unclaim is logged, not returned: the route's error is the one the
		// caller must see, and a lease not given back only delays the next claim until it
		// ends.
		uctx, ucancel := detached(ctx, 5*time.Second)
		defer ucancel()
		if rerr := r.Ledger.Unclaim(uctx, l, r.after(lc, wait)); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
			log.Warn("release failed after a route error; the lease ends by itself", "err", rerr, "lease_expires", l.Expires)
		}
		return Result{RetryAt: r.now().Add(wait)}, fmt.Errorf("runner: building the route: %w", err)
	}
	if time.Since(built) > r.margin() {
		// The route took more than a margin to build (a slow secret read): the evaluation
		// does not have the invocation's time, so running out of it is the scheduling's
		// doing, handed back, not a failed attempt (the rule for a message taken up late).
		fair = false
	}
	var s subject.Subject
	if err := json.Unmarshal(l.Subject, &s); err != nil {
		// A subject the ingress wrote and cannot be read back: give it an error verdict.
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, evaluate.Verdict{State: evaluate.Error,
			Description: "amiss could not read the delivery's subject"})
	}
	if lost >= r.maxLost() {
		// Attempts that ended with neither a verdict, a failure nor a hand-back: the runner
		// died under each (an evaluator that crashes it, a kill at the deadline), or was
		// paused past its lease, or could not hand the attempt back. So many of them mean a
		// crash loop: evaluating again would loop for ever, and the commit gets its error
		// verdict now.
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, evaluate.Verdict{State: evaluate.Error,
			Description: fmt.Sprintf("evaluation did not finish: %d attempts ended without an answer (the runner stopped under each)", lost)})
	}
	start := time.Now()
	ectx, ecancel := r.evaluationContext(wctx)
	v, evalErr := route.Evaluator.Evaluate(ectx, s)
	outOfTime := errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	ecancel()
	r.latency("evaluation_latency", start)
	if k.isLost() {
		k.end()
		log.Warn("lease lost during evaluation: result dropped; the message comes back when the lease ends")
		kc := k.clock(leaseFor)
		return Result{RetryAt: kc.local(kc.lease.Expires)}, nil
	}
	if evalErr != nil {
		max := r.maxAttempts()
		if outOfTime {
			evalErr = fmt.Errorf("the evaluation did not finish within the invocation's time: %w", evalErr)
		}
		// A shutdown (the caller's context ended) is no failed attempt, the last one included:
		// its error must never become the delivery's verdict, and the attempt is handed back.
		// Running out of the invocation's time is a failed attempt (outOfTime) only when the
		// evaluation had all the time the deployment gives any (fair: at most a margin of the
		// invocation was spent when it started); one that had only what the messages before it
		// left is cut by the runner's scheduling, not by its own failure: it is handed back, to
		// come again at once (to an invocation of its own). The evaluation ends two margins
		// before the deadline, so that an error verdict can still be saved.
		cut := ctx.Err() != nil || outOfTime && !fair
		failed := l.Failures + 1 // this one included; attempts lost or handed back are no failures
		if failed < max || cut {
			k.end()
			log.Warn("evaluation failed or cut; released for a later attempt", "err", evalErr, "cut", cut)
			kc := k.clock(leaseFor)
			at := r.now().Add(r.retryDelay())
			if outOfTime && cut {
				at = r.now()
			}
			giveBack := r.Ledger.Release
			notBefore := r.after(kc, r.retryDelay())
			if cut {
				giveBack = r.Ledger.Unclaim
				notBefore = r.after(kc, 0)
			}
			// Given back even when ctx was cancelled (a shutdown): the next owner need not wait
			// for the lease to run out.
			rctx, cancel := detached(ctx, 5*time.Second)
			defer cancel()
			if err := giveBack(rctx, kc.lease, notBefore); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
				return Result{RetryAt: at}, err
			}
			return Result{RetryAt: at}, nil
		}
		v = evaluate.Verdict{State: evaluate.Error, Description: fmt.Sprintf("evaluation failed %d times: %v", failed,
			cutRunes(evalErr.Error(), MaxDescription))}
	}
	return r.saveAndPublish(ctx, wctx, log, lc, route, k, v)
}

// unroutable ends a delivery whose route could not be built twice the publish budget after its
// admission, or whose runner kept dying while building it: it freezes an error verdict naming
// the cause, under
// the default context (there is no route to take one from, and what is frozen is what is
// published), and abandons it at once, so the row stops waiting and holding its slot. `amiss
// ledger republish` publishes it once the route exists again.
func (r *Runner) unroutable(ctx context.Context, log *slog.Logger, lc leaseClock, cause error) (Result, error) {
	l := lc.lease
	report, _ := json.Marshal(Report{State: evaluate.Error, Context: DefaultContext,
		Description: cutRunes(fmt.Sprintf("amiss could not evaluate: route %s cannot be built: %v", l.Route, cause), MaxDescription)})
	sctx, cancel := detached(ctx, 10*time.Second)
	defer cancel()
	staged, err := r.Ledger.Save(sctx, l, report)
	if err != nil {
		if errors.Is(err, ledger.ErrLeaseLost) {
			return Result{RetryAt: lc.local(l.Expires)}, nil
		}
		// Handed back, as after any Save the ledger refused: the attempt is not lost.
		uctx, ucancel := detached(ctx, 5*time.Second)
		defer ucancel()
		if uerr := r.Ledger.Unclaim(uctx, l, r.after(lc, r.retryDelay())); uerr != nil && !errors.Is(uerr, ledger.ErrLeaseLost) {
			log.Warn("hand-back failed after a failed save; the lease ends by itself", "err", uerr)
		}
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: save: %w", err)
	}
	log.Error("route cannot be built for the whole publish budget since admission: error verdict frozen and abandoned", "err", cause)
	lc.lease = staged.Lease
	return r.abandon(sctx, log, staged, lc, fmt.Sprintf("route %s could not be built, %s after admission: %v",
		l.Route, lc.granted.Sub(l.AdmittedAt).Round(time.Minute), cause))
}

// saveAndPublish saves the verdict under the lease lc holds (or k keeps, when the keeper
// runs) and publishes it. The keeper goes on renewing during the Save (a slow Save must not
// let the lease run out); a renewal of the executing lease that lands after the Save is
// refused, and while the Save is in flight the keeper leaves the decision to its answer.
func (r *Runner) saveAndPublish(ctx, wctx context.Context, log *slog.Logger, lc leaseClock, route *Route, k *keeper, v evaluate.Verdict) (Result, error) {
	// The description is cut before it is frozen (no provider shows more than 255
	// characters): a longer one, escaped as JSON, could outgrow the ledger's report ceiling
	// and be refused at every attempt, leaving the commit without a verdict.
	report, _ := json.Marshal(Report{State: v.State, Description: cutRunes(v.Description, MaxDescription), Context: route.Context,
		TargetURL: route.TargetURL})
	if k != nil {
		lc = k.clock(lc.leaseFor)
		k.mu <- struct{}{}
		k.saving = true
		<-k.mu
	}
	l := lc.lease
	// The verdict in hand is saved even when a shutdown lands meanwhile: dropped, it would
	// spend its attempt for nothing.
	sctx, scancel := detached(ctx, 10*time.Second)
	defer scancel()
	staged, err := r.Ledger.Save(sctx, l, report)
	if errors.Is(err, ledger.ErrTooLarge) {
		// Nothing was written and the lease still holds: freeze an error verdict that fits
		// instead, so the commit is not left waiting on a verdict that can never be kept.
		log.Error("the verdict is over the ledger's report ceiling; an error verdict is saved instead", "err", err,
			"state", v.State, "description_runes", utf8.RuneCountInString(v.Description))
		r.count("verdict_too_large")
		small, _ := json.Marshal(Report{State: evaluate.Error, Description: tooLarge, Context: route.Context, TargetURL: route.TargetURL})
		staged, err = r.Ledger.Save(sctx, l, small)
	}
	if k != nil {
		k.mu <- struct{}{}
		k.saving = false
		if err == nil {
			// The publishing lease. Save keeps the row's expiry, which a renewal whose answer
			// was lost may have moved: the clock keeps the last grant heard (granted, sent).
			k.lease = staged.Lease
			k.gen++
			lc.granted, lc.sent = k.granted, k.sent
		}
		<-k.mu
	}
	if err != nil {
		if k != nil {
			k.end()
		}
		if errors.Is(err, ledger.ErrLeaseLost) {
			// Whoever holds the row now (or the next claim, when nobody does) finishes it: the
			// message comes back when this lease ends, as for Busy, so the row never waits on
			// the stranded sweep.
			r.count("lease_lost")
			log.Warn("lease lost before saving: result dropped; the message comes back when the lease ends")
			return Result{RetryAt: lc.local(l.Expires)}, nil
		}
		// The evaluation answered; the ledger did not keep it (busy, unreachable). The attempt
		// is handed back, so that it is not counted as a failed one (a Save that landed after
		// all leaves the row saved, and the hand-back is refused).
		uctx, ucancel := detached(ctx, 5*time.Second)
		defer ucancel()
		if uerr := r.Ledger.Unclaim(uctx, l, r.after(lc, r.retryDelay())); uerr != nil && !errors.Is(uerr, ledger.ErrLeaseLost) {
			log.Warn("hand-back failed after a failed save; the lease ends by itself", "err", uerr)
		}
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: save: %w", err)
	}
	log.Info("verdict saved", "state", v.State, "description", v.Description)
	if k != nil {
		defer k.end()
	}
	lc.lease = staged.Lease
	return r.publishStaged(ctx, wctx, log, staged, route, lc, k)
}

func (r *Runner) publish(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock) (Result, error) {
	log = log.With("evaluation", s.Lease.EvaluationID, "publish_attempt", s.Lease.Attempt, "route", s.Lease.Route)
	// The lease is kept while the route is built, as for an evaluation (execute).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, lc)
	defer k.end()
	route, err := r.route(wctx, s.Lease.Route)
	if k.isLost() {
		log.Warn("lease lost while building the route; the next owner publishes the saved verdict", "err", err)
		return Result{RetryAt: r.now().Add(r.retryDelay())}, nil
	}
	if err != nil {
		k.end()
		lc = k.clock(lc.leaseFor)
	}
	if err != nil && ctx.Err() != nil {
		// Cut by a shutdown while building it (a secret read in flight): not a failed
		// publication; handed back, with a context of its own, for the next claim at once.
		now := r.now()
		rctx, cancel := detached(ctx, 5*time.Second)
		defer cancel()
		if rerr := r.Ledger.Unclaim(rctx, s.Lease, r.after(lc, 0)); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
			return Result{RetryAt: now}, rerr
		}
		log.Warn("publication cut while building the route; handed back for the next claim", "err", err)
		return Result{RetryAt: now}, nil
	}
	if err != nil {
		// The route cannot be built (its token cannot be read, it was removed from the
		// configuration): an operator's to fix, retried on the publish schedule and budget.
		var rep Report
		json.Unmarshal(s.Report, &rep)
		return r.publishFailed(ctx, log, s, lc, rep,
			&publish.Error{Class: publish.Operator, Err: fmt.Errorf("route %s: %w", s.Lease.Route, err)})
	}
	return r.publishStaged(ctx, wctx, log, s, route, lc, k)
}

// Report is the frozen result a row holds: exactly what is published.
type Report struct {
	State       string `json:"state"`
	Description string `json:"description"`
	Context     string `json:"context"`
	TargetURL   string `json:"target_url,omitempty"`
}

// publishStaged posts the saved report. The provider is called with wctx, which the keeper k
// (nil: none) cancels when the lease is lost, so a runner that lost its lease stops posting;
// the keeper is stopped once the provider has answered, before the ledger hears the outcome
// (a renewal landing after Complete would be refused and counted as a lost lease).
func (r *Runner) publishStaged(ctx, wctx context.Context, log *slog.Logger, s ledger.Staged, route *Route, lc leaseClock, k *keeper) (Result, error) {
	// An abandonment ends the row's lease: the keeper stops first, as before a Complete, so
	// that a renewal landing after it is not taken for a lost lease.
	abandon := func(reason string) (Result, error) {
		if k != nil {
			k.halt()
		}
		return r.abandon(ctx, log, s, lc, reason)
	}
	var rep Report
	if err := json.Unmarshal(s.Report, &rep); err != nil {
		return abandon("the saved report does not decode")
	}
	var subj subject.Subject
	if err := json.Unmarshal(s.Lease.Subject, &subj); err != nil || subj.Repository == "" {
		return abandon("the delivery's subject does not decode")
	}
	start := time.Now()
	err := route.Publisher.Publish(wctx, publish.Status{Repository: subj.Repository, SHA: subj.SHA, State: rep.State,
		Description: rep.Description, Context: rep.Context, TargetURL: rep.TargetURL})
	r.latency("publish_latency", start)
	lost := k != nil && k.isLost()
	if k != nil {
		k.halt()
	}
	if err != nil && lost && ctx.Err() == nil {
		// Cut because the lease was lost: whoever holds the row now publishes the same bytes.
		log.Warn("lease lost during publication: stopped; the next owner publishes the saved verdict", "err", err)
		return Result{RetryAt: r.now().Add(r.retryDelay())}, nil
	}
	if err == nil {
		r.count("published")
		if err := r.Ledger.Complete(ctx, s); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
			// Published but not marked done: the next claim answers Publish with the same bytes,
			// and publishing them again posts the same status.
			return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: complete: %w", err)
		}
		log.Info("published", "state", rep.State)
		return Result{Done: true}, nil
	}
	if ctx.Err() != nil {
		// Cut by the caller (a shutdown), not refused by the provider: the lease is given back
		// with an uncancelled context so that the next claim publishes at once.
		now := r.now()
		rctx, cancel := detached(ctx, 5*time.Second)
		defer cancel()
		if rerr := r.Ledger.Unclaim(rctx, s.Lease, r.after(lc, 0)); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
			return Result{RetryAt: now}, rerr
		}
		log.Warn("publication cut; handed back for the next claim", "err", err)
		return Result{RetryAt: now}, nil
	}
	return r.publishFailed(ctx, log, s, lc, rep, err)
}

// publishFailed decides what a failed publication means: abandon at once for a permanent
// refusal or a spent budget, otherwise release the row for the next attempt on the schedule.
func (r *Runner) publishFailed(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, rep Report, err error) (Result, error) {
	leaseFor := lc.leaseFor
	r.count("publish_failures")
	verdict := fmt.Sprintf("verdict %s: %q", rep.State, cutRunes(rep.Description, 255))
	class := publish.ClassOf(err)
	if class == publish.Permanent {
		return r.abandon(ctx, log, s, lc, fmt.Sprintf("provider refused it for good: %v (%s)", err, verdict))
	}
	if class == publish.Operator {
		r.count("publish_refused")
		log.Error("the provider refused the credentials or cannot see the repository, or the route's token cannot be read: "+
			"fix the token or the route; publication is retried until then", "status", publish.StatusOf(err), "err", err)
	}
	since, elapsed := r.budgetUsed(ctx, s, leaseFor)
	budget := r.publishBudget()
	if elapsed >= budget {
		return r.abandon(ctx, log, s, lc, fmt.Sprintf("publish budget of %s spent (since %s, %d attempts): last answer: %v (%s)",
			budget, since.UTC().Format(time.RFC3339), s.Lease.Attempt+1, err, verdict))
	}
	// The next attempt: on the schedule, never after the budget's end, never before the
	// provider asked.
	asked := publish.RetryAfterOf(err)
	wait := max(min(r.backoff(s.Lease.Attempt), budget-elapsed), asked)
	at := r.now().Add(wait)
	if rerr := r.Ledger.Release(ctx, s.Lease, r.after(lc, wait)); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
		return Result{RetryAt: at}, rerr
	}
	if class != publish.Operator {
		log.Warn("publish failed; retried later", "err", err, "retry_at", at, "budget_left", budget-elapsed)
	}
	return Result{RetryAt: at}, nil
}

// abandon ends a saved row that can never be published, keeping the reason (with the verdict
// it froze). A lease lost meanwhile hands the message back to come again when the lease ends.
func (r *Runner) abandon(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, reason string) (Result, error) {
	reason = cutRunes(reason, 1024)
	if err := r.Ledger.Abandon(ctx, s, reason); err != nil {
		if errors.Is(err, ledger.ErrLeaseLost) {
			r.count("lease_lost")
			return Result{RetryAt: lc.local(s.Lease.Expires)}, nil
		}
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: abandon: %w", err)
	}
	r.count("abandoned")
	log.Error("delivery abandoned; amiss ledger republish revives it once the cause is fixed", "reason", reason)
	return Result{Done: true}, nil
}

func (r *Runner) publishBudget() time.Duration {
	if r.PublishBudget > 0 {
		return r.PublishBudget
	}
	return 72 * time.Hour
}

// budgetUsed is how much of the publish budget is spent, by the ledger's clock: from when the
// verdict was saved or revived to the grant (or last renewal) of this publishing lease. A row
// saved by an older version records no such time; its budget counts from its admission.
func (r *Runner) budgetUsed(ctx context.Context, s ledger.Staged, leaseFor time.Duration) (time.Time, time.Duration) {
	since := s.Lease.PublishSince
	if since.IsZero() {
		if row, err := r.Ledger.Inspect(ctx, s.Lease.Key); err == nil {
			since = row.CreatedAt
		}
	}
	if since.IsZero() || s.Lease.Expires.IsZero() {
		return since, 0
	}
	return since, max(s.Lease.Expires.Add(-leaseFor).Sub(since), 0)
}

// backoff is the wait after the publication attempt numbered attempt (0 for the one right
// after saving): PublishRetry doubled per attempt up to PublishRetryMax, drawn between half
// and all of it.
func (r *Runner) backoff(attempt int) time.Duration {
	first, most := r.PublishRetry, r.PublishRetryMax
	if first <= 0 {
		first = 30 * time.Second
	}
	if most <= 0 {
		most = 30 * time.Minute
	}
	d := first
	for i := 0; i < attempt && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	jitter := r.Jitter
	if jitter == nil {
		jitter = rand.Float64
	}
	return d/2 + time.Duration(jitter()*float64(d/2))
}

// DefaultContext is the status context of a verdict frozen without a route (the
// configuration's default context too).
const DefaultContext = "amiss"

// MaxDescription is the longest description a saved verdict keeps, in characters (providers
// show at most 255); a longer one is cut and marked with an ellipsis.
const MaxDescription = 1024

// tooLarge is the error verdict's description when the evaluator's verdict does not fit the
// report ceiling.
const tooLarge = "amiss could not keep the evaluator's verdict: it is over the ledger's report ceiling"

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
