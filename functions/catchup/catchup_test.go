package catchup_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/ledger"
)

const (
	hookSecret = "catchup-webhook-secret"
	hookToken  = "hook-admin-token"
	appID      = 4242
)

var (
	appHook  = githubtest.Hook{App: true}
	repoHook = githubtest.Hook{Repo: "acme/app", ID: 7}
)

// world is GitHub (an App's webhook and a repository's, the statuses API) in front of the real
// ingress, queue and runner over a FileLedger, and catch-up over that ledger.
type world struct {
	base
	gh  *githubtest.GitHub
	api *httptest.Server
	app *github.App
}

func newWorld(t *testing.T) *world {
	t.Helper()
	key, pemKey := githubtest.GenerateKey()
	gh := githubtest.NewApp(appID, &key.PublicKey)
	gh.Authorize = githubtest.Token(hookToken)
	gh.DeliveryTimeout = deliveryTimeout
	api := httptest.NewServer(gh)
	t.Cleanup(api.Close)
	w := &world{gh: gh, api: api}
	ingress := newBase(t, &w.base, `
routes:
  gh:
    provider: github
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    rules: {commit_message: '^[A-Z]'}
    publish: {provider: github, base_url: "`+api.URL+`", token: {from: "env:TOKEN"}, context: amiss/verdict}
`, secretsMap{"HOOK": hookSecret}, func(baseURL string) publish.Publisher {
		return publish.NewGitHub(baseURL, hookToken, api.Client())
	})
	gh.Now = w.clock.Now
	app, err := github.NewApp(github.AppConfig{BaseURL: api.URL, AppID: fmt.Sprint(appID), PrivateKey: pemKey, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.app = app
	gh.AddHook(appHook, ingress+"/hooks/gh", hookSecret)
	gh.AddHook(repoHook, ingress+"/hooks/gh", hookSecret)
	return w
}

// push delivers a push of a new commit of acme/app through hook while the ingress is in
// mode, and returns the commit and the attempt.
func (w *world) push(hook githubtest.Hook, mode ingressMode) (string, githubtest.HookDelivery) {
	return w.pushFrom(hook, mode, "acme/app")
}

// pushFrom is push of a commit of repo.
func (w *world) pushFrom(hook githubtest.Hook, mode ingressMode, repo string) (string, githubtest.HookDelivery) {
	w.mode.Store(int32(mode))
	defer w.mode.Store(int32(up))
	if mode == hung {
		w.gh.SetDeliveryTimeout(hungTimeout)
		defer w.gh.SetDeliveryTimeout(deliveryTimeout)
	}
	w.n++
	sha := fmt.Sprintf("%040x", w.n)
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"id":99,"full_name":%q},"installation":{"id":5},`+
		`"commits":[{"id":%q,"message":"Change %d"}]}`, sha, repo, sha, w.n)
	d := w.gh.Deliver(hook, githubtest.Event{Name: "push", Installation: 5, RepositoryID: 99, Body: []byte(body)})
	return sha, d
}

func (w *world) sources() []catchup.Source {
	return []catchup.Source{
		&catchup.GitHub{Route: "gh", Hook: github.Hook{App: true}, Client: github.NewAppClient(w.app)},
		&catchup.GitHub{Route: "gh", Hook: github.Hook{Repo: "acme/app", ID: 7}, Client: github.NewTokenClient(w.api.URL, hookToken, nil)},
	}
}

func (w *world) catchUp(r *catchup.Runner) []catchup.Report {
	w.t.Helper()
	return w.runAll(r, w.sources())
}

// verdicts checks that each commit has exactly one status posted.
func (w *world) verdicts(shas ...string) {
	w.t.Helper()
	for _, sha := range shas {
		if got := w.gh.Created("acme/app", sha); len(got) != 1 {
			w.t.Errorf("commit %s has %d statuses, want one verdict", sha[30:], len(got))
		}
	}
}

// asked checks the redeliveries GitHub accepted per delivery of hook.
func (w *world) asked(hook githubtest.Hook, want map[string]int) {
	w.t.Helper()
	checkAsked(w.t, hook, w.gh.RedeliveriesAsked(hook), want)
}

func (w *world) noViolations() {
	w.t.Helper()
	if v := w.gh.Violations(); len(v) > 0 {
		w.t.Errorf("requests GitHub would refuse: %q", v)
	}
}

func TestDeliveriesFailedWhileTheIngressWasDownAreRedeliveredOnceEach(t *testing.T) {
	w := newWorld(t)
	okSHA, ok := w.push(appHook, up)
	w.drain()
	b, bd := w.push(appHook, down)
	c, cd := w.push(repoHook, down)
	d, dd := w.push(appHook, hung)
	e, ed := w.push(repoHook, admitThenFail) // the ledger has it although GitHub saw it fail
	for _, a := range []githubtest.HookDelivery{bd, cd, dd, ed} {
		if a.StatusCode/100 == 2 {
			t.Fatalf("delivery %s while the ingress was down answered %d", a.GUID, a.StatusCode)
		}
	}
	if dd.StatusCode != 0 || dd.Status != "timed out" {
		t.Fatalf("the hung ingress gave %d %q, want a timeout", dd.StatusCode, dd.Status)
	}
	w.clock.Advance(time.Minute)

	reps := w.catchUp(w.runner())
	w.asked(appHook, map[string]int{bd.GUID: 1, dd.GUID: 1})
	w.asked(repoHook, map[string]int{cd.GUID: 1, ed.GUID: 1})
	if reps[0].Found != 2 || reps[0].Asked != 2 || reps[1].Found != 2 || reps[1].Asked != 2 {
		t.Errorf("reports %+v, want two found and asked per hook", reps)
	}
	w.drain()
	w.verdicts(okSHA, b, c, d, e)
	if ok.StatusCode != http.StatusAccepted {
		t.Errorf("the delivery made while the ingress was up answered %d", ok.StatusCode)
	}

	// The next run sees every redelivery succeed and asks for nothing.
	w.clock.Advance(catchup.DefaultReaskAfter + time.Minute)
	reps = w.catchUp(w.runner())
	for _, rep := range reps {
		if rep.Asked != 0 || rep.Open != 0 || rep.Resolved != 2 || rep.Lost != 0 {
			t.Errorf("second run: %+v, want two resolved and nothing asked or open", rep)
		}
	}
	w.asked(appHook, map[string]int{bd.GUID: 1, dd.GUID: 1})
	w.asked(repoHook, map[string]int{cd.GUID: 1, ed.GUID: 1})
	if got := w.gauges.get("catchup_redelivered"); got != 4 {
		t.Errorf("catchup_redelivered %v, want 4", got)
	}
	w.noViolations()
}

// Two runs at once, on two handles of one root, each deciding what to ask from the same
// cursor before either records its asks: every failed delivery is asked for once in all.
func TestTwoRunsAtOnceAskForEachDeliveryOnce(t *testing.T) {
	w := newWorld(t)
	want := map[string]int{}
	var shas []string
	for range 5 {
		sha, d := w.push(appHook, down)
		want[d.GUID] = 1
		shas = append(shas, sha)
	}
	w.clock.Advance(time.Minute)
	reps := runTwoAtOnce(t, w.sources()[0], w.runner)
	w.asked(appHook, want)
	if reps[0].Asked+reps[1].Asked != 5 {
		t.Errorf("runs asked %d and %d, want 5 in all", reps[0].Asked, reps[1].Asked)
	}
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// runTwoAtOnce runs two catch-up runs of src at once (runners made by runner, on its state
// store), each listing before either goes on, and each holding its first write of asks until
// the other is about to write its own: both decided what to ask from a cursor without the
// other's asks. It returns their reports.
func runTwoAtOnce(t *testing.T, src catchup.Source, runner func() *catchup.Runner) []catchup.Report {
	t.Helper()
	var listed, asking sync.WaitGroup
	listed.Add(2)
	asking.Add(2)
	var wg sync.WaitGroup
	reps := make([]catchup.Report, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runner()
			r.RunID = fmt.Sprintf("run-%d", i)
			r.State = &rendezvous{StateStore: r.State, t: t, run: r.RunID, asking: &asking}
			rep, err := r.Run(context.Background(), &barrier{Source: src, listed: &listed})
			if err != nil {
				t.Errorf("run %d: %v", i, err)
			}
			reps[i] = rep
		}()
	}
	wg.Wait()
	return reps
}

// barrier holds a run after its listing until the other run has listed too.
type barrier struct {
	catchup.Source
	listed *sync.WaitGroup
}

func (b *barrier) Attempts(ctx context.Context, maxPages int, visit func([]catchup.Attempt) (bool, error)) error {
	err := b.Source.Attempts(ctx, maxPages, visit)
	b.listed.Done()
	b.listed.Wait()
	return err
}

// rendezvous holds its run's first cursor write that records asks of the run until the other
// run's has come too (or 30 s have passed: the test then fails).
type rendezvous struct {
	ledger.StateStore
	t      *testing.T
	run    string
	asking *sync.WaitGroup
	once   sync.Once
}

func (r *rendezvous) WriteState(ctx context.Context, name string, data []byte, version string) (string, error) {
	if bytes.Contains(data, []byte(`"asked_run":"`+r.run+`"`)) {
		r.once.Do(func() {
			r.asking.Done()
			both := make(chan struct{})
			go func() { r.asking.Wait(); close(both) }()
			select {
			case <-both:
			case <-time.After(30 * time.Second):
				r.t.Errorf("%s: the other run never came to record its asks", r.run)
			}
		})
	}
	return r.StateStore.WriteState(ctx, name, data, version)
}

// dying ends its run's goroutine right after its first request for a redelivery was sent:
// the run recorded its asks, sent one, and died.
type dying struct{ catchup.Source }

func (d dying) Redeliver(ctx context.Context, a catchup.Attempt) error {
	d.Source.Redeliver(ctx, a)
	runtime.Goexit()
	return nil
}

// A run that records its asks, sends one (whose redelivery fails too: the ingress is still
// down) and dies costs the deliveries one ReaskAfter: a run right after it asks for none of
// them, not even the one already asked for; a run once the asks are ReaskAfter old asks for
// each once.
func TestARunThatDiesAfterRecordingItsAsksCostsThemOneRunNotASecondAsk(t *testing.T) {
	w := newWorld(t)
	var shas, guids []string
	for range 3 {
		sha, d := w.push(appHook, down)
		shas, guids = append(shas, sha), append(guids, d.GUID)
	}
	w.clock.Advance(time.Minute)
	src := w.sources()[0]
	w.mode.Store(int32(down))
	dieAfterFirstAsk(t, w.runner(), src)
	w.mode.Store(int32(up))
	asked := w.gh.RedeliveriesAsked(appHook)
	if len(asked) != 1 {
		t.Fatalf("the dying run had %d deliveries redelivered, want the one it sent", len(asked))
	}
	first := slices.IndexFunc(guids, func(g string) bool { return asked[g] == 1 })

	// A run right after the crash asks for nothing: the dead run's asks may still be in flight.
	rep, err := w.runner().Run(context.Background(), src)
	if err != nil || rep.Asked != 0 {
		t.Fatalf("run after the crash: %+v %v, want nothing asked", rep, err)
	}
	want := map[string]int{guids[first]: 1}
	w.asked(appHook, want)
	// Once the asks are ReaskAfter old, a run asks for each delivery still failing once.
	w.clock.Advance(catchup.DefaultReaskAfter)
	if rep, err = w.runner().Run(context.Background(), src); err != nil || rep.Asked != 3 {
		t.Fatalf("run past ReaskAfter: %+v %v, want 3 asked", rep, err)
	}
	for _, g := range guids {
		want[g]++
	}
	w.asked(appHook, want)
	w.drain()
	w.verdicts(shas...)
	w.noViolations()
}

// dieAfterFirstAsk runs r over src until its goroutine dies right after its first request for
// a redelivery.
func dieAfterFirstAsk(t *testing.T, r *catchup.Runner, src catchup.Source) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(context.Background(), dying{src})
		t.Error("the dying run finished")
	}()
	<-done
}

func TestDeliveriesStillFailingWhenTheWindowClosesAreReportedLost(t *testing.T) {
	w := newWorld(t)
	_, d := w.push(repoHook, down)
	w.mode.Store(int32(down)) // the ingress stays down: every redelivery fails too
	src := w.sources()[1]
	asks, inside := 0, 0
	for w.clock.Now().Sub(d.DeliveredAt) <= github.RedeliveryWindow {
		w.clock.Advance(6 * time.Hour)
		rep, err := w.runner().Run(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		asks += rep.Asked
		if w.clock.Now().Sub(d.DeliveredAt) <= github.RedeliveryWindow {
			inside++
		}
		if w.clock.Now().Sub(d.DeliveredAt) <= github.RedeliveryWindow && (rep.Lost != 0 || rep.Open != 1) {
			t.Fatalf("inside the window: %+v", rep)
		}
		if w.clock.Now().Sub(d.DeliveredAt) > github.RedeliveryWindow && (rep.Lost != 1 || rep.Open != 0 || rep.Asked != 0) {
			t.Fatalf("past the window: %+v, want the delivery lost", rep)
		}
	}
	if got := w.gh.RedeliveriesAsked(repoHook)[d.GUID]; got != asks || asks != inside {
		t.Errorf("asked %d times (GitHub counted %d), want once per run inside the window (%d)", asks, got, inside)
	}
	if got := w.gauges.get("catchup_given_up"); got != 1 {
		t.Errorf("catchup_given_up %v, want 1", got)
	}
	line := w.gaveUpLine()
	for _, want := range []string{"delivery=" + d.GUID, "event=push", "repository=acme/app", "hook=\"route gh: GitHub webhook 7 of acme/app\""} {
		if !strings.Contains(line, want) {
			t.Errorf("the log line of the lost delivery %q lacks %q", line, want)
		}
	}
	// A later run reports it no more.
	w.clock.Advance(time.Hour)
	if rep, _ := w.runner().Run(context.Background(), src); rep.Lost != 0 {
		t.Errorf("a later run: %+v, want nothing lost again", rep)
	}
	w.noViolations()
}
