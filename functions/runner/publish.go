package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// publish publishes the saved verdict s under the publishing lease lc holds, keeping the
// lease while the route is built, as for an evaluation. It never evaluates again.
func (r *Runner) publish(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock) (Result, error) {
	log = log.With("evaluation", s.Lease.EvaluationID, "publish_attempt", s.Lease.Attempt, "route", s.Lease.Route)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, lc)
	defer k.end()
	route, err := r.route(wctx, s.Lease.Route)
	if k.isLost() {
		log.Warn("lease lost while building the route; the next owner publishes the saved verdict", "err", err)
		return r.settle(ctx, log, s, lc, Report{}, postLost, err)
	}
	if err != nil {
		k.end()
		lc = k.clock(lc.leaseFor)
		if ctx.Err() != nil {
			// Cut by a shutdown while building it (a secret read in flight): not a failed
			// publication.
			log.Warn("publication cut while building the route; handed back for the next claim", "err", err)
			return r.settle(ctx, log, s, lc, Report{}, postCut, err)
		}
		// The route cannot be built (its token cannot be read, it was removed from the
		// configuration): an operator's to fix, retried on the publish schedule and budget.
		var rep Report
		json.Unmarshal(s.Report, &rep)
		return r.settle(ctx, log, s, lc, rep, postFailed,
			&publish.Error{Class: publish.Operator, Err: fmt.Errorf("route %s: %w", s.Lease.Route, err)})
	}
	return r.publishStaged(ctx, wctx, log, s, route, lc, k)
}

// publishStaged posts the saved verdict s through route and settles the outcome. The keeper k
// (nil: none) is stopped before the ledger hears the outcome: a renewal landing after a
// Complete or an Abandon would be refused and counted as a lost lease.
func (r *Runner) publishStaged(ctx, wctx context.Context, log *slog.Logger, s ledger.Staged, route *Route, lc leaseClock, k *keeper) (Result, error) {
	var rep Report
	var subj subject.Subject
	var ev event
	var err error
	switch {
	case json.Unmarshal(s.Report, &rep) != nil:
		ev, err = undecodable, errors.New("the saved report does not decode")
	case json.Unmarshal(s.Lease.Subject, &subj) != nil || subj.Repository == "":
		ev, err = undecodable, errors.New("the delivery's subject does not decode")
	default:
		ev, err = r.post(ctx, wctx, route.Publisher, subj, rep, k)
		switch ev {
		case postLost:
			log.Warn("lease lost during publication: stopped; the next owner publishes the saved verdict", "err", err)
		case postCut:
			log.Warn("publication cut; handed back for the next claim", "err", err)
		}
	}
	if k != nil {
		k.halt()
	}
	return r.settle(ctx, log, s, lc, rep, ev, err)
}

// post posts the verdict rep on subj's commit through pub and classifies the outcome:
// published; postLost (the lease k keeps was lost meanwhile: wctx, which the keeper cancels
// then, cut the call, and whoever holds the row now posts the same bytes); postCut (the
// caller's ctx ended: a shutdown); postFailed (the provider refused it or could not be
// reached; the error says how: publish.ClassOf, publish.RetryAfterOf). k is nil when no
// keeper runs. post only posts: what the outcome means is settle's to carry out.
func (r *Runner) post(ctx, wctx context.Context, pub publish.Publisher, subj subject.Subject, rep Report, k *keeper) (event, error) {
	start := time.Now()
	err := pub.Publish(wctx, publish.Status{Repository: subj.Repository, SHA: subj.SHA, State: rep.State,
		Description: rep.Description, Context: rep.Context, TargetURL: rep.TargetURL})
	r.latency("publish_latency", start)
	switch {
	case err == nil:
		return published, nil
	case k != nil && k.isLost() && ctx.Err() == nil:
		return postLost, err
	case ctx.Err() != nil:
		return postCut, err
	}
	return postFailed, err
}

// settle carries out what the policy decides after a publication's outcome ev (err: how it
// failed), under the publishing lease lc holds: complete the row, abandon it, release it for
// the next attempt on the schedule, hand it back, or let the message come back later.
func (r *Runner) settle(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, rep Report, ev event, err error) (Result, error) {
	p := r.policy()
	a := attempt{event: ev, lease: s.Lease, granted: lc.granted, leaseFor: lc.leaseFor, err: err, report: rep}
	class := publish.ClassOf(err)
	if ev == postFailed {
		r.count("publish_failures")
		a.since = r.budgetSince(ctx, s)
		a.jitter = r.jitter()
		if class == publish.Operator {
			r.count("publish_refused")
			log.Error("the provider refused the credentials or cannot see the repository, or the route's token cannot be read: "+
				"fix the token or the route; publication is retried until then", "status", publish.StatusOf(err), "err", err)
		}
	}
	d := p.decide(a)
	switch d.act {
	case complete:
		r.count("published")
		if err := r.Ledger.Complete(ctx, s); err != nil && !errors.Is(err, ledger.ErrLeaseLost) {
			// Published but not marked done: the next claim answers Publish with the same bytes,
			// and publishing them again posts the same status.
			return r.follow(ctx, log, lc, p.decide(attempt{event: ledgerFailed}), fmt.Errorf("runner: complete: %w", err))
		}
		log.Info("published", "state", rep.State)
		return Result{Done: true}, nil
	case abandon:
		return r.abandon(ctx, log, s, lc, d.text)
	}
	res, ferr := r.follow(ctx, log, lc, d, nil)
	if ev == postFailed && class != publish.Operator {
		log.Warn("publish failed; retried later", "err", err, "retry_at", res.RetryAt, "budget_left", p.publishBudget-p.budgetUsed(a))
	}
	return res, ferr
}

// abandon ends a saved row that can never be published, keeping the reason (with the verdict
// it froze). A lease lost meanwhile hands the message back to come again when the lease ends.
func (r *Runner) abandon(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, reason string) (Result, error) {
	reason = cutRunes(reason, 1024)
	if err := r.Ledger.Abandon(ctx, s, reason); err != nil {
		p := r.policy()
		if errors.Is(err, ledger.ErrLeaseLost) {
			r.count("lease_lost")
			return r.follow(ctx, log, lc, p.decide(attempt{event: leaseLost, lease: s.Lease}), nil)
		}
		return r.follow(ctx, log, lc, p.decide(attempt{event: ledgerFailed}), fmt.Errorf("runner: abandon: %w", err))
	}
	r.count("abandoned")
	log.Error("delivery abandoned; amiss ledger republish revives it once the cause is fixed", "reason", reason)
	return Result{Done: true}, nil
}

// budgetSince is when s's publish budget started: when its verdict was saved or revived. A
// row saved by an older version records no such time; its budget counts from its admission
// (zero when the row cannot be read: none of the budget is spent).
func (r *Runner) budgetSince(ctx context.Context, s ledger.Staged) time.Time {
	since := s.Lease.PublishSince
	if since.IsZero() {
		if row, err := r.Ledger.Inspect(ctx, s.Lease.Key); err == nil {
			since = row.CreatedAt
		}
	}
	return since
}

// jitter draws the back-off within its range: a number in [0, 1).
func (r *Runner) jitter() float64 {
	if r.Jitter != nil {
		return r.Jitter()
	}
	return rand.Float64()
}
