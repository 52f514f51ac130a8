package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// What stands on the commit. A pull request is opened with a title that breaks the route's
// rule, then edited to one that follows it: two deliveries, one head commit, one status
// context. Whatever the order they arrive in, whatever fails or dies, the status left standing
// at the provider must be the edit's verdict, and every delivery must end published,
// superseded or abandoned (revivable). The provider is a fake of GitHub's status API that
// checks every request against GitHub's API description.

const (
	headSHA    = "8f9e0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b"
	badTitle   = "add stuff"
	goodTitle  = "feat: add the thing"
	statusCtx  = "amiss/title"
	ghToken    = "gh-token"
	commitRepo = "acme/app"
)

// commitWorld is a FileLedger on a manual clock, a fake GitHub, and routes posting to it.
type commitWorld struct {
	t      *testing.T
	root   string
	l      ledger.Ledger
	clock  *ledger.ManualClock
	gh     *githubtest.GitHub
	srv    *httptest.Server
	client *http.Client
}

func newCommitWorld(t *testing.T, gh *githubtest.GitHub) *commitWorld {
	t.Helper()
	w := &commitWorld{t: t, root: filepath.Join(t.TempDir(), "root"), clock: ledger.NewManualClock(epoch), gh: gh}
	w.l = w.open()
	w.srv = httptest.NewServer(gh)
	t.Cleanup(w.srv.Close)
	w.client = w.srv.Client()
	w.client.Timeout = 5 * time.Second
	return w
}

func (w *commitWorld) open() ledger.Ledger {
	w.t.Helper()
	l, err := localfs.Open(context.Background(), w.root, localfs.Config{Limits: ledger.DefaultLimits(), Clock: w.clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { l.Close() })
	return l
}

// titleRule is the route's evaluator: a pull request title must start with "feat:".
var titleRule = evalFunc(func(_ context.Context, s change.Change) (evaluate.Verdict, error) {
	if s.Pull != nil && strings.HasPrefix(s.Pull.Title, "feat:") {
		return evaluate.Verdict{State: "success", Description: "title follows the rule"}, nil
	}
	return evaluate.Verdict{State: "failure", Description: "failed: pull request title"}, nil
})

// runner is a runner over l (the world's ledger unless given) posting to the fake GitHub.
func (w *commitWorld) runner(owner string, l ledger.Ledger, timeout time.Duration) *runner.Runner {
	if l == nil {
		l = w.l
	}
	hc := *w.client
	hc.Timeout = timeout
	pub := publish.NewGitHub(w.srv.URL, ghToken, &hc)
	pub.Sleep = func(context.Context, time.Duration) error { return nil }
	return &runner.Runner{Ledger: l, Owner: owner, Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond,
		RetryDelay: time.Second, Now: w.clock.Now,
		Routes: func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: titleRule, Publisher: pub, Context: statusCtx, Destination: "github " + w.srv.URL,
				Timeout: timeout, Settle: time.Minute}, nil
		}}
}

// pullRequest admits a pull request event with title, GitHub having signed the event at
// updatedAt (pull_request.updated_at), and returns its queue message.
func (w *commitWorld) pullRequest(title string, updatedAt time.Time) queue.Message {
	w.t.Helper()
	s, _ := json.Marshal(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: title, TargetBranch: "main"}, Whole: change.TitleInput | change.PullInput})
	body := []byte(fmt.Sprintf(`{"action":%q,"title":%q}`, title, title))
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
		BodyDigest: ledger.SumBody(body)}, Change: s, BodyAt: updatedAt}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit %q: %+v %v", title, a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

// process runs m through r until it is done, moving the clock to each retry time.
func (w *commitWorld) process(r *runner.Runner, m queue.Message) {
	w.t.Helper()
	for i := 0; ; i++ {
		if i > 20 {
			w.t.Fatalf("delivery %s not done after 20 attempts", m.Key.Short())
		}
		res, err := r.Process(context.Background(), m)
		if err != nil {
			w.t.Logf("process %s: %v", m.Key.Short(), err)
		}
		if res.Done {
			return
		}
		if res.RetryAt.After(w.clock.Now()) {
			w.clock.Set(res.RetryAt)
		}
	}
}

// standing checks what a user sees on the commit: the status left standing, and how many
// statuses were created for the context in all.
func (w *commitWorld) standing(wantState string, wantCreated int) {
	w.t.Helper()
	if v := w.gh.Violations(); len(v) > 0 {
		w.t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	got, ok := w.gh.Latest(commitRepo, headSHA, statusCtx)
	if !ok || got.State != wantState {
		w.t.Fatalf("the commit shows %q (%q), want %q; statuses created: %+v", got.State, got.Description, wantState,
			w.gh.Created(commitRepo, headSHA))
	}
	if n := len(w.gh.Created(commitRepo, headSHA)); n != wantCreated {
		w.t.Fatalf("%d statuses created for the context, want %d: %+v", n, wantCreated, w.gh.Created(commitRepo, headSHA))
	}
}

// admitPushes admits n pushes to repo, each on a commit of its own, and sends their messages
// to q when it is not nil.
func (w *commitWorld) admitPushes(q *queue.Local, repo string, n int) []queue.Message {
	w.t.Helper()
	var out []queue.Message
	for i := range n {
		s, _ := json.Marshal(change.Change{Provider: "github", Repository: repo, SHA: fmt.Sprintf("%040x", i+1), Event: change.Push})
		body := []byte(repo + fmt.Sprint(i))
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: string(body),
			BodyDigest: ledger.SumBody(body)}, Change: s}
		if _, err := w.l.Admit(context.Background(), d); err != nil {
			w.t.Fatal(err)
		}
		m := queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
		if q != nil {
			q.Send(context.Background(), m)
		}
		out = append(out, m)
	}
	return out
}

func (w *commitWorld) row(m queue.Message) ledger.Row {
	w.t.Helper()
	r, err := w.l.Inspect(context.Background(), m.Key)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// wantSuperseded checks that the older delivery ended superseded by the newer one.
func (w *commitWorld) wantSuperseded(older, newer queue.Message) {
	w.t.Helper()
	if r := w.row(older); r.State != ledger.StateSuperseded || r.SupersededBy != newer.Key {
		w.t.Fatalf("older delivery: %v superseded by %s, want superseded by %s", r.State, r.SupersededBy.Short(), newer.Key.Short())
	}
	if r := w.row(newer); r.State != ledger.StateDone {
		w.t.Fatalf("newer delivery: %v, want done", r.State)
	}
}

// Delivered in order; the older verdict's POSTs are answered 503 until the newer one is
// created. Retried after the newer stands, the older is superseded, never posted.
func TestAnOlderVerdictRefusedUntilTheNewerStandsIsNeverPostedAfterIt(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	var mu sync.Mutex
	newerCreated := false
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		if s.State == "success" {
			newerCreated = true
		} else if !newerCreated {
			return githubtest.Behavior{Code: http.StatusServiceUnavailable}
		}
		return githubtest.Behavior{}
	}
	w := newCommitWorld(t, gh)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	r := w.runner("a", nil, 5*time.Second)
	if res, _ := r.Process(context.Background(), opened); res.Done {
		t.Fatal("the older verdict was done although every post of it was refused")
	}
	w.process(r, edited)
	w.clock.Advance(time.Hour)
	w.process(r, opened)
	w.standing("success", 1)
	w.wantSuperseded(opened, edited)
}

// Delivered newest first, no fault at all: the older verdict is superseded.
func TestAnOlderVerdictDeliveredLastIsSuperseded(t *testing.T) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	r := w.runner("a", nil, 5*time.Second)
	w.process(r, edited)
	w.process(r, opened)
	w.standing("success", 1)
	w.wantSuperseded(opened, edited)
	st, err := w.l.Stats(context.Background())
	if err != nil || st.ByState[ledger.StateSuperseded] != 1 || st.Subjects != 1 {
		t.Fatalf("stats: %+v %v", st, err)
	}
}

// killable is a ledger handle of a process that can be killed: after kill, nothing it asks
// reaches the ledger any more.
type killable struct {
	ledger.Ledger
	mu     sync.Mutex
	killed bool
}

var errKilled = errors.New("the process was killed")

func (k *killable) kill() { k.mu.Lock(); k.killed = true; k.mu.Unlock() }
func (k *killable) dead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killed
}
func (k *killable) ReportSubject(ctx context.Context, g ledger.SubjectGrant, o ledger.PostOutcome) (ledger.SubjectGrant, error) {
	if k.dead() {
		return ledger.SubjectGrant{}, errKilled
	}
	return k.Ledger.ReportSubject(ctx, g, o)
}
func (k *killable) Complete(ctx context.Context, s ledger.Staged) error {
	if k.dead() {
		return errKilled
	}
	return k.Ledger.Complete(ctx, s)
}
func (k *killable) Release(ctx context.Context, l ledger.Lease, nb time.Time) error {
	if k.dead() {
		return errKilled
	}
	return k.Ledger.Release(ctx, l, nb)
}
func (k *killable) Unclaim(ctx context.Context, l ledger.Lease, nb time.Time) error {
	if k.dead() {
		return errKilled
	}
	return k.Ledger.Unclaim(ctx, l, nb)
}
func (k *killable) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	if k.dead() {
		return ledger.Lease{}, errKilled
	}
	return k.Ledger.Renew(ctx, l, d)
}

// The older verdict's POST is in flight when its runner is killed; GitHub applies it late,
// after the newer verdict was posted by the runner that came next. The newer one, posted while
// the killed post could still land, is read back once that is over, found covered, and posted
// again: it stands, with no other status after it.
func TestAnOlderPostInFlightWhenItsRunnerDiesIsOverwrittenByTheNewest(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	entered, release := holdFailures(t, gh) // a failure below must not leave the held request (and the server) waiting
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	dying := &killable{Ledger: w.l}
	a := w.runner("a", dying, 5*time.Second)
	done := make(chan struct{})
	go func() { a.Process(context.Background(), opened); close(done) }()
	<-entered
	dying.kill() // kill -9: nothing more of runner a reaches the ledger

	// The next runner: the newer verdict waits out the dead runner's grant, then posts.
	b := w.runner("b", nil, 5*time.Second)
	res, err := b.Process(context.Background(), edited)
	if err != nil || res.Done {
		t.Fatalf("the newer verdict posted while the dead runner's grant lasted: %+v %v", res, err)
	}
	w.clock.Set(res.RetryAt)
	res, _ = b.Process(context.Background(), edited)
	if res.Done {
		t.Fatal("the newer verdict was called standing while the dead runner's post could still land over it")
	}
	if got, _ := gh.Latest(commitRepo, headSHA, statusCtx); got.State != "success" {
		t.Fatalf("the newer verdict was not posted once the grant was over: %+v", got)
	}
	release() // the dead runner's post lands now, over the newer one
	<-done
	if got, _ := gh.Latest(commitRepo, headSHA, statusCtx); got.State != "failure" {
		t.Fatalf("the scenario needs the late post to land last: %+v", got)
	}
	w.process(b, edited) // comes back once the late post has settled: reads back, posts again
	w.process(b, opened) // the older delivery, re-driven after the restart
	w.standing("success", 3)
	w.wantSuperseded(opened, edited)
}

// A status API that answers every POST after longer than the route's timeout, though it
// applies the status at once: the runner reads back before posting again, and each verdict
// creates one status.
func TestASlowStatusAPICreatesOneStatusPerVerdict(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	gh.Post = func(int, githubtest.Created) githubtest.Behavior {
		return githubtest.Behavior{Delay: 400 * time.Millisecond, ApplyFirst: true}
	}
	w := newCommitWorld(t, gh)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	r := w.runner("a", nil, 100*time.Millisecond)
	w.process(r, opened)
	w.process(r, edited)
	w.standing("success", 2)
	if gh.Posts() != 2 {
		t.Fatalf("%d POSTs for two verdicts", gh.Posts())
	}
	if r := w.row(opened); r.State != ledger.StateDone {
		t.Fatalf("the older verdict, posted before the newer existed: %v", r.State)
	}
}

// A provider that holds one repository's POSTs does not hold the workers other deliveries need:
// with two requests allowed in flight to the API (at most one for one repository), amiss serve's
// four workers publish every delivery of another repository while the slow repository's
// requests are still held, and no more of those than allowed are ever in flight at once.
func TestASlowRepositoryDoesNotHoldTheWorkersOtherDeliveriesNeed(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	slowPosts := holdRepository(t, gh, "acme/slow")
	w := newCommitWorld(t, gh)
	q := queue.NewLocalOn(w.clock)
	slow := w.admitPushes(q, "acme/slow", 6)
	fast := w.admitPushes(q, "acme/fast", 4)
	r := w.runner("a", nil, 10*time.Second)
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Concurrency = 2
		}
		return rt, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the ledger's clock keeps time, as a server's does
		for tick := time.NewTicker(10 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			w.clock.Advance(10 * time.Millisecond)
		}
	}()
	stopped := make(chan struct{})
	go func() { (&runner.Local{Runner: r, Queue: q}).Run(ctx, 4); close(stopped) }()
	done := func(ms []queue.Message) int {
		n := 0
		for _, m := range ms {
			if w.row(m).State == ledger.StateDone {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); done(fast) < len(fast); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries of another repository published while the slow one's requests are held", done(fast), len(fast))
		}
	}
	if held := slowPosts.Held(); held != 1 || done(slow) != 0 {
		t.Fatalf("the slow repository has %d requests in flight and %d deliveries done, want 1 held and none done", held, done(slow))
	}
	slowPosts.Release()
	for deadline := time.Now().Add(30 * time.Second); done(slow) < len(slow); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slow deliveries published once the provider answered", done(slow), len(slow))
		}
	}
	cancel()
	q.Close()
	<-stopped
	if most := slowPosts.Most(); most != 1 {
		t.Fatalf("%d requests for one repository were in flight at once, the route allows 1", most)
	}
	if n := gh.Posts(); n != len(slow)+len(fast) {
		t.Fatalf("%d POSTs for %d verdicts", n, len(slow)+len(fast))
	}
}

// heldRepository holds the POSTs to one repository until released, counting those in flight.
type heldRepository struct {
	mu             sync.Mutex
	inFlight, most int
	shas           map[string]bool // the commits of the POSTs held so far
	release        chan struct{}
	letGo          sync.Once
}

// holdRepository makes gh hold every POST to repo until Release (at the latest when t ends).
func holdRepository(t *testing.T, gh *githubtest.GitHub, repo string) *heldRepository {
	h := &heldRepository{release: make(chan struct{}), shas: map[string]bool{}}
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		if s.Repository != repo {
			return githubtest.Behavior{}
		}
		h.mu.Lock()
		h.inFlight++
		h.most = max(h.most, h.inFlight)
		h.shas[s.SHA] = true
		h.mu.Unlock()
		<-h.release
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
		return githubtest.Behavior{}
	}
	t.Cleanup(h.Release)
	return h
}

// Release lets every held POST, and every later one, be answered.
func (h *heldRepository) Release() { h.letGo.Do(func() { close(h.release) }) }

// Held and Most are the POSTs in flight now, and the most ever at once.
func (h *heldRepository) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight
}

// HeldSHA reports whether a POST for the commit sha was held.
func (h *heldRepository) HeldSHA(sha string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shas[sha]
}

func (h *heldRepository) Most() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}
