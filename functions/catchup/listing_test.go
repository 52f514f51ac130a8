package catchup_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// unreadSpans reads the spans of attempts catch-up logged it could not read.
func (b *base) unreadSpans() [][2]time.Time {
	var out [][2]time.Time
	re := regexp.MustCompile(`unread_from=(\S+) unread_to=(\S+)`)
	for _, l := range strings.Split(b.logs.String(), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		from, err1 := time.Parse(time.RFC3339Nano, m[1])
		to, err2 := time.Parse(time.RFC3339Nano, m[2])
		if err1 != nil || err2 != nil {
			b.t.Fatalf("an unread span that does not parse: %q", l)
		}
		out = append(out, [2]time.Time{from, to})
	}
	return out
}

// More attempts since the last run than a run reads (MaxPages pages: here 2 of GitLab's 20)
// outrun catch-up. Each failed event is then either resent or within a span of attempts
// catch-up reports it could not read, and runs after the one that could not read back to
// its cursor go on from what that one read: they reach their cursor again.
func TestAListingLongerThanARunReadsReportsWhatItCouldNotReadAndMovesOn(t *testing.T) {
	w := newGitLabWorld(t)
	w.hooks.ResendLimit = -1 // the instance's limit turned off: resends are not what is tested
	src := w.sources()[0]
	run := func() catchup.Report {
		t.Helper()
		r := w.runner()
		r.MaxPages = 2
		// A run's resends are attempts the next runs list (back to the overlap): with 2 new
		// events a run, 3 runs' attempts stay within a run's 2 pages.
		r.MaxAsks = 4
		rep, err := r.Run(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	for range 3 {
		w.push(projectHook, up)
		w.clock.Advance(time.Minute)
	}
	if rep := run(); rep.Cut {
		t.Fatalf("the first run, 3 events: cut")
	}
	var failed []gitlabtest.HookEvent
	for range 50 { // an outage of 50 minutes: 50 events fail
		_, e := w.push(projectHook, down)
		failed = append(failed, e)
		w.clock.Advance(time.Minute)
	}
	cuts := 0
	for i := range 12 { // an hour of runs after it, 2 events each
		w.push(projectHook, up)
		w.push(projectHook, up)
		w.clock.Advance(5 * time.Minute)
		rep := run()
		if rep.Cut {
			cuts++
		}
		if i > 0 && rep.Cut {
			t.Errorf("run %d after the outage was cut: it did not go on from the run before", i+1)
		}
	}
	if cuts != 1 {
		t.Errorf("%d runs were cut, want the first after the outage", cuts)
	}
	resent := w.hooks.Resends(projectHook)
	spans := w.unreadSpans()
	if len(spans) != 1 || w.gauges.get("catchup_given_up") != 1 {
		t.Errorf("spans reported unread %v, catchup_given_up %v: want the one span the first run after the outage missed, counted once",
			spans, w.gauges.get("catchup_given_up"))
	}
	for _, e := range failed {
		in := false
		for _, s := range spans {
			in = in || !e.At.Before(s[0]) && !e.At.After(s[1])
		}
		if resent[e.IdempotencyKey] == 0 && !in {
			t.Errorf("event at %v: neither resent nor in a span reported unread (%v)", e.At, spans)
		}
	}
	w.drain()
	w.noViolations()
}

// A page failing half way through a listing (GitLab answers the second page 502 as long as
// the client retries it) ends the run with an error; the events of the first page are resent,
// the cursor stays, and the next run reads both pages and resends the others: each failed
// event once.
func TestAListingPageThatFailsLeavesTheCursorForTheNextRun(t *testing.T) {
	w := newGitLabWorld(t)
	want := map[string]int{}
	for i := range 25 { // 5 events on the second page, newest first
		mode := up
		if i%5 == 0 {
			mode = down
		}
		if _, e := w.push(projectHook, mode); mode == down {
			want[e.IdempotencyKey] = 1
		}
		w.clock.Advance(time.Minute)
	}
	src := w.sources()[0]
	var failPage atomic.Bool
	failPage.Store(true)
	first := w.hooks.Requests()
	w.hooks.Answer = func(n int) int {
		// Requests after first: 1 is the first page, 2 to 4 the second page and the client's
		// retries of it.
		if failPage.Load() && n-first >= 2 && n-first <= 4 {
			return http.StatusBadGateway
		}
		return 0
	}
	rep, err := w.runner().Run(context.Background(), src)
	if err == nil || !rep.Cut || rep.Asked != 4 {
		t.Fatalf("the run whose second page failed: %+v %v, want an error, the listing cut, and the 4 events of page one resent", rep, err)
	}
	failPage.Store(false)
	w.clock.Advance(5 * time.Minute)
	if rep, err = w.runner().Run(context.Background(), src); err != nil || rep.Cut || rep.Asked != 1 {
		t.Fatalf("the next run: %+v %v, want both pages read and the event of page two resent", rep, err)
	}
	w.asked(projectHook, want)
	w.drain()
	w.noViolations()
}
