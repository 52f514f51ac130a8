// Package e2e runs the whole delivery path in one process on a FileLedger: a signed webhook
// into the ingress, the in-process queue, the runner, and a fake provider.
package e2e_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

const hookSecret = "e2e-webhook-secret"

// fakeGitHub records commit statuses by sha.
type fakeGitHub struct {
	mu       sync.Mutex
	statuses map[string][]string // sha -> "state: description"
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/repos/acme/") || r.Header.Get("Authorization") != "Bearer gh-token" {
		http.Error(w, "unexpected", http.StatusBadRequest)
		return
	}
	var body map[string]string
	json.NewDecoder(r.Body).Decode(&body)
	sha := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	f.mu.Lock()
	f.statuses[sha] = append(f.statuses[sha], body["state"]+": "+body["description"])
	f.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

type secretsMap map[string]string

func (s secretsMap) Get(ctx context.Context, ref string) (string, error) {
	if v, ok := s[strings.TrimPrefix(ref, "env:")]; ok {
		return v, nil
	}
	return "", fmt.Errorf("no secret %s", ref)
}

type world struct {
	dir   string
	cfg   *config.Config
	clock *ledger.ManualClock
	gh    *fakeGitHub
	srv   *httptest.Server
	q     *queue.Local
}

func newWorld(t *testing.T) *world {
	t.Helper()
	gh := &fakeGitHub{statuses: map[string][]string{}}
	srv := httptest.NewServer(gh)
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`
routes:
  gh:
    provider: github
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    rules: {commit_message: '^[A-Z]'}
    publish: {provider: github, base_url: "` + srv.URL + `", token: {from: "env:TOKEN"}, context: amiss/verdict}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := ledger.NewManualClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	return &world{dir: filepath.Join(t.TempDir(), "root"), cfg: cfg, clock: clock, gh: gh, srv: srv, q: queue.NewLocalOn(clock)}
}

func (w *world) open(t *testing.T) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), w.dir, localfs.Config{Limits: w.cfg.Limits(), Clock: w.clock, Create: true,
		StrandedAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (w *world) send(t *testing.T, l ledger.Ledger, i int, message string) string {
	t.Helper()
	sha := fmt.Sprintf("%040x", i+1)
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/app"},"commits":[{"id":%q,"message":%q}]}`,
		sha, sha, message)
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write([]byte(body))
	req := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"route": "gh"}, Body: body,
		Headers: map[string]string{"x-github-event": "push", "x-hub-signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil))}}
	req.RequestContext.HTTP.Method = "POST"
	h := &ingress.Handler{Config: w.cfg, Ledger: l, Queue: w.q, Secrets: secretsMap{"HOOK": hookSecret}}
	resp, err := h.Handle(context.Background(), req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingress: %d %s %v", resp.StatusCode, resp.Body, err)
	}
	return sha
}

func (w *world) runner(l ledger.Ledger, owner string) *runner.Runner {
	return &runner.Runner{Ledger: l, Owner: owner, Lease: 30 * time.Second, RenewEvery: time.Hour, RetryDelay: time.Second, Now: w.clock.Now,
		Routes: func(_ context.Context, name string) (*runner.Route, error) {
			r := w.cfg.Route(name)
			ev, err := evaluate.NewRules(r.Rules)
			if err != nil {
				return nil, err
			}
			return &runner.Route{Evaluator: ev, Publisher: publish.NewGitHub(r.Publish.BaseURL, "gh-token", w.srv.Client()),
				Context: r.Publish.Context}, nil
		}}
}

// step runs r over the next ready message, as amiss serve's workers do (runner.Local): a
// message that must come back is queued again for its RetryAt, and the clock, which the queue
// shares, is advanced to it, so every queued message is ready.
func (w *world) step(ctx context.Context, r *runner.Runner) (runner.Result, error) {
	res, err := (&runner.Local{Runner: r, Queue: w.q}).Next(ctx)
	if err == nil && !res.Done && res.RetryAt.After(w.clock.Now()) {
		w.clock.Set(res.RetryAt)
	}
	return res, err
}

// drain runs r over every message until none is left.
func (w *world) drain(t *testing.T, ctx context.Context, r *runner.Runner) {
	t.Helper()
	for i := 0; w.q.Len() > 0; i++ {
		if i > 200 {
			t.Fatal("queue never drained")
		}
		if _, err := w.step(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOneVerdictPerDelivery(t *testing.T) {
	w := newWorld(t)
	l := w.open(t)
	defer l.Close()
	var shas []string
	for i, msg := range []string{"Good message", "bad message", "Another good one"} {
		shas = append(shas, w.send(t, l, i, msg))
	}
	w.drain(t, context.Background(), w.runner(l, "r1"))
	want := []string{"success: all rules hold", "failure: failed: commit message of", "success: all rules hold"}
	for i, sha := range shas {
		got := w.gh.statuses[sha]
		if len(got) != 1 || !strings.HasPrefix(got[0], want[i]) {
			t.Fatalf("delivery %d: statuses %q, want one %q", i, got, want[i])
		}
	}
}

// stopping is a ledger handle whose process dies after a number of row operations: the
// runner's context is cancelled, and every later operation fails.
type stopping struct {
	ledger.Ledger
	left   atomic.Int64
	cancel context.CancelFunc
}

func (s *stopping) step() error {
	if s.left.Add(-1) < 0 {
		s.cancel()
		return context.Canceled
	}
	return nil
}

func (s *stopping) Claim(ctx context.Context, k ledger.Key, b ledger.Digest, o string, d time.Duration) (ledger.Claim, error) {
	if err := s.step(); err != nil {
		return ledger.Claim{}, err
	}
	return s.Ledger.Claim(ctx, k, b, o, d)
}

func (s *stopping) Save(ctx context.Context, l ledger.Lease, r []byte) (ledger.Staged, error) {
	if err := s.step(); err != nil {
		return ledger.Staged{}, err
	}
	return s.Ledger.Save(ctx, l, r)
}

func (s *stopping) Complete(ctx context.Context, st ledger.Staged) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.Ledger.Complete(ctx, st)
}

func (s *stopping) Release(ctx context.Context, l ledger.Lease, nb time.Time) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.Ledger.Release(ctx, l, nb)
}

func (s *stopping) Unclaim(ctx context.Context, l ledger.Lease, nb time.Time) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.Ledger.Unclaim(ctx, l, nb)
}

func (s *stopping) Abandon(ctx context.Context, st ledger.Staged, reason string) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.Ledger.Abandon(ctx, st, reason)
}

// TestRunnerStoppedAtEveryStep stops the runner after each number of ledger operations (its
// unacknowledged messages are lost with it), rebuilds it over the same root, lets cleanup
// re-drive what was stranded, and checks every delivery got exactly one distinct verdict.
func TestRunnerStoppedAtEveryStep(t *testing.T) {
	stops := 0
	for n := 0; ; n++ {
		if n > 40 {
			t.Fatal("the runner never finished without being stopped")
		}
		w := newWorld(t)
		l := w.open(t)
		var shas []string
		for i, msg := range []string{"Good message", "bad message"} {
			shas = append(shas, w.send(t, l, i, msg))
		}
		ctx, cancel := context.WithCancel(context.Background())
		dying := &stopping{Ledger: l, cancel: cancel}
		dying.left.Store(int64(n))
		r1 := w.runner(dying, "doomed")
		for w.q.Len() > 0 && ctx.Err() == nil {
			w.step(ctx, r1)
		}
		stopped := ctx.Err() != nil
		cancel()
		l.Close()
		// The rebuilt runner: a new handle on the same root; leases of the dead one end.
		l2 := w.open(t)
		w.clock.Advance(2 * time.Minute)
		for w.q.Len() > 0 {
			w.q.Receive(context.Background()) // what the dead runner held is lost with it
		}
		ch := &cleanup.Handler{Ledger: l2, Queue: w.q}
		if _, err := ch.Handle(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.drain(t, context.Background(), w.runner(l2, "rebuilt"))
		for i, sha := range shas {
			got := w.gh.statuses[sha]
			if len(got) == 0 {
				t.Fatalf("stop after %d: delivery %d lost: no status", n, i)
			}
			for _, s := range got[1:] {
				if s != got[0] {
					t.Fatalf("stop after %d: delivery %d got two verdicts: %q", n, i, got)
				}
			}
		}
		st, _ := l2.Stats(context.Background())
		if st.ByState[ledger.StateDone] != 2 {
			t.Fatalf("stop after %d: rows %+v, want 2 done", n, st.ByState)
		}
		l2.Close()
		if !stopped {
			break
		}
		stops++
	}
	if stops == 0 {
		t.Fatal("no stop exercised")
	}
	t.Logf("runner stopped at %d different steps", stops)
}
