package runner

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/ledger"
)

// The attempt policy's decision table, one row per rule. The limits are the defaults: 3
// failed evaluations, a 30 s retry delay, a 72 h publish budget, publication retried after
// 30 s doubling up to 30 minutes.

var (
	admitted = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	defaults = (&Runner{}).policy()
)

// executing is an executing lease at attempt, after failures failed ones, granted at
// granted (a one-minute window).
func executing(attempt, failures int, granted time.Time) attempt {
	return attemptUnder(ledger.Lease{Route: "r", Phase: ledger.PhaseExecute, Attempt: attempt, Failures: failures,
		AdmittedAt: admitted, Expires: granted.Add(time.Minute)}, granted)
}

func attemptUnder(l ledger.Lease, granted time.Time) attempt {
	return attempt{lease: l, granted: granted, leaseFor: time.Minute}
}

// publishing is a failed post under a publishing lease (publish attempt n, counted from 0),
// granted elapsed after the verdict was saved, with jitter j.
func publishing(n int, elapsed time.Duration, j float64, err error) attempt {
	since := admitted.Add(time.Hour)
	a := attemptUnder(ledger.Lease{Route: "r", Phase: ledger.PhasePublish, Attempt: n, AdmittedAt: admitted,
		Expires: since.Add(elapsed).Add(time.Minute)}, since.Add(elapsed))
	a.event, a.err, a.since, a.jitter = postFailed, err, since, j
	a.report = Report{State: "failure", Description: "failed: pull request title"}
	return a
}

func with(a attempt, ev event, change func(*attempt)) attempt {
	a.event = ev
	if change != nil {
		change(&a)
	}
	return a
}

func transient(retryAfter time.Duration) error {
	return &publish.Error{Class: publish.Transient, Status: 503, RetryAfter: retryAfter, Err: errors.New("503")}
}

var (
	boom      = errors.New("evaluator endpoint: 503")
	routeErr  = errors.New(`route "r" is not configured`)
	permanent = &publish.Error{Class: publish.Permanent, Status: 422, Err: errors.New("422 no commit found")}
	operator  = &publish.Error{Class: publish.Operator, Status: 401, Err: errors.New("401 bad credentials")}
)

var decisionTable = []struct {
	name string
	in   attempt
	want decision
}{
	// Before a claim.
	{"a message with too little of the invocation left comes back at once, unclaimed",
		attempt{event: noTime}, decision{act: retry, retry: after(0)}},
	{"a busy row is claimed again when the ledger says, by its clock",
		attempt{event: busy, retryAt: admitted.Add(40 * time.Second)}, decision{act: retry, retry: onLedger(admitted.Add(40 * time.Second))}},
	{"a ledger that cannot be reached is asked again after the retry delay",
		attempt{event: ledgerFailed}, decision{act: retry, retry: after(30 * time.Second)}},

	// The claim: attempts lost so far (attempts less failures less this one).
	{"a first attempt proceeds",
		with(executing(1, 0, admitted), claimed, nil), decision{act: proceed}},
	{"eight lost attempts proceed",
		with(executing(9, 0, admitted), claimed, nil), decision{act: proceed}},
	{"nine lost attempts (three times the limit) freeze the crash loop's error verdict",
		with(executing(10, 0, admitted), claimed, nil), decision{act: saveError,
			text: "evaluation did not finish: 9 attempts ended without an answer (the runner stopped under each)"}},
	{"failed attempts are not lost ones",
		with(executing(11, 2, admitted), claimed, nil), decision{act: proceed}},
	{"twelve lost attempts (the crash-loop bound plus the limit) freeze an unroutable verdict without building the route",
		with(executing(13, 0, admitted.Add(time.Hour)), claimed, nil), decision{act: freezeUnroutable,
			text:   "amiss could not evaluate: route r cannot be built: the runner stopped while building it, 12 attempts in a row",
			reason: "route r could not be built, 1h0m0s after admission: the runner stopped while building it, 12 attempts in a row"}},

	// A lost lease.
	{"a lost lease drops the work; the message comes back when the lease ends, by the ledger's clock",
		with(executing(1, 0, admitted), leaseLost, nil), decision{act: retry, retry: onLedger(admitted.Add(time.Minute))}},

	// Building the route.
	{"a route that cannot be built is handed back for the retry delay",
		with(executing(1, 0, admitted.Add(73*time.Hour)), routeFailed, func(a *attempt) { a.err = routeErr }),
		decision{act: unclaim, retry: after(30 * time.Second)}},
	{"earlier failed evaluations do not shorten the route's wait",
		with(executing(3, 2, admitted.Add(73*time.Hour)), routeFailed, func(a *attempt) { a.err = routeErr }),
		decision{act: unclaim, retry: after(30 * time.Second)}},
	{"a route that cannot be built twice the publish budget after admission freezes an unroutable verdict",
		with(executing(1, 0, admitted.Add(144*time.Hour)), routeFailed, func(a *attempt) { a.err = routeErr }),
		decision{act: freezeUnroutable,
			text:   `amiss could not evaluate: route r cannot be built: route "r" is not configured`,
			reason: `route r could not be built, 144h0m0s after admission: route "r" is not configured`}},
	{"a row with no admission time never freezes an unroutable verdict",
		with(executing(1, 0, admitted.Add(1000*time.Hour)), routeFailed, func(a *attempt) { a.err, a.lease.AdmittedAt = routeErr, time.Time{} }),
		decision{act: unclaim, retry: after(30 * time.Second)}},
	{"a shutdown that cuts the route's build hands the attempt back at once, however late",
		with(executing(1, 0, admitted.Add(144*time.Hour)), routeCut, func(a *attempt) { a.err = routeErr }),
		decision{act: unclaim, retry: after(0)}},

	// Reading the inputs the rules need from the provider.
	{"the provider's outage while reading the inputs is handed back uncounted, after the retry delay",
		with(executing(1, 2, admitted.Add(time.Hour)), inputsUnavailable, func(a *attempt) { a.err = transient(0) }),
		decision{act: unclaim, retry: after(30 * time.Second)}},
	{"no sooner than the provider asked",
		with(executing(1, 0, admitted.Add(time.Hour)), inputsUnavailable, func(a *attempt) { a.err = transient(10 * time.Minute) }),
		decision{act: unclaim, retry: after(10 * time.Minute)}},
	{"an outage lasting the publish budget since admission ends in an error verdict naming it",
		with(executing(1, 0, admitted.Add(72*time.Hour)), inputsUnavailable, func(a *attempt) { a.err = transient(0) }),
		decision{act: saveError, text: "amiss could not read the provider's API for the rules' inputs for 72h0m0s: 503 (transient)"}},

	// Evaluating.
	{"a change that cannot be read gets an error verdict",
		with(executing(1, 0, admitted), changeUnreadable, nil),
		decision{act: saveError, text: "amiss could not read the delivery's change"}},
	{"a failed evaluation under the limit is released for the retry delay",
		with(executing(1, 0, admitted), evalFailed, func(a *attempt) { a.err = boom }),
		decision{act: release, retry: after(30 * time.Second)}},
	{"lost attempts do not count towards the limit",
		with(executing(5, 1, admitted), evalFailed, func(a *attempt) { a.err = boom }),
		decision{act: release, retry: after(30 * time.Second)}},
	{"the last allowed failed evaluation freezes an error verdict naming the failure",
		with(executing(3, 2, admitted), evalFailed, func(a *attempt) { a.err = boom }),
		decision{act: saveError, text: "evaluation failed 3 times: evaluator endpoint: 503"}},
	{"an evaluation out of a fair time under the limit is released like a failure",
		with(executing(1, 0, admitted), evalOutOfTime, func(a *attempt) { a.err, a.fair = boom, true }),
		decision{act: release, retry: after(30 * time.Second)}},
	{"the last evaluation out of a fair time freezes an error verdict saying it did not finish",
		with(executing(3, 2, admitted), evalOutOfTime, func(a *attempt) { a.err, a.fair = boom, true }),
		decision{act: saveError, text: "evaluation failed 3 times: the evaluation did not finish within the invocation's time: evaluator endpoint: 503"}},
	{"an evaluation out of a time the messages before it took is handed back at once, the last one too",
		with(executing(3, 2, admitted), evalOutOfTime, func(a *attempt) { a.err = boom }),
		decision{act: unclaim, retry: after(0)}},
	{"a shutdown that cuts the evaluation hands the attempt back at once, the last one too",
		with(executing(3, 2, admitted), evalCut, func(a *attempt) { a.err = boom }),
		decision{act: unclaim, retry: after(0)}},

	// Saving.
	{"a Save the ledger refused hands the attempt back for the retry delay",
		with(executing(3, 2, admitted), saveFailed, nil), decision{act: unclaim, retry: after(30 * time.Second)}},

	// Publishing.
	{"a published verdict completes the row",
		with(publishing(0, 0, 0, nil), published, nil), decision{act: complete}},
	{"a publishing lease lost mid-post lets the message come back after the retry delay",
		with(publishing(0, 0, 0, transient(0)), postLost, nil), decision{act: retry, retry: after(30 * time.Second)}},
	{"a shutdown that cuts the post hands the publication back at once",
		with(publishing(3, time.Hour, 0, transient(0)), postCut, nil), decision{act: unclaim, retry: after(0)}},
	{"a saved verdict that cannot be decoded is abandoned with the reason",
		with(publishing(0, 0, 0, errors.New("the saved report does not decode")), undecodable, nil),
		decision{act: abandon, text: "the saved report does not decode"}},
	{"a refusal for good abandons at once, naming the verdict",
		publishing(0, 0, 0, permanent), decision{act: abandon,
			text: `provider refused it for good: refused for good: 422 no commit found (verdict failure: "failed: pull request title")`}},
	{"the first failed post is retried after half to all of the first wait (jitter 0: half)",
		publishing(0, 0, 0, transient(0)), decision{act: release, retry: after(15 * time.Second)}},
	{"the first failed post is retried after half to all of the first wait (jitter one half: three quarters)",
		publishing(0, 0, 0.5, transient(0)), decision{act: release, retry: after(22500 * time.Millisecond)}},
	{"the wait doubles per attempt",
		publishing(3, time.Hour, 0, transient(0)), decision{act: release, retry: after(2 * time.Minute)}},
	{"the wait stops doubling at the longest",
		publishing(40, time.Hour, 0, transient(0)), decision{act: release, retry: after(15 * time.Minute)}},
	{"the provider's wait is honoured when longer",
		publishing(0, 0, 0, transient(2*time.Hour)), decision{act: release, retry: after(2 * time.Hour)}},
	{"401, 403 and 404 are retried on the schedule",
		publishing(0, 0, 0, operator), decision{act: release, retry: after(15 * time.Second)}},
	{"the last wait ends at the budget's end",
		publishing(40, 72*time.Hour-10*time.Second, 0, transient(0)), decision{act: release, retry: after(10 * time.Second)}},
	{"the provider's wait is honoured past the budget's end",
		publishing(40, 72*time.Hour-10*time.Second, 0, transient(time.Hour)), decision{act: release, retry: after(time.Hour)}},
	{"a failed post at the budget's end abandons, naming the budget and the verdict",
		publishing(196, 72*time.Hour, 0, transient(0)), decision{act: abandon,
			text: `publish budget of 72h0m0s spent (since 2026-07-01T13:00:00Z, 197 attempts): last answer: 503 (transient) (verdict failure: "failed: pull request title")`}},
	{"a budget whose start is unknown is not spent",
		with(publishing(40, 100*time.Hour, 0, transient(0)), postFailed, func(a *attempt) { a.since = time.Time{} }),
		decision{act: release, retry: after(15 * time.Minute)}},
	{"a post that may have landed is not tried again before it has landed or never will",
		with(publishing(0, 0, 0, transient(0)), postFailed, func(a *attempt) { a.settle = 75 * time.Second }),
		decision{act: release, retry: after(75 * time.Second)}},

	// The order of the verdicts on a commit.
	{"a verdict a newer one superseded is ended, never posted",
		with(publishing(0, 0, 0, nil), superseded, func(a *attempt) { a.by = ledger.Key{7} }), decision{act: supersede}},
	{"a verdict waiting for another post on its commit comes back when the subject's record says, uncounted",
		with(publishing(2, 0, 0, nil), subjectBusy, func(a *attempt) { a.retryAt = admitted.Add(time.Minute) }),
		decision{act: unclaim, retry: onLedger(admitted.Add(time.Minute))}},
	{"a verdict posted while an older post could land over it comes back to read back, uncounted",
		with(publishing(2, 0, 0, nil), confirmLater, func(a *attempt) { a.retryAt = admitted.Add(2 * time.Minute) }),
		decision{act: unclaim, retry: onLedger(admitted.Add(2 * time.Minute))}},
	{"a verdict that finds its API's requests in flight at the limit comes back when one ends, uncounted",
		with(publishing(2, 0, 0, nil), gateFull, func(a *attempt) { a.wait = 12 * time.Second }),
		decision{act: unclaim, retry: after(12 * time.Second)}},
}

func TestEachOutcomeOfAnAttemptHasItsDecision(t *testing.T) {
	for _, row := range decisionTable {
		t.Run(row.name, func(t *testing.T) {
			got := defaults.decide(row.in)
			if got.act != row.want.act || got.retry.clock != row.want.retry.clock || got.retry.wait != row.want.retry.wait ||
				!got.retry.at.Equal(row.want.retry.at) || got.text != row.want.text || got.reason != row.want.reason {
				t.Fatalf("after %v:\n got %s\nwant %s", row.in.event, show(got), show(row.want))
			}
		})
	}
}

// The table has a row for every event, so no outcome is left to a default.
func TestEveryEventIsInTheDecisionTable(t *testing.T) {
	seen := map[event]bool{}
	for _, row := range decisionTable {
		seen[row.in.event] = true
	}
	for e := noTime; e <= gateFull; e++ {
		if !seen[e] {
			t.Errorf("no row decides %v", e)
		}
	}
}

func show(d decision) string {
	s := fmt.Sprintf("%v", d.act)
	if d.act == retry || d.act == release || d.act == unclaim {
		if d.retry.clock == ledgerClock {
			s += fmt.Sprintf(" at %v (ledger's clock)", d.retry.at)
		} else {
			s += fmt.Sprintf(" after %v (runner's clock)", d.retry.wait)
		}
	}
	if d.text != "" {
		s += fmt.Sprintf(" %q", d.text)
	}
	if d.reason != "" {
		s += fmt.Sprintf(" reason %q", d.reason)
	}
	return s
}
