package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/publish"
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
		return r.carryOut(ctx, log, s, lc, attempt{event: postLost, err: err})
	}
	if err != nil {
		k.end()
		lc = k.clock(lc.leaseFor)
		if ctx.Err() != nil {
			// Cut by a shutdown while building it (a secret read in flight): not a failed
			// publication.
			log.Warn("publication cut while building the route; handed back for the next claim", "err", err)
			return r.carryOut(ctx, log, s, lc, attempt{event: postCut, err: err})
		}
		// The route cannot be built (its token cannot be read, it was removed from the
		// configuration): an operator's to fix, retried on the publish schedule and budget.
		var rep Report
		json.Unmarshal(s.Report, &rep)
		return r.carryOut(ctx, log, s, lc, attempt{event: postFailed, report: rep,
			err: &publish.Error{Class: publish.Operator, Err: fmt.Errorf("route %s: %w", s.Lease.Route, err)}})
	}
	return r.publishStaged(ctx, wctx, log, s, route, lc, k)
}

// publishStaged posts the saved verdict s through route, in its subject's order, and carries
// out what the policy decides after it. The keeper k is stopped before the ledger hears the
// outcome: a renewal landing after a Complete or an Abandon would be refused and counted as a
// lost lease.
func (r *Runner) publishStaged(ctx, wctx context.Context, log *slog.Logger, s ledger.Staged, route *Route, lc leaseClock, k *keeper) (Result, error) {
	var rep Report
	var c change.Change
	var a attempt
	switch {
	case json.Unmarshal(s.Report, &rep) != nil:
		a = attempt{event: undecodable, err: errors.New("the saved report does not decode")}
	case json.Unmarshal(s.Lease.Change, &c) != nil || c.Repository == "":
		a = attempt{event: undecodable, err: errors.New("the delivery's change does not decode")}
	default:
		tie := rep.Tie
		if tie.IsZero() {
			// Frozen by a runner that recorded no tie: what the delivery's change says of the
			// event's place orders it (the provider was not read for it).
			tie = tieOf(c, ledger.SeenNothing)
		}
		a = r.postInOrder(ctx, wctx, log, s, route, statusOf(s, c, rep), tie, k)
		switch a.event {
		case postLost:
			log.Warn("lease lost during publication: stopped; the next owner publishes the saved verdict", "err", a.err)
		case postCut:
			log.Warn("publication cut; handed back for the next claim", "err", a.err)
		}
	}
	k.halt()
	a.report = rep
	return r.carryOut(ctx, log, s, lc, a)
}

// statusOf is what publishing the saved verdict s posts: its frozen report, on the commit of
// its change c, for its webhook's installation, named by its delivery key.
func statusOf(s ledger.Staged, c change.Change, rep Report) publish.Status {
	st := publish.Status{Repository: c.Repository, SHA: c.SHA, State: rep.State, Description: rep.Description,
		Context: rep.Context, TargetURL: rep.TargetURL, Installation: c.Installation, ExternalID: s.Lease.Key.String(),
		FilesLeftOut: rep.FilesLeftOut}
	for _, f := range rep.Files {
		st.Files = append(st.Files, publish.File{Path: f.Path, Rule: f.Rule, Message: f.Message})
	}
	return st
}

// Publication's defaults (a route's publish settings override them) and the margin a grant to
// post holds beyond the requests it covers.
const (
	defaultPublishTimeout     = 30 * time.Second
	defaultPublishSettle      = time.Minute
	defaultPublishConcurrency = 4
	// holdMargin is what a grant to post lasts beyond its requests' time: the time the grant
	// takes to reach this runner, and clocks of hosts (or store nodes) that disagree by a few
	// seconds, so that nobody takes the grant over while this runner may still be sending
	// under it.
	holdMargin = 10 * time.Second
	// clockAllowance is added to the route's settle time on every grant: the ledger decides
	// when a post has settled on the clock of whoever asks next, which may run ahead of the
	// one that gave up on the post. With it, the order holds while those clocks agree within
	// 10 s (and, for a grant whose runner died, within the hold's margin beyond its requests).
	clockAllowance = 10 * time.Second
)

func (rt *Route) timeout() time.Duration { return cmpOr(rt.Timeout, defaultPublishTimeout) }

// holdFor is how long a grant to post through the route lasts (ledger.SubjectRequest.HoldFor):
// the two requests it may cover (a read-back and a post), each within the route's timeout,
// and holdMargin besides.
func (rt *Route) holdFor() time.Duration { return 2*rt.timeout() + holdMargin }

// requestsLast is how long the requests a delivery sends under a grant may take, from when it
// takes room at the gate: two requests within the route's timeout and a third of holdMargin.
// A request in flight has ended by then.
func (rt *Route) requestsLast() time.Duration { return 2*rt.timeout() + holdMargin/3 }

// settle is how long after a grant to post through the route ended a request sent under it
// may still be applied (ledger.SubjectRequest.Settle): the route's settle time, and
// clockAllowance for the clock of whoever asks next.
func (rt *Route) settle() time.Duration {
	return cmpOr(rt.Settle, defaultPublishSettle) + clockAllowance
}

// settleWait is how long from its report a post whose outcome is unknown, made under a grant
// asked for with q, may still land, so that the verdict is not posted again before (what
// stands is read back first). heard is the subject record's answer to the report: the wait
// until the settle time it keeps, by the ledger's clock, which an older post's may put beyond
// q's. nil when the report was not heard: the grant then ends by itself, at most q.HoldFor
// from now, and a post under it may land q.Settle after that.
func settleWait(q ledger.SubjectRequest, heard *ledger.SubjectGrant) time.Duration {
	if heard == nil {
		return q.HoldFor + q.Settle
	}
	return heard.RetryAt.Sub(heard.Decided)
}

func (rt *Route) destination() string {
	if rt.Destination == "" {
		return "publisher"
	}
	return rt.Destination
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// postInOrder posts status for the saved verdict s under its subject's record: only when the
// record grants it (a newer verdict superseded this one, another post is in flight, or this
// one already stands), within room of the route's API, and reading back first when a post of
// it may already stand. What became of the post is reported to the record, whatever became of
// the row's lease: the record is what orders posts.
func (r *Runner) postInOrder(ctx, wctx context.Context, log *slog.Logger, s ledger.Staged, route *Route, status publish.Status, tie ledger.Tie, k *keeper) attempt {
	pub := route.Publisher
	if res, ok := pub.(publish.Resolver); ok {
		// An abbreviated commit hash (Bitbucket Cloud's pull requests) is ordered, and posted,
		// as the full one, so that every delivery of the commit shares its subject.
		st, err := res.Resolve(wctx, status)
		if err != nil {
			return r.posted(ctx, k, err)
		}
		status = st
	}
	// Every request under a grant ends before the grant does (the grant counts from the
	// ledger's decision, which comes after sent). Room at the API is taken first, so that a
	// delivery that finds none costs the ledger nothing but its hand-back, or its wait: in
	// Lambda it waits for room while its invocation has time for the requests (waitsForRoom);
	// in amiss serve while it holds a seat and the requests holding the room are younger than
	// gateRetry, at most as long as a request may last (waitsForSeat). Either stops when its
	// lease is lost (wctx, which the keeper cancels then).
	var sent, sentWall, end, giveUp time.Time
	var leave, unseat func()
	defer func() {
		if unseat != nil {
			unseat()
		}
	}()
	limit := cmpOr(route.Concurrency, defaultPublishConcurrency)
	// Requests in flight: the route's limit, of which half (at least one) for one repository,
	// and in amiss serve never every worker (a request holds its worker until it ends). A
	// delivery waits for room, briefly, only while the requests in flight and the deliveries
	// waiting stay within the route's limit (a seat).
	flight := shareOf(wctx, limit)
	perRepo := min(max(limit/2, 1), flight)
	waited := false
	for {
		sent, sentWall = r.now(), r.wall()
		end = sent.Add(route.requestsLast())
		freed := r.gates.roomGiven()
		var found room
		leave, found = r.gates.enter(route.destination(), status.Repository, flight, perRepo, sent, end)
		if leave != nil {
			break
		}
		waits := r.waitsForRoom(wctx, found.wait+route.requestsLast())
		if !waits && waitsForSeat(wctx) && sent.Sub(found.oldest) < gateRetry {
			if unseat == nil {
				if unseat = r.gates.seat(route.destination(), limit); unseat != nil {
					giveUp = time.Now().Add(route.requestsLast()) // every request in flight has ended by then
				}
			}
			waits = unseat != nil && time.Now().Before(giveUp)
		}
		if !waits {
			return attempt{event: gateFull, wait: found.wait}
		}
		if !waited {
			waited = true
			r.count("publish_gate_waits")
		}
		if sleep(wctx, found.wait, freed) != nil {
			return attempt{event: gateFull, wait: found.wait}
		}
	}
	if unseat != nil {
		unseat() // waiting no more: the request now counts in flight
		unseat = nil
	}
	defer leave()
	order := s.Lease.Order()
	order.Tie = tie
	q := ledger.SubjectRequest{
		Subject: ledger.Subject{Publisher: route.destination(), Repository: status.Repository, SHA: status.SHA, Context: status.Context},
		Order:   order, EvaluationID: s.Lease.EvaluationID, HoldFor: route.holdFor(), Settle: route.settle()}
	for _, old := range route.OldDestinations {
		// A record kept under an old name of the destination orders this verdict too.
		sub := q.Subject
		sub.Publisher = old
		rec, err := r.Ledger.InspectSubject(ctx, sub.Key())
		switch {
		case errors.Is(err, ledger.ErrUnknownSubject):
			continue
		case err != nil:
			return attempt{event: ledgerFailed, err: fmt.Errorf("runner: subject under %q: %w", old, err)}
		}
		q.Prior = append(q.Prior, rec)
	}
	g, err := r.Ledger.AcquireSubject(ctx, q)
	switch {
	case errors.Is(err, ledger.ErrInvalid), errors.Is(err, ledger.ErrTooLarge):
		return attempt{event: undecodable, err: fmt.Errorf("the verdict's subject cannot be ordered: %w", err)}
	case err != nil:
		return attempt{event: ledgerFailed, err: fmt.Errorf("runner: subject: %w", err)}
	}
	switch g.Outcome {
	case ledger.SubjectSuperseded:
		return attempt{event: superseded, by: g.By}
	case ledger.SubjectStanding:
		return attempt{event: published}
	case ledger.SubjectWait:
		return attempt{event: subjectBusy, retryAt: g.RetryAt, parked: &q}
	}
	pctx, cancel := context.WithTimeout(wctx, end.Sub(r.now()))
	defer cancel()
	// The context's deadline runs on the monotonic clock, which stops while the host is
	// suspended: no request is sent once the wall clock, too, is past the requests' time.
	pctx = providerapi.SendBefore(pctx, sentWall.Add(route.requestsLast()), r.wall)
	start := time.Now()
	post, perr := r.postOnce(pctx, pub, status, g)
	r.latency("publish_latency", start)
	heard, rerr := r.reportSubject(ctx, log, g, post, perr)
	if rerr != nil {
		// What the post did is not recorded: the grant ends by itself, and whoever comes next
		// counts the post as unknown and reads back.
		if perr == nil {
			perr = &publish.Error{Class: publish.Transient, Unknown: true, Err: fmt.Errorf("the post's outcome could not be recorded: %v", rerr)}
		}
		a := r.posted(ctx, k, perr)
		a.settle = settleWait(q, nil)
		return a
	}
	switch heard.Outcome {
	case ledger.SubjectStanding:
		return attempt{event: published}
	case ledger.SubjectConfirm:
		return attempt{event: confirmLater, retryAt: heard.RetryAt}
	case ledger.SubjectSuperseded:
		return attempt{event: superseded}
	}
	a := r.posted(ctx, k, perr)
	if post == ledger.PostUnknown {
		a.settle = settleWait(q, &heard)
	}
	return a
}

// postOnce makes the one post a grant allows: it reads back first when the grant asks (a post
// of this verdict may already stand, or the verdict is late), and posts unless this verdict
// stands already (or, late, another does). It answers what the subject's record is to hear,
// and the publisher's error.
func (r *Runner) postOnce(ctx context.Context, pub publish.Publisher, status publish.Status, g ledger.SubjectGrant) (ledger.PostOutcome, error) {
	if g.ReadBack {
		st, err := pub.Standing(ctx, status)
		switch {
		case err != nil:
			return ledger.PostRefused, err // nothing was posted
		case st == publish.StandingOurs:
			r.count("publish_read_back")
			return ledger.PostApplied, nil
		case g.Late && st == publish.StandingOther:
			return ledger.PostOverridden, nil
		}
	}
	err := pub.Publish(ctx, status)
	switch {
	case err == nil:
		return ledger.PostApplied, nil
	case publish.Unknown(err):
		r.count("publish_unknown")
		return ledger.PostUnknown, err
	}
	return ledger.PostRefused, err
}

// reportSubject tells the subject's record what became of the post under g, with a context of
// its own (a shutdown must not stop it) bounded to 5 s.
func (r *Runner) reportSubject(ctx context.Context, log *slog.Logger, g ledger.SubjectGrant, post ledger.PostOutcome, perr error) (ledger.SubjectGrant, error) {
	hctx, cancel := detached(ctx, 5*time.Second)
	defer cancel()
	a, err := r.Ledger.ReportSubject(hctx, g, post)
	if err != nil {
		log.Warn("the post's outcome is not recorded on its subject; the grant ends by itself", "post", post, "post_err", perr, "err", err)
		return a, err
	}
	if a.Wake != "" {
		// The verdict parked on this grant may post now: its message is brought back.
		if wake, ok := ctx.Value(wakerKey{}).(waker); ok {
			wake(hctx, a.Wake)
		}
	}
	return a, err
}

// posted classifies a post that did not make the verdict stand: postLost (the lease k keeps
// was lost meanwhile: wctx, which the keeper cancels then, cut the call, and whoever holds the
// row now posts the same bytes); postCut (the caller's ctx ended: a shutdown); postFailed (the
// provider refused it, could not be reached, or may have applied it: err says how).
func (r *Runner) posted(ctx context.Context, k *keeper, err error) attempt {
	switch {
	case k.isLost() && ctx.Err() == nil:
		return attempt{event: postLost, err: err}
	case ctx.Err() != nil:
		return attempt{event: postCut, err: err}
	}
	return attempt{event: postFailed, err: err}
}

// carryOut carries out what the policy decides after what became of a publication (a: its
// event, how it failed, the verdict it was for), under the publishing lease of the saved
// verdict s, which lc reckons: complete the row, abandon it, release it for the next attempt
// on the schedule, hand it back (follow), or let the message come back later.
func (r *Runner) carryOut(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, a attempt) (Result, error) {
	p := r.policy()
	a.lease, a.granted, a.leaseFor = s.Lease, lc.granted, lc.leaseFor
	ev, err := a.event, a.err
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
		log.Info("published", "state", a.report.State)
		return Result{Done: true}, nil
	case abandon:
		return r.abandon(ctx, log, s, lc, d.text)
	case supersede:
		return r.supersede(ctx, log, s, lc, a.by)
	}
	res, ferr := r.follow(ctx, log, lc, d, nil)
	if ev == subjectBusy && ferr == nil {
		res.wait, res.waitUntil = a.parked, a.retryAt
	}
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

// supersede ends a saved row whose verdict must never be posted: a newer verdict on the same
// commit and context was recorded first (by), or, late, another status stands.
func (r *Runner) supersede(ctx context.Context, log *slog.Logger, s ledger.Staged, lc leaseClock, by ledger.Key) (Result, error) {
	if err := r.Ledger.Supersede(ctx, s, by); err != nil {
		p := r.policy()
		if errors.Is(err, ledger.ErrLeaseLost) {
			r.count("lease_lost")
			return r.follow(ctx, log, lc, p.decide(attempt{event: leaseLost, lease: s.Lease}), nil)
		}
		return r.follow(ctx, log, lc, p.decide(attempt{event: ledgerFailed}), fmt.Errorf("runner: supersede: %w", err))
	}
	r.count("superseded")
	if by.IsZero() {
		log.Warn("late verdict not posted: another status stands on the commit, and its subject's record was forgotten")
	} else {
		log.Info("superseded by a newer verdict on the same commit and context; not posted", "by", by)
	}
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
