// Package runner claims queued deliveries, evaluates them under a kept lease, freezes the
// verdict, publishes it as a commit status and marks the delivery done.
//
// Ownership is the ledger's to decide: the runner keeps its lease by renewing it before the
// window closes (timed on the monotonic clock), and losing it cancels the evaluation's context;
// the work is then dropped, never saved, never published. A verdict saved before the lease was
// lost is published by whoever claims next, exactly as frozen.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	// Routes returns the runtime of a route by name.
	Routes func(name string) (*Route, error)
	// Owner names this runner in leases.
	Owner string
	// Lease is the lease window (default 60 seconds), cut so that it ends Margin before the
	// context's deadline (a Lambda's remaining time).
	Lease  time.Duration
	Margin time.Duration
	// RenewEvery is how often a kept lease is renewed (default a third of the window).
	RenewEvery time.Duration
	// MaxAttempts is how many Execute attempts fail before an error verdict is published
	// (default 3); MaxPublishAttempts how many publish attempts before the delivery is
	// abandoned (default 5).
	MaxAttempts        int
	MaxPublishAttempts int
	// RetryDelay is how long a failed attempt waits before the next claim (default 30 s).
	RetryDelay time.Duration
	Log        *slog.Logger
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

func (r *Runner) leaseFor(ctx context.Context) time.Duration {
	lease := r.Lease
	if lease <= 0 {
		lease = time.Minute
	}
	margin := r.Margin
	if margin <= 0 {
		margin = 5 * time.Second
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - margin; left < lease {
			lease = left
		}
	}
	return lease
}

// Process handles one message. An error is returned only when the ledger or a provider could
// not be reached; the message should then come back.
func (r *Runner) Process(ctx context.Context, m queue.Message) (Result, error) {
	log := r.log().With("key", m.Key.String())
	leaseFor := r.leaseFor(ctx)
	if leaseFor <= 0 {
		return Result{RetryAt: r.now()}, errors.New("runner: no time left for a lease")
	}
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
		log.Info("busy", "retry_at", c.RetryAt)
		return Result{RetryAt: c.RetryAt}, nil
	case ledger.ClaimDuplicate:
		log.Info("duplicate", "evaluation", c.EvaluationID)
		return Result{Done: true}, nil
	case ledger.ClaimConflict:
		log.Warn("binding conflict: the message does not match the delivery; acknowledged")
		return Result{Done: true}, nil
	case ledger.Execute:
		return r.execute(ctx, log, *c.Lease, leaseFor)
	case ledger.Publish:
		return r.publish(ctx, log, *c.Staged, leaseFor)
	}
	return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: claim answered %v", c.Outcome)
}

func (r *Runner) retryDelay() time.Duration {
	if r.RetryDelay > 0 {
		return r.RetryDelay
	}
	return 30 * time.Second
}

// keeper renews a lease until stopped; losing it cancels the work's context.
type keeper struct {
	mu    chan struct{} // one renewal at a time with a lease swap
	lease ledger.Lease
	lost  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func (r *Runner) keep(ctx context.Context, cancel context.CancelFunc, l ledger.Lease, leaseFor time.Duration) *keeper {
	k := &keeper{mu: make(chan struct{}, 1), lease: l, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	every := r.RenewEvery
	if every <= 0 {
		every = leaseFor / 3
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
			k.mu <- struct{}{}
			nl, err := r.Ledger.Renew(ctx, k.lease, leaseFor)
			if err == nil {
				k.lease = nl
			}
			<-k.mu
			if errors.Is(err, ledger.ErrLeaseLost) {
				r.count("lease_lost")
				close(k.lost)
				cancel()
				return
			}
		}
	}()
	return k
}

// swap replaces the kept lease (after Save, the publishing lease).
func (k *keeper) swap(l ledger.Lease) {
	k.mu <- struct{}{}
	k.lease = l
	<-k.mu
}

func (k *keeper) isLost() bool {
	select {
	case <-k.lost:
		return true
	default:
		return false
	}
}

func (k *keeper) end() {
	close(k.stop)
	<-k.done
}

func (r *Runner) execute(ctx context.Context, log *slog.Logger, l ledger.Lease, leaseFor time.Duration) (Result, error) {
	log = log.With("evaluation", l.EvaluationID, "attempt", l.Attempt, "route", l.Route)
	route, err := r.Routes(l.Route)
	if err != nil {
		r.Ledger.Release(ctx, l, r.now().Add(r.retryDelay()))
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: route %s: %w", l.Route, err)
	}
	var s subject.Subject
	if err := json.Unmarshal(l.Subject, &s); err != nil {
		// A subject the ingress wrote and cannot be read back: give it an error verdict.
		return r.saveAndPublish(ctx, log, l, leaseFor, route, nil, evaluate.Verdict{State: evaluate.Error,
			Description: "amiss could not read the delivery's subject"})
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, l, leaseFor)
	start := time.Now()
	v, evalErr := route.Evaluator.Evaluate(wctx, s)
	r.latency("evaluation_latency", start)
	if k.isLost() {
		k.end()
		log.Warn("lease lost during evaluation: result dropped")
		return Result{Done: true}, nil
	}
	if evalErr != nil {
		max := r.MaxAttempts
		if max <= 0 {
			max = 3
		}
		if l.Attempt < max {
			k.end()
			log.Warn("evaluation failed; released for a later attempt", "err", evalErr)
			at := r.now().Add(r.retryDelay())
			// Released even when ctx was cancelled (a shutdown): the next owner need not wait
			// for the lease to run out.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.Ledger.Release(rctx, k.lease, at); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
				return Result{RetryAt: at}, err
			}
			return Result{RetryAt: at}, nil
		}
		v = evaluate.Verdict{State: evaluate.Error, Description: fmt.Sprintf("evaluation failed %d times: %v", l.Attempt, evalErr)}
	}
	return r.saveAndPublish(ctx, log, k.lease, leaseFor, route, k, v)
}

func (r *Runner) saveAndPublish(ctx context.Context, log *slog.Logger, l ledger.Lease, leaseFor time.Duration, route *Route, k *keeper, v evaluate.Verdict) (Result, error) {
	report, _ := json.Marshal(Report{State: v.State, Description: v.Description, Context: route.Context, TargetURL: route.TargetURL})
	if k != nil {
		k.mu <- struct{}{}
		l = k.lease
		<-k.mu
	}
	staged, err := r.Ledger.Save(ctx, l, report)
	if err != nil {
		if k != nil {
			k.end()
		}
		if errors.Is(err, ledger.ErrLeaseLost) {
			r.count("lease_lost")
			log.Warn("lease lost before saving: result dropped")
			return Result{Done: true}, nil
		}
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: save: %w", err)
	}
	log.Info("verdict saved", "state", v.State)
	if k != nil {
		k.swap(staged.Lease)
		defer k.end()
	}
	return r.publishStaged(ctx, log, staged, route)
}

func (r *Runner) publish(ctx context.Context, log *slog.Logger, s ledger.Staged, leaseFor time.Duration) (Result, error) {
	log = log.With("evaluation", s.Lease.EvaluationID, "publish_attempt", s.Lease.Attempt, "route", s.Lease.Route)
	route, err := r.Routes(s.Lease.Route)
	if err != nil {
		r.Ledger.Release(ctx, s.Lease, r.now().Add(r.retryDelay()))
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: route %s: %w", s.Lease.Route, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, s.Lease, leaseFor)
	defer k.end()
	return r.publishStaged(ctx, log, s, route)
}

// Report is the frozen result a row holds: exactly what is published.
type Report struct {
	State       string `json:"state"`
	Description string `json:"description"`
	Context     string `json:"context"`
	TargetURL   string `json:"target_url,omitempty"`
}

func (r *Runner) publishStaged(ctx context.Context, log *slog.Logger, s ledger.Staged, route *Route) (Result, error) {
	var rep Report
	if err := json.Unmarshal(s.Report, &rep); err != nil {
		r.Ledger.Abandon(ctx, s, "the saved report does not decode")
		return Result{Done: true}, nil
	}
	var subj subject.Subject
	if err := json.Unmarshal(s.Lease.Subject, &subj); err != nil || subj.Repository == "" {
		r.Ledger.Abandon(ctx, s, "the delivery's subject does not decode")
		log.Error("delivery abandoned: its subject does not decode")
		return Result{Done: true}, nil
	}
	start := time.Now()
	err := route.Publisher.Publish(ctx, publish.Status{Repository: subj.Repository, SHA: subj.SHA, State: rep.State,
		Description: rep.Description, Context: rep.Context, TargetURL: rep.TargetURL})
	r.latency("publish_latency", start)
	if err != nil {
		r.count("publish_failures")
		max := r.MaxPublishAttempts
		if max <= 0 {
			max = 5
		}
		if errors.Is(err, publish.ErrPermanent) || s.Lease.Attempt+1 >= max {
			reason := fmt.Sprintf("publish failed after %d attempts: %v", s.Lease.Attempt+1, err)
			if errors.Is(err, publish.ErrPermanent) {
				reason = "provider refused: " + err.Error()
			}
			if aerr := r.Ledger.Abandon(ctx, s, reason); aerr != nil && !errors.Is(aerr, ledger.ErrLeaseLost) {
				return Result{RetryAt: r.now().Add(r.retryDelay())}, aerr
			}
			r.count("abandoned")
			log.Error("delivery abandoned", "reason", reason)
			return Result{Done: true}, nil
		}
		at := r.now().Add(r.retryDelay())
		if rerr := r.Ledger.Release(ctx, s.Lease, at); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
			return Result{RetryAt: at}, rerr
		}
		log.Warn("publish failed; released for a later attempt", "err", err)
		return Result{RetryAt: at}, nil
	}
	r.count("published")
	if err := r.Ledger.Complete(ctx, s); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
		// Published but not marked done: the next claim answers Publish with the same bytes,
		// and publishing them again posts the same status.
		return Result{RetryAt: r.now().Add(r.retryDelay())}, fmt.Errorf("runner: complete: %w", err)
	}
	log.Info("published", "state", rep.State)
	return Result{Done: true}, nil
}
