package runner

import (
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/ledger"
)

// The attempt policy: what the runner does once something has happened to an attempt. It is
// decided here, and only here, by a pure function (policy.decide) of what happened, the lease
// it happened under and the configured limits: no I/O, no clock read, no random draw (the
// caller draws the jitter), as ledger.Row decides the ledger's transitions. The runner
// gathers the facts, asks, and carries the decision out (Runner.follow, Runner.carryOut and
// the steps they name).
//
// The policy keeps three promises. An error verdict stands only for MaxAttempts evaluations
// that failed or timed out, for a crash loop (attempts lost without an answer, three times
// MaxAttempts of them), or for a route that could not be built for twice the publish budget
// since admission: nothing else is counted. A shutdown, a route that cannot be built, an
// evaluation cut by the runner's own scheduling and a Save the ledger refused hand the attempt
// back uncounted. And a saved verdict is retried for as long as it can matter: until the
// publish budget is spent, or the provider refuses it for good.

// event is what happened to an attempt, as the runner saw it.
type event uint8

const (
	// noTime: too little of the invocation is left to claim the message.
	noTime event = iota + 1
	// busy: the claim answered Busy (another lease holds the row; attempt.retryAt says
	// until when, by the ledger's clock).
	busy
	// ledgerFailed: the ledger could not be reached, or answered an error, for a step that is
	// no attempt's outcome (a Claim, a Complete, an Abandon).
	ledgerFailed
	// claimed: the claim answered Execute; nothing has run yet.
	claimed
	// leaseLost: a renewal, a Save or an Abandon found the lease lost: the work is dropped,
	// never saved, never published.
	leaseLost
	// routeFailed: the route could not be built for an evaluation.
	routeFailed
	// routeCut: a shutdown cut the route's build for an evaluation.
	routeCut
	// changeUnreadable: the delivery's change does not decode: nothing can be evaluated.
	changeUnreadable
	// evalFailed: the evaluator answered an error.
	evalFailed
	// evalOutOfTime: the evaluation ran out of the invocation's time (attempt.fair says
	// whether it had all the time the deployment gives any message).
	evalOutOfTime
	// evalCut: a shutdown cut the evaluation.
	evalCut
	// inputsUnavailable: the provider's API could not be read for the inputs the rules need
	// (an outage, a timeout, a rate limit: attempt.err).
	inputsUnavailable
	// saveFailed: the ledger refused a Save for another reason than a lost lease (busy,
	// unreachable): nothing was kept.
	saveFailed
	// published: the provider holds the status.
	published
	// postLost: the publishing lease was lost while the route was built or the status
	// posted; the post was cut.
	postLost
	// postCut: a shutdown cut the route's build or the post of a saved verdict.
	postCut
	// postFailed: the post failed, or the saved verdict's route could not be built
	// (attempt.err says how: publish.ClassOf, publish.RetryAfterOf).
	postFailed
	// undecodable: the saved report or the delivery's change does not decode, so nothing
	// can ever be posted (attempt.err names which).
	undecodable
	// superseded: the subject's record holds a newer verdict (attempt.by; none for a late
	// verdict that found another status standing): this one is never posted.
	superseded
	// subjectBusy: another verdict's post is in flight on the subject, or a post of this
	// verdict may still land; come back at attempt.retryAt, by the ledger's clock, or sooner
	// when the holder's report wakes the message (it is parked on the subject's record).
	subjectBusy
	// confirmLater: posted while an older post could still land over it; come back at
	// attempt.retryAt, by the ledger's clock, to read back what stands.
	confirmLater
	// gateFull: this process has as many requests in flight to the route's API as the route
	// allows; come back after attempt.wait, when one of them will have ended.
	gateFull
)

var eventNames = [...]string{noTime: "no time", busy: "busy", ledgerFailed: "ledger failed", claimed: "claimed",
	leaseLost: "lease lost", routeFailed: "route failed", routeCut: "route cut", changeUnreadable: "change unreadable",
	evalFailed: "evaluation failed", evalOutOfTime: "evaluation out of time", evalCut: "evaluation cut",
	inputsUnavailable: "inputs unavailable", saveFailed: "save failed", published: "published", postLost: "post lost", postCut: "post cut",
	postFailed: "post failed", undecodable: "undecodable", superseded: "superseded", subjectBusy: "subject busy",
	confirmLater: "confirm later", gateFull: "gate full"}

func (e event) String() string {
	if int(e) < len(eventNames) && eventNames[e] != "" {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", int(e))
}

// act is what the runner does next.
type act uint8

const (
	// proceed: go on with the attempt (evaluate).
	proceed act = iota + 1
	// retry: tell the ledger nothing (the lease is lost, or was never held); the message
	// comes back at decision.retry.
	retry
	// release: give the lease back as a failed attempt (ledger Release: an executing lease
	// counts one more of the row's Failures; a publishing one, a publish attempt).
	release
	// unclaim: hand the attempt back uncounted (ledger Unclaim).
	unclaim
	// saveError: save an error verdict (decision.text) under the lease and publish it.
	saveError
	// freezeUnroutable: save an error verdict (decision.text) without a route, under the
	// default context, and abandon it at once (decision.reason).
	freezeUnroutable
	// abandon: abandon the saved row, keeping decision.text as the reason.
	abandon
	// complete: mark the row done.
	complete
	// supersede: end the saved row as superseded by attempt.by, never posted.
	supersede
)

var actNames = [...]string{proceed: "proceed", retry: "retry", release: "release", unclaim: "unclaim",
	saveError: "save an error verdict", freezeUnroutable: "freeze unroutable", abandon: "abandon", complete: "complete",
	supersede: "supersede"}

func (a act) String() string {
	if int(a) < len(actNames) && actNames[a] != "" {
		return actNames[a]
	}
	return fmt.Sprintf("act(%d)", int(a))
}

// clock names whose clock a time is read on. The runner never mixes the two. The ledger
// decides every lease by its own clock, which the runner knows only through a grant
// (leaseClock: the ledger's time of the grant, and the runner's just before it asked). The
// queue's delays run on the runner's clock (Runner.Now), of which only the time elapsed is
// trusted (monotonic in production).
type clock uint8

const (
	// runnerClock: a wait from the runner's now.
	runnerClock clock = iota
	// ledgerClock: an instant by the ledger's clock (a lease's end), turned into the
	// runner's time through the grant it knows (leaseClock.local).
	ledgerClock
)

func (c clock) String() string {
	if c == ledgerClock {
		return "ledger"
	}
	return "runner"
}

// when is when a message comes back: wait after the runner's now (runnerClock), or the
// ledger's instant at (ledgerClock).
type when struct {
	clock clock
	wait  time.Duration
	at    time.Time
}

// after is a wait on the runner's clock.
func after(wait time.Duration) when { return when{clock: runnerClock, wait: wait} }

// onLedger is an instant on the ledger's clock.
func onLedger(at time.Time) when { return when{clock: ledgerClock, at: at} }

// decision is what the policy decides.
type decision struct {
	act act
	// retry is when the message comes back, for retry, release and unclaim (the other acts'
	// own steps decide). The wait of a release or an unclaim is counted on both clocks: the
	// ledger holds the next claim off for it from its own now (reckoned through the grant:
	// Runner.after), and the queue brings the message back after it on the runner's clock.
	retry when
	// text is the error verdict's description (saveError, freezeUnroutable) or the
	// abandonment's reason (abandon); reason is the abandonment's reason after
	// freezeUnroutable.
	text, reason string
	// free (unclaim): the row is handed back with no hold-off, the message still coming back
	// at retry: the subject's record, not the row, says when the verdict may post, and a
	// message woken sooner must find the row free to claim.
	free bool
}

// handBack is a release or an unclaim whose next claim waits wait.
func handBack(a act, wait time.Duration) decision { return decision{act: a, retry: after(wait)} }

// attempt is what happened to an attempt, from the step that saw it (the claim, the
// evaluation, the post) to the policy that decides from it: the event, the lease it happened
// under, and what of it the decision and its carrying out need.
type attempt struct {
	event event
	// lease is the lease it happened under: for a publication, the saved verdict's (its
	// Attempt counts publish grants, its Expires dates the grant the budget is measured to).
	lease ledger.Lease
	// granted is the ledger's time of the last grant or renewal heard (leaseClock.granted),
	// and leaseFor the window that grant was asked for.
	granted  time.Time
	leaseFor time.Duration
	// fair (evalOutOfTime): the evaluation had all the time the deployment gives any message,
	// as takenUp.fair judged it.
	fair bool
	// err is the route's, the evaluator's or the provider's error.
	err error
	// report (postFailed) is the verdict being published, named in an abandonment's reason.
	report Report
	// since (postFailed) is when the publish budget started: the verdict saved or revived
	// (zero: unknown, so none of it is spent).
	since time.Time
	// jitter (postFailed) is a number in [0, 1) that draws the back-off within its range.
	jitter float64
	// retryAt (busy, subjectBusy, confirmLater) is when to come back, by the ledger's clock.
	retryAt time.Time
	// settle (postFailed) is, for a post that may have landed, how long until it has landed
	// or never will: no new post before then (what stands is read back first).
	settle time.Duration
	// wait (gateFull) is how long until a request in flight to the API ends.
	wait time.Duration
	// by (superseded) is the newer verdict.
	by ledger.Key
	// parked (subjectBusy) is the request the subject's record told to wait, which the
	// message is parked with (Result.wait).
	parked *ledger.SubjectRequest
}

// policy holds the limits the runner's attempts are decided by (Runner.policy fills in the
// defaults).
type policy struct {
	// maxAttempts is how many failed evaluations make an error verdict.
	maxAttempts int
	// retryDelay is the wait after a failed evaluation, a route that cannot be built, a Save
	// the ledger refused and a ledger that could not be reached.
	retryDelay time.Duration
	// publishBudget is how long a saved verdict's publication is retried, from when it was
	// saved or revived, by the ledger's clock.
	publishBudget time.Duration
	// publishRetry is the wait after the first failed publication; each further one doubles
	// it, up to publishRetryMax.
	publishRetry, publishRetryMax time.Duration
}

// policy is the attempt policy with the Runner's limits, or their defaults.
func (r *Runner) policy() policy {
	p := policy{maxAttempts: 3, retryDelay: 30 * time.Second, publishBudget: 72 * time.Hour,
		publishRetry: 30 * time.Second, publishRetryMax: 30 * time.Minute}
	if r.MaxAttempts > 0 {
		p.maxAttempts = r.MaxAttempts
	}
	if r.RetryDelay > 0 {
		p.retryDelay = r.RetryDelay
	}
	if r.PublishBudget > 0 {
		p.publishBudget = r.PublishBudget
	}
	if r.PublishRetry > 0 {
		p.publishRetry = r.PublishRetry
	}
	if r.PublishRetryMax > 0 {
		p.publishRetryMax = r.PublishRetryMax
	}
	return p
}

// decide answers what the runner does after a.
func (p policy) decide(a attempt) decision {
	switch a.event {
	case noTime:
		// Back to the queue at once, unclaimed, for an invocation with the time.
		return decision{act: retry, retry: after(0)}
	case busy:
		return decision{act: retry, retry: onLedger(a.retryAt)}
	case ledgerFailed, postLost:
		// Nothing to hand back (or nothing that can be): the message comes back after the
		// retry delay, and finds the row as whoever holds it now leaves it.
		return decision{act: retry, retry: after(p.retryDelay)}
	case claimed:
		return p.claimed(a)
	case leaseLost:
		// Whoever holds the row now finishes it, or the next claim does once the lease has
		// ended: the message comes back then, as for Busy.
		return decision{act: retry, retry: onLedger(a.lease.Expires)}
	case routeFailed:
		// Nothing was evaluated: the operator's to fix, handed back uncounted, until long
		// after the delivery stopped mattering (twice the publish budget since admission).
		if l := a.lease; !l.AdmittedAt.IsZero() && a.granted.Sub(l.AdmittedAt) >= 2*p.publishBudget {
			return p.unroutable(a, a.err)
		}
		return handBack(unclaim, p.retryDelay)
	case routeCut, evalCut, postCut:
		// A shutdown is no failed attempt: handed back for the next claim at once.
		return handBack(unclaim, 0)
	case changeUnreadable:
		return decision{act: saveError, text: "amiss could not read the delivery's change"}
	case evalOutOfTime:
		if !a.fair {
			// Cut by the runner's scheduling (the messages before it took the time), not by
			// its own failure: handed back, to come again at once.
			return handBack(unclaim, 0)
		}
		return p.evaluationFailed(a.lease, fmt.Errorf("the evaluation did not finish within the invocation's time: %w", a.err))
	case evalFailed:
		return p.evaluationFailed(a.lease, a.err)
	case inputsUnavailable:
		// The provider's outage is no failed evaluation, and never a verdict early: handed
		// back uncounted, no sooner than the provider asked, for as long as a saved verdict's
		// publication would be retried (the publish budget since admission); only then does
		// the commit get an error verdict naming it.
		if l := a.lease; !l.AdmittedAt.IsZero() && a.granted.Sub(l.AdmittedAt) >= p.publishBudget {
			return decision{act: saveError, text: cutRunes(fmt.Sprintf("amiss could not read the provider's API for the rules' inputs for %s: %v",
				p.publishBudget, a.err), MaxDescription)}
		}
		return handBack(unclaim, max(p.retryDelay, publish.RetryAfterOf(a.err)))
	case saveFailed:
		// The evaluation answered and the ledger did not keep it: no failed evaluation.
		return handBack(unclaim, p.retryDelay)
	case published:
		return decision{act: complete}
	case postFailed:
		return p.publicationFailed(a)
	case undecodable:
		return decision{act: abandon, text: fmt.Sprint(a.err)}
	case superseded:
		return decision{act: supersede}
	case subjectBusy:
		// No failure: another post decides when; the attempt is handed back uncounted, the
		// row free, so that the holder's report can wake the message before retryAt.
		return decision{act: unclaim, retry: onLedger(a.retryAt), free: true}
	case confirmLater:
		// No failure: the settling of an older post decides when, and nothing wakes it sooner.
		return decision{act: unclaim, retry: onLedger(a.retryAt)}
	case gateFull:
		return handBack(unclaim, a.wait)
	}
	// Unreachable (every event is decided above): the lease runs out by itself.
	return decision{act: retry, retry: after(p.retryDelay)}
}

// lost is how many earlier attempts of l's row ended with neither a verdict, a failure nor a
// hand-back: the runner died under them, was paused past its lease, or could not hand the
// attempt back.
func (p policy) lost(l ledger.Lease) int { return l.Attempt - 1 - l.Failures }

// maxLost is how many lost attempts end the wait: three times maxAttempts. A lost attempt
// cannot be told from a crash, so the bound is generous: a runner paused past its lease, or a
// hand-back that did not land, is rare; a crash loop makes one per redelivery.
func (p policy) maxLost() int { return 3 * p.maxAttempts }

// claimed decides, before anything runs, whether the attempts lost so far end the wait.
func (p policy) claimed(a attempt) decision {
	lost := p.lost(a.lease)
	switch {
	case lost >= p.maxLost()+p.maxAttempts:
		// Past the crash-loop bound and still no answer: the runner dies before it gets
		// there, while building the route (a secret read that hangs past the deadline). The
		// verdict is frozen without building the route.
		return p.unroutable(a, fmt.Errorf("the runner stopped while building it, %d attempts in a row", lost))
	case lost >= p.maxLost():
		// A crash loop (an evaluator that crashes the runner, a kill at the deadline):
		// evaluating again would loop for ever, and the commit gets its error verdict now.
		return decision{act: saveError,
			text: fmt.Sprintf("evaluation did not finish: %d attempts ended without an answer (the runner stopped under each)", lost)}
	}
	return decision{act: proceed}
}

// unroutable freezes an error verdict naming why the route of a's delivery cannot be built,
// and abandons it.
func (p policy) unroutable(a attempt, cause error) decision {
	l := a.lease
	return decision{act: freezeUnroutable,
		text: cutRunes(fmt.Sprintf("amiss could not evaluate: route %s cannot be built: %v", l.Route, cause), MaxDescription),
		reason: fmt.Sprintf("route %s could not be built, %s after admission: %v",
			l.Route, a.granted.Sub(l.AdmittedAt).Round(time.Minute), cause)}
}

// evaluationFailed counts a failed evaluation: released for a later attempt, or, at the
// last allowed one, an error verdict naming the failure.
func (p policy) evaluationFailed(l ledger.Lease, err error) decision {
	failed := l.Failures + 1 // this one included; attempts lost or handed back are no failures
	if failed < p.maxAttempts {
		return handBack(release, p.retryDelay)
	}
	return decision{act: saveError, text: fmt.Sprintf("evaluation failed %d times: %v", failed, cutRunes(err.Error(), MaxDescription))}
}

// publicationFailed decides what a failed publication means: abandoned at once for a
// permanent refusal or a spent budget, otherwise released for the next attempt on the
// schedule, never after the budget's end, never before the provider asked.
func (p policy) publicationFailed(a attempt) decision {
	verdict := fmt.Sprintf("verdict %s: %q", a.report.State, cutRunes(a.report.Description, 255))
	if publish.ClassOf(a.err) == publish.Permanent {
		return decision{act: abandon, text: fmt.Sprintf("provider refused it for good: %v (%s)", a.err, verdict)}
	}
	elapsed := p.budgetUsed(a)
	if elapsed >= p.publishBudget {
		return decision{act: abandon, text: fmt.Sprintf("publish budget of %s spent (since %s, %d attempts): last answer: %v (%s)",
			p.publishBudget, a.since.UTC().Format(time.RFC3339), a.lease.Attempt+1, a.err, verdict)}
	}
	wait := max(min(p.backoff(a.lease.Attempt, a.jitter), p.publishBudget-elapsed), publish.RetryAfterOf(a.err), a.settle)
	return handBack(release, wait)
}

// budgetUsed is how much of the publish budget is spent, by the ledger's clock: from since to
// the grant of the publishing lease (its expiry less the window asked for).
func (p policy) budgetUsed(a attempt) time.Duration {
	if a.since.IsZero() || a.lease.Expires.IsZero() {
		return 0
	}
	return max(a.lease.Expires.Add(-a.leaseFor).Sub(a.since), 0)
}

// backoff is the wait after the publication attempt numbered attempt (0 for the one right
// after saving): publishRetry doubled per attempt up to publishRetryMax, drawn by jitter (in
// [0, 1)) between half and all of it.
func (p policy) backoff(attempt int, jitter float64) time.Duration {
	d := p.publishRetry
	for i := 0; i < attempt && d < p.publishRetryMax; i++ {
		d *= 2
	}
	d = min(d, p.publishRetryMax)
	return d/2 + time.Duration(jitter*float64(d/2))
}
