package catchup_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
)

// GitHub's primary rate limit (403, no requests left, its window resetting in 30 minutes)
// refuses the fourth redelivery request of a run: the run stops asking; a run 5 minutes later
// sends GitHub nothing; the run after the reset asks for the rest. Each delivery is asked for
// once in all and becomes one verdict.
func TestAGitHubRateLimitEndsTheAsksUntilItsReset(t *testing.T) {
	w := newWorld(t)
	want := map[string]int{}
	var shas []string
	for range 6 {
		sha, d := w.push(appHook, down)
		want[d.GUID] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	var redelivers, limited atomic.Int32
	var until atomic.Int64 // Unix seconds the limit lasts until
	w.gh.HookRateLimitReset = 30 * time.Minute
	w.gh.HookAnswer = func(op string, _ int) int {
		now := w.clock.Now()
		if now.Unix() < until.Load() {
			limited.Add(1)
			return http.StatusForbidden
		}
		if strings.HasSuffix(op, "/redeliver-webhook-delivery") && redelivers.Add(1) == 4 {
			until.Store(now.Add(30 * time.Minute).Unix())
			return http.StatusForbidden
		}
		return 0
	}
	src := w.sources()[0]
	rep, err := w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 3 || !rep.WaitUntil.Equal(w.clock.Now().Add(30*time.Minute)) {
		t.Fatalf("the run refused at its fourth ask: %+v %v, want 3 asked and a wait of 30 minutes", rep, err)
	}
	w.clock.Advance(5 * time.Minute)
	rep, err = w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 0 || rep.WaitUntil.IsZero() || limited.Load() != 0 {
		t.Fatalf("a run inside the wait: %+v %v, %d requests refused; want nothing sent", rep, err, limited.Load())
	}
	w.clock.Advance(26 * time.Minute)
	rep, err = w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 3 || !rep.WaitUntil.IsZero() {
		t.Fatalf("the run after the reset: %+v %v, want the other 3 asked", rep, err)
	}
	if cur, _, err := catchup.ReadCursor(context.Background(), w.ledger, src.Name()); err != nil || !cur.WaitUntil.IsZero() {
		t.Errorf("the cursor after the wait: %v %v, want no wait kept", cur.WaitUntil, err)
	}
	w.asked(appHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// GitHub's secondary rate limit (429, Retry-After: 60) on a repository's hook: the run stops
// asking, the next one asks for the rest, none twice.
func TestAGitHubSecondaryRateLimitLeavesTheRestToTheNextRun(t *testing.T) {
	w := newWorld(t)
	want := map[string]int{}
	var shas []string
	for range 4 {
		sha, d := w.push(repoHook, down)
		want[d.GUID] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	var redelivers atomic.Int32
	w.gh.HookAnswer = func(op string, _ int) int {
		if strings.HasSuffix(op, "/redeliver-webhook-delivery") && redelivers.Add(1) == 3 {
			return http.StatusTooManyRequests
		}
		return 0
	}
	src := w.sources()[1]
	if rep, err := w.runner().Run(context.Background(), src); err != nil || rep.Asked != 2 || rep.WaitUntil.IsZero() {
		t.Fatalf("the run refused at its third ask: %+v %v, want 2 asked and a wait", rep, err)
	}
	w.clock.Advance(5 * time.Minute)
	if rep, err := w.runner().Run(context.Background(), src); err != nil || rep.Asked != 2 {
		t.Fatalf("the next run: %+v %v, want the other 2 asked", rep, err)
	}
	w.asked(repoHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// GitLab resends 5 events a minute for a project and user and refuses the sixth 429, naming
// no wait: a run resends 5, the next the rest; each event is resent once and becomes one
// verdict.
func TestGitLabsResendLimitLeavesTheRestToTheNextRun(t *testing.T) {
	w := newGitLabWorld(t)
	want := map[string]int{}
	var shas []string
	for range 8 {
		sha, e := w.push(projectHook, down)
		want[e.IdempotencyKey] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	src := w.sources()[0]
	rep, err := w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 5 || !rep.WaitUntil.Equal(w.clock.Now().Add(gitlab.ResendLimitWait)) {
		t.Fatalf("the first run: %+v %v, want 5 resent and a minute's wait", rep, err)
	}
	w.clock.Advance(5 * time.Minute)
	if rep, err = w.runner().Run(context.Background(), src); err != nil || rep.Asked != 3 {
		t.Fatalf("the next run: %+v %v, want the other 3 resent", rep, err)
	}
	w.asked(projectHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
	if n := len(w.hooks.Events(projectHook)); n != 16 {
		t.Errorf("GitLab logged %d attempts, want 8 events and 8 resends", n)
	}
}

// A wait further ahead than any provider can ask for, as a host whose clock ran a day ahead
// writes it, does not stop catch-up: the next run asks, and the cursor keeps no wait.
func TestAWaitWrittenByAClockAheadDoesNotStopCatchUp(t *testing.T) {
	w := newWorld(t)
	_, d := w.push(appHook, down)
	w.clock.Advance(time.Minute)
	src := w.sources()[0]
	ahead := w.runner()
	ahead.Now = func() time.Time { return w.clock.Now().Add(24 * time.Hour) }
	var redelivers atomic.Int32
	w.gh.HookAnswer = func(op string, _ int) int {
		if strings.HasSuffix(op, "/redeliver-webhook-delivery") && redelivers.Add(1) == 1 {
			return http.StatusTooManyRequests
		}
		return 0
	}
	if rep, err := ahead.Run(context.Background(), src); err != nil || rep.Asked != 0 || rep.WaitUntil.IsZero() {
		t.Fatalf("the run a day ahead: %+v %v, want a wait kept", rep, err)
	}
	rep, err := w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 1 {
		t.Fatalf("the next run, on time: %+v %v, want the delivery asked for", rep, err)
	}
	if cur, _, err := catchup.ReadCursor(context.Background(), w.ledger, src.Name()); err != nil || !cur.WaitUntil.IsZero() {
		t.Errorf("the cursor: wait %v %v, want none kept", cur.WaitUntil, err)
	}
	w.asked(appHook, map[string]int{d.GUID: 1})
	w.noViolations()
}

// GitHub failing (502 to every redelivery request, as its gateway answers in an incident) is
// sent one redelivery request a run, not one per failed delivery: the run stops at the first
// failure and leaves the rest to the next run, which asks for each, once GitHub is back.
func TestGitHubFailingItsRedeliveriesIsSentOneARun(t *testing.T) {
	w := newWorld(t)
	want := map[string]int{}
	var shas []string
	for range 6 {
		sha, d := w.push(repoHook, down)
		want[d.GUID] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	var failing atomic.Bool
	var sent atomic.Int32
	failing.Store(true)
	w.gh.HookAnswer = func(op string, _ int) int {
		if !strings.HasSuffix(op, "/redeliver-webhook-delivery") {
			return 0
		}
		sent.Add(1)
		if failing.Load() {
			return http.StatusBadGateway
		}
		return 0
	}
	src := w.sources()[1]
	if _, err := w.runner().Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the run sent failing GitHub %d redelivery requests, want 1", n)
	}
	// GitHub is back: the next run asks for the others; the one whose request may have
	// applied is asked for again once its ask is ReaskAfter old.
	failing.Store(false)
	w.clock.Advance(5 * time.Minute)
	if rep, err := w.runner().Run(context.Background(), src); err != nil || rep.Asked != 5 {
		t.Fatalf("the run after the incident: %+v %v, want the 5 not yet asked for", rep, err)
	}
	w.clock.Advance(catchup.DefaultReaskAfter)
	if rep, err := w.runner().Run(context.Background(), src); err != nil || rep.Asked != 1 {
		t.Fatalf("the run once the first ask is ReaskAfter old: %+v %v, want it asked again", rep, err)
	}
	w.asked(repoHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}
