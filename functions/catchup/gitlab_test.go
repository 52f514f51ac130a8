package catchup_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/publish"
)

const (
	glToken      = "glpat-hooks"
	glSecret     = "gitlab-secret-token"
	glStatusName = "amiss/verdict"
)

// The project's hook signs with a signing token (route gl, gitlab-signing); the group's
// sends its secret token (route glt, gitlab-token).
var (
	glSigning    = "whsec_" + base64.StdEncoding.EncodeToString([]byte("catch-up-signing-key-32-bytes-ok"))
	projectHook  = gitlabtest.Hook{Parent: "acme/app", ID: 17}
	groupHook    = gitlabtest.Hook{Group: true, Parent: "acme", ID: 9}
	projectOfAPI = gitlab.Hook{Project: "acme/app", ID: 17}
	groupOfAPI   = gitlab.Hook{Group: "acme", ID: 9}
)

// glWorld is GitLab (a project's webhook and a group's, the commit statuses API) in front of
// the real ingress, queue and runner over a FileLedger, and catch-up over that ledger.
type glWorld struct {
	base
	statuses *gitlabtest.GitLab
	hooks    *gitlabtest.Hooks
	api      *httptest.Server
}

func newGitLabWorld(t *testing.T) *glWorld {
	t.Helper()
	statuses := gitlabtest.New(func(tok string) bool { return tok == glToken })
	hooks := &gitlabtest.Hooks{Authorize: func(tok string) bool { return tok == glToken }, DeliveryTimeout: deliveryTimeout, Next: statuses}
	api := httptest.NewServer(hooks)
	t.Cleanup(api.Close)
	w := &glWorld{statuses: statuses, hooks: hooks, api: api}
	ingress := newBase(t, &w.base, `
routes:
  gl:
    provider: gitlab
    secrets: [{id: k, from: "env:GLSIGN"}]
    repositories: ["acme/*"]
    rules: {commit_message: '^[A-Z]'}
    publish: {provider: gitlab, base_url: "`+api.URL+`", token: {from: "env:TOKEN"}, context: `+glStatusName+`}
  glt:
    provider: gitlab
    scheme: gitlab-token
    secrets: [{id: k, from: "env:GLTOKEN"}]
    repositories: ["acme/*"]
    rules: {commit_message: '^[A-Z]'}
    publish: {provider: gitlab, base_url: "`+api.URL+`", token: {from: "env:TOKEN"}, context: `+glStatusName+`}
`, secretsMap{"GLSIGN": glSigning, "GLTOKEN": glSecret}, func(baseURL string) publish.Publisher {
		return publish.NewGitLab(baseURL, glToken, api.Client())
	})
	hooks.Now = w.clock.Now
	hooks.AddHook(projectHook, gitlabtest.HookConfig{URL: ingress + "/hooks/gl", SigningToken: glSigning})
	hooks.AddHook(groupHook, gitlabtest.HookConfig{URL: ingress + "/hooks/glt", Token: glSecret})
	return w
}

// push makes GitLab send a push of a new commit of acme/app through hook while the ingress is
// in mode, and returns the commit and the attempt.
func (w *glWorld) push(hook gitlabtest.Hook, mode ingressMode) (string, gitlabtest.HookEvent) {
	return w.pushFrom(hook, mode, "acme/app")
}

// pushFrom is push of a commit of project.
func (w *glWorld) pushFrom(hook gitlabtest.Hook, mode ingressMode, project string) (string, gitlabtest.HookEvent) {
	w.mode.Store(int32(mode))
	defer w.mode.Store(int32(up))
	if mode == hung {
		w.hooks.SetDeliveryTimeout(hungTimeout)
		defer w.hooks.SetDeliveryTimeout(deliveryTimeout)
	}
	w.n++
	sha := fmt.Sprintf("%040x", 0x1000+w.n)
	body := fmt.Sprintf(`{"object_kind":"push","event_name":"push","ref":"refs/heads/main","before":"%040x","after":%q,"checkout_sha":%q,`+
		`"total_commits_count":1,"project":{"id":7,"path_with_namespace":%q},"commits":[{"id":%q,"message":"Change %d"}]}`,
		0x1000+w.n-1, sha, sha, project, sha, w.n)
	return sha, w.hooks.Trigger(hook, gitlabtest.Event{Trigger: "push_hooks", Body: []byte(body)})
}

func (w *glWorld) sources() []catchup.Source {
	return []catchup.Source{
		&catchup.GitLab{Route: "gl", Hook: projectOfAPI, Client: gitlab.NewClient(w.api.URL, glToken, nil)},
		&catchup.GitLab{Route: "glt", Hook: groupOfAPI, Client: gitlab.NewClient(w.api.URL, glToken, nil)},
	}
}

func (w *glWorld) catchUp(r *catchup.Runner) []catchup.Report {
	w.t.Helper()
	return w.runAll(r, w.sources())
}

// verdicts checks that each commit has exactly one status posted.
func (w *glWorld) verdicts(shas ...string) {
	w.t.Helper()
	for _, sha := range shas {
		if n := w.statuses.Count("acme/app", sha, glStatusName); n != 1 {
			w.t.Errorf("commit %s has %d statuses, want one verdict", sha[30:], n)
		}
	}
}

// asked checks the resends GitLab carried out per event (Idempotency-Key) of hook.
func (w *glWorld) asked(hook gitlabtest.Hook, want map[string]int) {
	w.t.Helper()
	checkAsked(w.t, hook, w.hooks.Resends(hook), want)
}

func (w *glWorld) noViolations() {
	w.t.Helper()
	if v := append(w.hooks.Violations(), w.statuses.Violations()...); len(v) > 0 {
		w.t.Errorf("requests GitLab would refuse: %q", v)
	}
}

func TestGitLabEventsFailedWhileTheIngressWasDownAreResentOnceEach(t *testing.T) {
	w := newGitLabWorld(t)
	okSHA, ok := w.push(projectHook, up)
	w.drain()
	b, bd := w.push(projectHook, down)
	c, cd := w.push(groupHook, down)
	d, dd := w.push(projectHook, hung)
	e, ed := w.push(groupHook, admitThenFail) // the ledger has it although GitLab saw it fail
	f, fd := w.push(projectHook, unreachable)
	for _, a := range []gitlabtest.HookEvent{bd, cd, dd, ed, fd} {
		if a.Succeeded() {
			t.Fatalf("event %s while the ingress was down logged %s", a.IdempotencyKey, a.Status)
		}
	}
	if dd.Status != "internal error" || fd.Status != "internal error" {
		t.Fatalf("the hung and the unreachable ingress were logged %q and %q, want no answer", dd.Status, fd.Status)
	}
	w.clock.Advance(time.Minute)

	reps := w.catchUp(w.runner())
	w.asked(projectHook, map[string]int{bd.IdempotencyKey: 1, dd.IdempotencyKey: 1, fd.IdempotencyKey: 1})
	w.asked(groupHook, map[string]int{cd.IdempotencyKey: 1, ed.IdempotencyKey: 1})
	if reps[0].Found != 3 || reps[0].Asked != 3 || reps[1].Found != 2 || reps[1].Asked != 2 {
		t.Errorf("reports %+v, want three found and asked of the project's hook, two of the group's", reps)
	}
	w.drain()
	w.verdicts(okSHA, b, c, d, e, f)
	if !ok.Succeeded() {
		t.Errorf("the event sent while the ingress was up was logged %s", ok.Status)
	}

	// The next run sees every resend succeed and asks for nothing.
	w.clock.Advance(catchup.DefaultReaskAfter + time.Minute)
	reps = w.catchUp(w.runner())
	for i, want := range []int{3, 2} {
		if rep := reps[i]; rep.Asked != 0 || rep.Open != 0 || rep.Resolved != want || rep.Lost != 0 {
			t.Errorf("second run: %+v, want %d resolved and nothing asked or open", rep, want)
		}
	}
	w.asked(projectHook, map[string]int{bd.IdempotencyKey: 1, dd.IdempotencyKey: 1, fd.IdempotencyKey: 1})
	w.asked(groupHook, map[string]int{cd.IdempotencyKey: 1, ed.IdempotencyKey: 1})
	if got := w.gauges.get("catchup_redelivered"); got != 5 {
		t.Errorf("catchup_redelivered %v, want 5", got)
	}
	w.noViolations()
}

// Two runs at once, on two handles of one root, each deciding what to ask from the same
// cursor before either records its asks: every failed event is resent once in all.
func TestTwoRunsAtOnceResendEachGitLabEventOnce(t *testing.T) {
	w := newGitLabWorld(t)
	want := map[string]int{}
	var shas []string
	for range 4 { // GitLab resends 5 a minute for a project and user
		sha, e := w.push(projectHook, down)
		want[e.IdempotencyKey] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	reps := runTwoAtOnce(t, w.sources()[0], w.runner)
	w.asked(projectHook, want)
	if reps[0].Asked+reps[1].Asked != 4 {
		t.Errorf("runs asked %d and %d, want 4 in all", reps[0].Asked, reps[1].Asked)
	}
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// As TestARunThatDiesAfterRecordingItsAsksCostsThemOneRunNotASecondAsk, on a group's hook.
func TestAGitLabRunThatDiesAfterRecordingItsAsksCostsThemOneRunNotASecondAsk(t *testing.T) {
	w := newGitLabWorld(t)
	var shas, keys []string
	for range 3 {
		sha, e := w.push(groupHook, down)
		shas, keys = append(shas, sha), append(keys, e.IdempotencyKey)
	}
	w.clock.Advance(time.Minute)
	src := w.sources()[1]
	w.mode.Store(int32(down))
	dieAfterFirstAsk(t, w.runner(), src)
	w.mode.Store(int32(up))
	asked := w.hooks.Resends(groupHook)
	if len(asked) != 1 {
		t.Fatalf("the dying run had %d events resent, want the one it sent", len(asked))
	}
	first := slices.IndexFunc(keys, func(k string) bool { return asked[k] == 1 })
	rep, err := w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 0 {
		t.Fatalf("run after the crash: %+v %v, want nothing asked", rep, err)
	}
	want := map[string]int{keys[first]: 1}
	w.asked(groupHook, want)
	w.clock.Advance(catchup.DefaultReaskAfter)
	if rep, err = w.runner().Run(context.Background(), src); err != nil || rep.Asked != 3 {
		t.Fatalf("run past ReaskAfter: %+v %v, want 3 asked", rep, err)
	}
	for _, k := range keys {
		want[k]++
	}
	w.asked(groupHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// An event whose resends keep failing (the ingress unreachable: GitLab answers each resend
// 422 with the connection's error) is asked for again at each run until GitLab's 7 days
// have passed since its first attempt, then reported lost once, naming the project the group
// hook's event was about.
func TestGitLabEventsStillFailingWhenTheWindowClosesAreReportedLost(t *testing.T) {
	w := newGitLabWorld(t)
	_, e := w.push(groupHook, unreachable)
	w.mode.Store(int32(unreachable))
	src := w.sources()[1]
	asks, inside := 0, 0
	for w.clock.Now().Sub(e.At) <= gitlab.HookEventRetention {
		w.clock.Advance(6 * time.Hour)
		rep, err := w.runner().Run(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		asks += rep.Asked
		in := w.clock.Now().Sub(e.At) <= gitlab.HookEventRetention
		switch {
		case in && (rep.Lost != 0 || rep.Open != 1 || rep.Asked != 1):
			t.Fatalf("inside the window: %+v, want it asked again and open", rep)
		case !in && (rep.Lost != 1 || rep.Open != 0 || rep.Asked != 0):
			t.Fatalf("past the window: %+v, want the event lost", rep)
		case in:
			inside++
		}
	}
	if got := w.hooks.Resends(groupHook)[e.IdempotencyKey]; got != asks || asks != inside {
		t.Errorf("asked %d times (GitLab resent %d), want once per run inside the window (%d)", asks, got, inside)
	}
	if got := w.gauges.get("catchup_given_up"); got != 1 {
		t.Errorf("catchup_given_up %v, want 1", got)
	}
	line := w.gaveUpLine()
	for _, want := range []string{"delivery=" + e.IdempotencyKey, "event=push_hooks", "repository=acme/app", `hook="route glt: GitLab webhook 9 of group acme"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the log line of the lost event %q lacks %q", line, want)
		}
	}
	w.clock.Advance(time.Hour)
	if rep, _ := w.runner().Run(context.Background(), src); rep.Lost != 0 {
		t.Errorf("a later run: %+v, want nothing lost again", rep)
	}
	w.noViolations()
}

// A run lists back to its cursor (less the overlap) and no further: once a page reaches it,
// the listing, newest first, holds nothing newer. A steady hook costs one listing request a
// run, and one request per failed event asked for.
func TestASteadyRunListsOnePage(t *testing.T) {
	w := newGitLabWorld(t)
	for range 50 {
		w.push(projectHook, up)
		w.clock.Advance(time.Minute)
	}
	src := w.sources()[0]
	cost := func() (catchup.Report, int) {
		t.Helper()
		before := w.hooks.Requests()
		rep, err := w.runner().Run(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		return rep, w.hooks.Requests() - before
	}
	if rep, n := cost(); n != 3 || rep.Listed != 50 {
		t.Fatalf("the first run: %d requests, %+v; want the 50 events in 3 pages of 20", n, rep)
	}
	for range 3 {
		for range 3 {
			w.push(projectHook, up)
			w.clock.Advance(time.Minute)
		}
		w.clock.Advance(2 * time.Minute)
		if rep, n := cost(); n != 1 {
			t.Fatalf("a run 5 minutes after the last: %d requests (%+v), want 1", n, rep)
		}
	}
	w.push(projectHook, down)
	w.push(projectHook, down)
	w.clock.Advance(5 * time.Minute)
	if rep, n := cost(); n != 3 || rep.Asked != 2 {
		t.Fatalf("a run with two failed events: %d requests (%+v), want 1 listing and 2 resends", n, rep)
	}
	w.drain()
	w.noViolations()
}
