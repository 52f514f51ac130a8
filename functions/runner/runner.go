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
// What the runner does after each outcome of an attempt (hand it back, count it as failed,
// freeze an error verdict, abandon, retry, and when) is decided in one place, the attempt
// policy (attempts.go), a pure function of the outcome, the lease and the limits.
//
// Publication is retried for as long as the delivery can matter: on an exponential schedule
// with jitter, never sooner than the provider asked (Retry-After, rate-limit resets), until the
// publish budget (counted from when the verdict was saved or revived) is spent. Only a refusal
// that can never succeed for this verdict abandons the row at once; 401, 403 and 404 are
// retried like outages, and logged as errors for an operator to fix.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// Route is what the runner needs of a route.
type Route struct {
	Evaluator evaluate.Evaluator
	Publisher publish.Publisher
	Context   string
	TargetURL string
	// Destination names the API the publisher posts to (its provider and base URL, normalised:
	// config.Destination): the verdicts of every route posting to one destination, repository,
	// commit and context are ordered together, and Concurrency bounds the requests in flight to
	// it. OldDestinations are other names subject records of the destination may be kept under
	// (written before names were normalised): consulted before a verdict is ordered.
	Destination     string
	OldDestinations []string
	// Timeout bounds one request to the provider (default 30 s); Settle is how long after
	// the runner gave up on a request the provider may still apply it (default a minute);
	// Concurrency bounds the requests this process has in flight to the destination (default
	// 4; at most half of them, and at least one, for one repository).
	Timeout, Settle time.Duration
	Concurrency     int
	// PullNow, when set, reads what the provider shows now of a pull request change's pull
	// request (its title and target branch), at evaluation. The runner compares it with the
	// change's and freezes the answer with the verdict: it orders two verdicts of the commit
	// whose events carry the same time (ledger.Tie). An error is logged and orders nothing;
	// it never fails the evaluation. Nil: not read.
	PullNow func(ctx context.Context, s change.Change) (change.PullState, error)
	// Inputs, when set, reads from the provider's API the inputs the route's rules need and
	// the change does not hold whole (a pull request's files and commits, a push's commits
	// beyond what its webhook lists, a re-run's everything), under the delivery's lease, before
	// evaluation. Nil: the route has no credential to read its provider's API, and the rules
	// that need such an input fail closed, saying so.
	Inputs InputReader
}

// InputReader reads a change's inputs from its provider's API.
type InputReader interface {
	// Read returns s with each input of need read whole (added to s.Whole, and named in
	// s.Read), or marked unread with why (change.MarkUnread: a permission the credential
	// lacks, a list the provider cuts, a pull request that cannot be identified). An error
	// is a transient failure (the provider's outage, a timeout, a rate limit: publish.ClassOf
	// Transient, with publish.RetryAfterOf): the attempt is handed back and retried, never
	// turned into a verdict early.
	Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error)
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
	// Now is the wall clock for notBefore times (default time.Now; its monotonic reading
	// times what elapses).
	Now func() time.Time
	// Wall is the wall clock alone (default time.Now without its monotonic reading). A
	// request under a grant to post is sent only while both Now and Wall say the grant's
	// requests may still run: the monotonic clock stops while the host is suspended, and the
	// wall clock does not.
	Wall func() time.Time

	gates gates
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
	// RetryAt: when the message should come back (when not Done), by the runner's clock
	// (Now): the queue's delay is reckoned on it.
	RetryAt time.Time
	// wait is set when the verdict waits for another's post on its subject: once the message
	// is set aside until RetryAt, the caller parks it there (Runner.park) so that the
	// holder's report wakes it; waitUntil is the end of the wait the record answered, by the
	// ledger's clock.
	wait      *ledger.SubjectRequest
	waitUntil time.Time
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

func (r *Runner) wall() time.Time {
	if r.Wall != nil {
		return r.Wall()
	}
	return time.Now().Round(0)
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

// Process handles one message. An error is returned only when the ledger or a provider could
// not be reached; the message should then come back.
func (r *Runner) Process(ctx context.Context, m queue.Message) (Result, error) {
	log := r.log().With("key", m.Key.String())
	p := r.policy()
	leaseFor := r.leaseFor(ctx)
	taken := r.takeUp(ctx)
	if dl, ok := ctx.Deadline(); ok {
		// An evaluation ends two margins before the deadline, and running out of time is a
		// failed attempt for a fair one (takenUp.fair): a message taken up later than the
		// first of its invocation is claimed only when a whole lease window is left besides,
		// and otherwise comes back at once, to an invocation of its own.
		left, need := time.Until(dl), 2*r.margin()
		if !taken.first {
			need += r.window()
		}
		if leaseFor <= 0 || left <= need {
			log.Info("not claimed: too little time left in this invocation for an attempt; back to the queue", "left", left, "need", need)
			return r.follow(ctx, log, leaseClock{}, p.decide(attempt{event: noTime}), nil)
		}
	} else if leaseFor <= 0 {
		return r.follow(ctx, log, leaseClock{}, p.decide(attempt{event: noTime}), errors.New("runner: no lease window"))
	}
	sent := r.now()
	c, err := r.Ledger.Claim(ctx, m.Key, m.Binding, r.Owner, leaseFor)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		log.Warn("message for a delivery the ledger does not hold; acknowledged")
		return Result{Done: true}, nil
	}
	if err != nil {
		return r.follow(ctx, log, leaseClock{}, p.decide(attempt{event: ledgerFailed}), fmt.Errorf("runner: claim: %w", err))
	}
	switch c.Outcome {
	case ledger.Busy:
		r.count("busy")
		// RetryAt is the ledger's time: the wait it means is counted from this runner's now,
		// since the queue's delay is reckoned by this runner's clock.
		log.Info("busy", "retry_at", c.RetryAt, "wait", c.RetryAt.Sub(c.Decided))
		return r.follow(ctx, log, decidedClock(c, r.now()), p.decide(attempt{event: busy, retryAt: c.RetryAt}), nil)
	case ledger.ClaimDuplicate:
		log.Info("duplicate", "evaluation", c.EvaluationID)
		return Result{Done: true}, nil
	case ledger.ClaimConflict:
		log.Warn("binding conflict: the message does not match the delivery; acknowledged")
		return Result{Done: true}, nil
	case ledger.Execute:
		return r.execute(ctx, log, newLeaseClock(*c.Lease, leaseFor, sent), taken)
	case ledger.Publish:
		return r.publish(ctx, log, *c.Staged, newLeaseClock(c.Staged.Lease, leaseFor, sent))
	}
	return r.follow(ctx, log, leaseClock{}, p.decide(attempt{event: ledgerFailed}), fmt.Errorf("runner: claim answered %v", c.Outcome))
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

// follow carries out a decision that ends the attempt under lc's lease without a verdict
// (retry, release, unclaim): it hands the lease back as the decision says, with a context of
// its own (a shutdown must not stop a hand-back) bounded to 5 s, and answers when the message
// comes back, on this runner's clock. cause is the error the caller reports (nil: none): a
// hand-back that fails is then logged, and otherwise returned; a lease lost meanwhile is no
// failure (whoever holds the row now decides).
func (r *Runner) follow(ctx context.Context, log *slog.Logger, lc leaseClock, d decision, cause error) (Result, error) {
	res := Result{RetryAt: r.retryAt(d.retry, lc)}
	var giveBack func(context.Context, ledger.Lease, time.Time) error
	switch d.act {
	case retry:
		return res, cause
	case release:
		giveBack = r.Ledger.Release
	case unclaim:
		giveBack = r.Ledger.Unclaim
	default:
		return res, fmt.Errorf("runner: %v does not end an attempt without a verdict", d.act)
	}
	notBefore := r.after(lc, d.retry.wait)
	switch {
	case d.free:
		notBefore = time.Time{}
	case d.retry.clock == ledgerClock:
		notBefore = d.retry.at
	}
	hctx, cancel := detached(ctx, 5*time.Second)
	defer cancel()
	if err := giveBack(hctx, lc.lease, notBefore); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
		if cause == nil {
			return res, fmt.Errorf("runner: %v: %w", d.act, err)
		}
		log.Warn("release failed; the lease ends by itself", "act", d.act, "err", err, "lease_expires", lc.lease.Expires)
	}
	return res, cause
}
