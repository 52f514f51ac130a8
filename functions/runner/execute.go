package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/ledger"
)

// execute runs an attempt under the executing lease lc holds, of a message taken up as taken
// says: it builds the route, evaluates the change and saves the verdict, keeping the lease all
// along; every other end of the attempt is the policy's to decide.
func (r *Runner) execute(ctx context.Context, log *slog.Logger, lc leaseClock, taken takenUp) (Result, error) {
	l, leaseFor := lc.lease, lc.leaseFor
	log = log.With("evaluation", l.EvaluationID, "attempt", l.Attempt, "route", l.Route)
	p := r.policy()
	onClaim := p.decide(attempt{event: claimed, lease: l, granted: lc.granted})
	if onClaim.act == freezeUnroutable {
		return r.unroutable(ctx, log, lc, onClaim)
	}
	built := time.Now()
	// The lease is kept from here on: building the route (a secret read) may take longer
	// than the lease, up to the evaluation's bound, and a lease left to run out meanwhile
	// would let a duplicate message claim the row and make this attempt a lost one.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := r.keep(wctx, cancel, lc)
	// lost ends the attempt once the keeper has found the lease lost: the work is dropped.
	lost := func(msg string) (Result, error) {
		k.end()
		log.Warn(msg)
		kc := k.clock(leaseFor)
		return r.follow(ctx, log, kc, p.decide(attempt{event: leaseLost, lease: kc.lease}), nil)
	}
	route, err := r.route(wctx, l.Route)
	if k.isLost() {
		return lost("lease lost while building the route; the message comes back when the lease ends")
	}
	if err != nil {
		k.end()
		lc = k.clock(leaseFor)
		ev := routeFailed
		if ctx.Err() != nil {
			ev = routeCut // a shutdown cut the build (a secret read in flight)
		}
		d := p.decide(attempt{event: ev, lease: lc.lease, granted: lc.granted, err: err})
		if d.act == freezeUnroutable {
			return r.unroutable(ctx, log, lc, d)
		}
		// The route's error is the one the caller sees; a failed hand-back is logged.
		return r.follow(ctx, log, lc, d, fmt.Errorf("runner: building the route: %w", err))
	}
	routeBuild := time.Since(built)
	var s change.Change
	if err := json.Unmarshal(l.Change, &s); err != nil {
		// A change the ingress wrote and cannot be read back: give it an error verdict.
		d := p.decide(attempt{event: changeUnreadable, lease: l})
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, evaluate.Verdict{State: evaluate.Error, Description: d.text}, ledger.Tie{})
	}
	if onClaim.act == saveError {
		// A crash loop: the commit gets its error verdict now.
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, evaluate.Verdict{State: evaluate.Error, Description: onClaim.text},
			tieOf(s, ledger.SeenNothing))
	}
	start := time.Now()
	ectx, ecancel := r.evaluationContext(wctx)
	s, readErr := r.complete(ectx, log, route, s)
	var v evaluate.Verdict
	var evalErr error
	var tie ledger.Tie
	if readErr == nil {
		v, evalErr = route.Evaluator.Evaluate(ectx, s)
	}
	if readErr == nil && evalErr == nil {
		tie = tieOf(s, r.seen(ectx, log, route, s)) // the provider read at evaluation, within its time
	}
	outOfTime := errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	ecancel()
	r.latency("evaluation_latency", start)
	if k.isLost() {
		return lost("lease lost during evaluation: result dropped; the message comes back when the lease ends")
	}
	if readErr == nil && evalErr == nil {
		v.Read = s.Read
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, v, tie)
	}
	ev := evalFailed
	switch {
	case ctx.Err() != nil:
		ev = evalCut // a shutdown: the caller's context ended
	case outOfTime:
		ev = evalOutOfTime
	case readErr != nil:
		ev, evalErr = inputsUnavailable, readErr
	}
	d := p.decide(attempt{event: ev, lease: l, granted: k.clock(leaseFor).granted, fair: taken.fair(routeBuild), err: evalErr})
	if d.act == saveError {
		return r.saveAndPublish(ctx, wctx, log, lc, route, k, evaluate.Verdict{State: evaluate.Error, Description: d.text},
			tieOf(s, ledger.SeenNothing))
	}
	k.end()
	log.Warn("evaluation failed or cut; released for a later attempt", "err", evalErr, "outcome", ev, "act", d.act)
	return r.follow(ctx, log, k.clock(leaseFor), d, nil)
}

// complete returns s with the inputs the route's rules need and s does not hold whole read
// from the provider's API (route.Inputs), or marked unread, saying why, when they cannot be
// (the rules then fail closed). A route whose rules need nothing the webhook lacks reads
// nothing. A re-run of a check run amiss published is first matched to the delivery that check
// run was for (s.RerunOf), whose change says which pull request, or which push, it was. An
// error is the provider's transient failure, or the ledger's while that delivery is looked up.
func (r *Runner) complete(ctx context.Context, log *slog.Logger, route *Route, s change.Change) (change.Change, error) {
	if s.RerunOf != "" && !s.Whole.Has(change.PullInput) {
		// Whatever the evaluator: what the re-run is of decides its change.
		var err error
		if s, err = r.rerunOf(ctx, log, s); err != nil {
			return s, err
		}
	}
	n, ok := route.Evaluator.(evaluate.Needer)
	if !ok {
		return s, nil
	}
	need := n.Needs(s) &^ s.Whole
	if need == 0 {
		return s, nil
	}
	if route.Inputs == nil {
		s.MarkUnread(need, "the route has no credential to read "+s.Provider+"'s API (see docs/configuration.md, reading what a webhook lacks)")
		return s, nil
	}
	start := time.Now()
	out, err := route.Inputs.Read(ctx, s, need)
	r.latency("inputs_latency", start)
	if err != nil {
		r.count("inputs_unavailable")
		return s, fmt.Errorf("reading %s from %s's API: %w", need, s.Provider, err)
	}
	r.count("inputs_read")
	return out, nil
}

// rerunOf gives a re-run of a check run amiss published what that check run was for: the
// change of the delivery s.RerunOf, when the ledger still holds it and it was for the same
// repository and commit (a pull request's while the re-run's webhook still lists it, or a
// push's: then there is none, and the re-run takes the push's range, and its commits and
// paths as far as the push held them whole). Otherwise s is returned as it is: the first pull
// request its webhook lists stands in, or, with none, its reader must find out whether it is
// a push's, or the rules that need it fail closed. A ledger that fails to answer (anything but a row no longer
// kept) is an error: it says nothing of what the check run was for, and the first pull
// request the webhook lists must not stand in for the one it was.
func (r *Runner) rerunOf(ctx context.Context, log *slog.Logger, s change.Change) (change.Change, error) {
	return r.rerunOfDepth(ctx, log, s, s.RerunOf, 0)
}

// maxRerunChain bounds how many re-runs of re-runs are followed back to the event they re-run
// (each Re-run's check run names the re-run delivery that published it): one ledger read each,
// and far more presses than a flaky check gets; retention ends a chain sooner (a delivery no
// longer kept).
const maxRerunChain = 64

func (r *Runner) rerunOfDepth(ctx context.Context, log *slog.Logger, s change.Change, of string, depth int) (change.Change, error) {
	key, err := ledger.ParseKey(of)
	if err != nil || depth >= maxRerunChain {
		return s, nil
	}
	row, err := r.Ledger.Inspect(ctx, key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		log.Info("the delivery a re-run's check run was published for is not in the ledger", "rerun_of", of, "err", err)
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("looking up the delivery the re-run's check run was published for (%s): %w", key.Short(), err)
	}
	var was change.Change
	if err := json.Unmarshal(row.Change, &was); err != nil || was.Repository != s.Repository || was.SHA != s.SHA ||
		was.Provider != s.Provider {
		return s, nil
	}
	// unlisted: a pull request the commit no longer heads (closed since, or headed elsewhere):
	// the first the re-run's webhook lists stands in.
	unlisted := func(p *change.Pull) bool { return len(s.Listed) > 0 && !slices.Contains(s.Listed, p.Number) }
	switch was.Event {
	case change.PullRequest:
		if was.Pull == nil || unlisted(was.Pull) {
			return s, nil
		}
		s.Pull = rerunPull(was.Pull)
	case change.Push:
		// The push's commits and paths are fixed by the push: the re-run sees them as the
		// push's verdict did, those its webhook held whole without a read, the others read
		// from the push's own range.
		s.Pull = nil
		s.Before, s.Ref = was.Before, was.Ref
		s.Commits, s.Paths = was.Commits, was.Paths
		s.Whole = s.Whole&^(change.CommitsInput|change.PathsInput) | was.Whole&(change.CommitsInput|change.PathsInput)
	case change.Rerun:
		if was.Whole.Has(change.PullInput) {
			// A check suite's Re-run (its first listed pull request held whole), or one
			// admitted before re-runs named what they list.
			if was.Pull != nil && unlisted(was.Pull) {
				return s, nil
			}
			s.Pull = nil
			if was.Pull != nil {
				s.Pull = rerunPull(was.Pull)
			}
			break
		}
		// A re-run of a re-run: follow it back to the event it re-runs.
		return r.rerunOfDepth(ctx, log, s, was.RerunOf, depth+1)
	default:
		return s, nil
	}
	s.Whole |= change.PullInput
	return s, nil
}

// rerunPull is the pull request p of the delivery a re-run re-runs, as the re-run takes it:
// its number and branches; its title is read as it is now, and what the delivery's payload
// proved of its place (the title an edit changed from, the head an opening set) is the
// delivery's event's, not the re-run's, whose body proves nothing of it.
func rerunPull(p *change.Pull) *change.Pull {
	return &change.Pull{Number: p.Number, TargetBranch: p.TargetBranch, SourceBranch: p.SourceBranch}
}

// unroutable ends a delivery whose route cannot be built (d, decided by the policy): it
// freezes the error verdict naming the cause, under the default context (there is no route
// to take one from, and what is frozen is what is published), and abandons it at once, so
// the row stops waiting and holding its slot. `amiss ledger republish` publishes it once the
// route exists again.
func (r *Runner) unroutable(ctx context.Context, log *slog.Logger, lc leaseClock, d decision) (Result, error) {
	report, _ := json.Marshal(Report{State: evaluate.Error, Context: DefaultContext, Description: d.text})
	sctx, cancel := detached(ctx, 10*time.Second)
	defer cancel()
	staged, err := r.Ledger.Save(sctx, lc.lease, report)
	if err != nil {
		return r.saveRefused(ctx, log, lc, err)
	}
	log.Error("route cannot be built: error verdict frozen and abandoned", "reason", d.reason)
	lc.lease = staged.Lease
	return r.abandon(sctx, log, staged, lc, d.reason)
}

// saveAndPublish saves the verdict under the lease k keeps and publishes it. The keeper goes
// on renewing during the Save (a slow Save must not let the lease run out), and while the
// Save is in flight leaves the decision to its answer (keeper.beginSave, keeper.endSave).
func (r *Runner) saveAndPublish(ctx, wctx context.Context, log *slog.Logger, lc leaseClock, route *Route, k *keeper, v evaluate.Verdict, tie ledger.Tie) (Result, error) {
	// The description is cut before it is frozen (no provider shows more than 255
	// characters): a longer one, escaped as JSON, could outgrow the ledger's report ceiling
	// and be refused at every attempt, leaving the commit without a verdict.
	rep := withFiles(Report{State: v.State, Description: cutRunes(v.Description, MaxDescription), Context: route.Context,
		TargetURL: route.TargetURL, Tie: tie, Read: v.Read}, v.Files)
	lc = k.beginSave(lc.leaseFor)
	l := lc.lease
	// The verdict in hand is saved even when a shutdown lands meanwhile: dropped, it would
	// spend its attempt for nothing.
	sctx, scancel := detached(ctx, 10*time.Second)
	defer scancel()
	report, _ := json.Marshal(rep)
	staged, err := r.Ledger.Save(sctx, l, report)
	for errors.Is(err, ledger.ErrTooLarge) && len(rep.Files) > 0 {
		// A ledger whose ceiling is under the files' budget: the files are what a check run
		// annotates, not the verdict, so half of them are kept (and the rest counted as left
		// out) before the verdict itself is given up.
		keep := len(rep.Files) / 2
		rep.FilesLeftOut += len(rep.Files) - keep
		rep.Files = rep.Files[:keep]
		if keep == 0 {
			rep.Files = nil
		}
		report, _ = json.Marshal(rep)
		staged, err = r.Ledger.Save(sctx, l, report)
	}
	if errors.Is(err, ledger.ErrTooLarge) {
		// Nothing was written and the lease still holds: freeze an error verdict that fits
		// instead, so the commit is not left waiting on a verdict that can never be kept.
		log.Error("the verdict is over the ledger's report ceiling; an error verdict is saved instead", "err", err,
			"state", v.State, "description_runes", utf8.RuneCountInString(v.Description))
		r.count("verdict_too_large")
		small, _ := json.Marshal(Report{State: evaluate.Error, Description: tooLarge, Context: route.Context, TargetURL: route.TargetURL})
		staged, err = r.Ledger.Save(sctx, l, small)
	}
	if err != nil {
		k.endSave(nil, lc)
		k.end()
		return r.saveRefused(ctx, log, lc, err)
	}
	lc = k.endSave(&staged.Lease, lc) // the publishing lease, kept from now on
	log.Info("verdict saved", "state", v.State, "description", v.Description)
	defer k.end()
	return r.publishStaged(ctx, wctx, log, staged, route, lc, k)
}

// saveRefused ends an attempt whose Save the ledger refused (err), under the lease lc holds.
// A lost lease drops the result: whoever holds the row now (or the next claim, when nobody
// does) finishes it, and the message comes back when this lease ends, as for Busy, so the row
// never waits on the stranded sweep. Any other refusal (busy, unreachable) hands the attempt
// back, so that it is not counted (a Save that landed after all leaves the row saved, and the
// hand-back is refused).
func (r *Runner) saveRefused(ctx context.Context, log *slog.Logger, lc leaseClock, err error) (Result, error) {
	p := r.policy()
	if errors.Is(err, ledger.ErrLeaseLost) {
		r.count("lease_lost")
		log.Warn("lease lost before saving: result dropped; the message comes back when the lease ends")
		return r.follow(ctx, log, lc, p.decide(attempt{event: leaseLost, lease: lc.lease}), nil)
	}
	return r.follow(ctx, log, lc, p.decide(attempt{event: saveFailed, lease: lc.lease}), fmt.Errorf("runner: save: %w", err))
}
