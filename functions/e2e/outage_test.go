package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// statusAPI stands in for GitHub's commit status API as its OpenAPI description gives it:
// POST /repos/{owner}/{repo}/statuses/{sha} with {state, target_url, description, context},
// answering 201 and the status, or GitHub's error bodies. Which answer it gives is decided by
// fail on the test's manual clock.
type statusAPI struct {
	clock *ledger.ManualClock
	fail  func(now time.Time, sha string) int // 0: accept

	mu       sync.Mutex
	attempts map[string][]string // sha -> every request body
	accepted map[string][]string // sha -> bodies answered 201
	nextID   int
}

func newStatusAPI(clock *ledger.ManualClock, fail func(time.Time, string) int) *statusAPI {
	return &statusAPI{clock: clock, fail: fail, attempts: map[string][]string{}, accepted: map[string][]string{}}
}

func (a *statusAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	parts := strings.Split(r.URL.Path, "/")
	if r.Method != http.MethodPost || len(parts) != 6 || parts[1] != "repos" || parts[4] != "statuses" {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`)
		return
	}
	sha := parts[5]
	raw, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.attempts[sha] = append(a.attempts[sha], string(raw))
	a.mu.Unlock()
	code := a.fail(a.clock.Now(), sha)
	if r.Header.Get("Authorization") != "Bearer gh-token" {
		code = http.StatusUnauthorized
	}
	var body struct {
		State       string  `json:"state"`
		TargetURL   *string `json:"target_url"`
		Description *string `json:"description"`
		Context     string  `json:"context"`
	}
	if code == 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			code = http.StatusBadRequest
		} else if !map[string]bool{"error": true, "failure": true, "pending": true, "success": true}[body.State] {
			code = http.StatusUnprocessableEntity
		}
	}
	switch code {
	case 0:
	case http.StatusServiceUnavailable:
		w.WriteHeader(code)
		io.WriteString(w, `{"message":"Service Unavailable"}`)
		return
	case http.StatusUnauthorized:
		w.WriteHeader(code)
		io.WriteString(w, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`)
		return
	case http.StatusUnprocessableEntity:
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"message":"No commit found for SHA: %s","documentation_url":"https://docs.github.com/rest/commits/statuses#create-a-commit-status","status":"422"}`, sha)
		return
	default:
		w.WriteHeader(code)
		io.WriteString(w, `{"message":"Problems parsing JSON"}`)
		return
	}
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	a.accepted[sha] = append(a.accepted[sha], string(raw))
	a.mu.Unlock()
	if body.Context == "" {
		body.Context = "default"
	}
	now := a.clock.Now().UTC().Format(time.RFC3339)
	out, _ := json.Marshal(map[string]any{
		"url": "https://api.github.com/repos/acme/app/statuses/" + sha, "avatar_url": "https://github.com/images/error/hubot_happy.gif",
		"id": id, "node_id": fmt.Sprintf("SC_%08d", id), "state": body.State, "description": body.Description,
		"target_url": body.TargetURL, "context": body.Context, "created_at": now, "updated_at": now,
		"creator": map[string]any{"login": "amiss-bot", "id": 1, "type": "Bot"},
	})
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

// outageWorld is the whole path (ingress, queue, runner, the GitHub publisher) against api.
func outageWorld(t *testing.T, fail func(time.Time, string) int) (*world, *statusAPI, *atomic.Int64) {
	t.Helper()
	clock := ledger.NewManualClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	api := newStatusAPI(clock, fail)
	srv := httptest.NewServer(api)
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
	w := &world{dir: filepath.Join(t.TempDir(), "root"), cfg: cfg, clock: clock, srv: srv, q: queue.NewLocalOn(clock)}
	return w, api, &atomic.Int64{}
}

// outageRunner builds the runner as the Lambda and serve do, with the publisher's waits on the
// manual clock and the evaluations counted.
func (w *world) outageRunner(l ledger.Ledger, evaluations *atomic.Int64) *runner.Runner {
	return &runner.Runner{Ledger: l, Owner: "r", Lease: 30 * time.Second, RenewEvery: time.Hour, Now: w.clock.Now,
		PublishBudget: w.cfg.PublishBudget(),
		Routes: func(_ context.Context, name string) (*runner.Route, error) {
			r := w.cfg.Route(name)
			rules, err := evaluate.NewRules(r.Rules)
			if err != nil {
				return nil, err
			}
			gh := publish.NewGitHub(r.Publish.BaseURL, "gh-token", w.srv.Client())
			gh.Sleep = func(ctx context.Context, d time.Duration) error { w.clock.Advance(d); return nil }
			return &runner.Route{Evaluator: counted{rules, evaluations}, Publisher: gh, Context: r.Publish.Context}, nil
		}}
}

type counted struct {
	evaluate.Evaluator
	n *atomic.Int64
}

func (c counted) Evaluate(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
	c.n.Add(1)
	return c.Evaluator.Evaluate(ctx, s)
}

// published checks every delivery got exactly one accepted status, and that every request for
// it (refused ones included) carried the same bytes.
func published(t *testing.T, api *statusAPI, shas []string, want []string) {
	t.Helper()
	api.mu.Lock()
	defer api.mu.Unlock()
	for i, sha := range shas {
		acc := api.accepted[sha]
		if len(acc) != 1 || !strings.Contains(acc[0], want[i]) {
			t.Fatalf("delivery %d: accepted %q, want exactly one holding %q", i, acc, want[i])
		}
		for _, b := range api.attempts[sha] {
			if b != acc[0] {
				t.Fatalf("delivery %d: a request carried other bytes: %q vs %q", i, b, acc[0])
			}
		}
	}
}

func TestProviderOutagesAreRiddenOut(t *testing.T) {
	for _, c := range []struct {
		name string
		code int
		for_ time.Duration
	}{
		{"503 for ten minutes", http.StatusServiceUnavailable, 10 * time.Minute},
		{"401 for an hour", http.StatusUnauthorized, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			var until time.Time
			w, api, evaluations := outageWorld(t, func(now time.Time, sha string) int {
				if now.Before(until) {
					return c.code
				}
				return 0
			})
			until = w.clock.Now().Add(c.for_)
			l := w.open(t)
			defer l.Close()
			var shas []string
			for i, msg := range []string{"Good message", "bad message", "Another good one"} {
				shas = append(shas, w.send(t, l, i, msg))
			}
			start := w.clock.Now()
			w.drain(t, context.Background(), w.outageRunner(l, evaluations))
			published(t, api, shas, []string{`"state":"success"`, `"state":"failure"`, `"state":"success"`})
			st, _ := l.Stats(context.Background())
			if st.ByState[ledger.StateDone] != 3 || evaluations.Load() != 3 {
				t.Fatalf("rows %v, %d evaluations: want 3 done, each evaluated once", st.ByState, evaluations.Load())
			}
			api.mu.Lock()
			attempts := 0
			for _, sha := range shas {
				attempts += len(api.attempts[sha])
			}
			api.mu.Unlock()
			t.Logf("%s: 3 verdicts published once each, the last %v after the outage began (%v after it ended), %d requests",
				c.name, w.clock.Now().Sub(start).Round(time.Second), w.clock.Now().Sub(until).Round(time.Second), attempts)
		})
	}
}

// 422 for a commit the provider does not know abandons at once (retrying the same request can
// never succeed); once the cause is fixed, republish publishes the same bytes, once, without
// evaluating again.
func TestRefusalAbandonsAndRepublishPublishesTheSameBytes(t *testing.T) {
	fixed := false
	w, api, evaluations := outageWorld(t, func(time.Time, string) int {
		if !fixed {
			return http.StatusUnprocessableEntity
		}
		return 0
	})
	l := w.open(t)
	defer l.Close()
	sha := w.send(t, l, 0, "bad message")
	w.drain(t, context.Background(), w.outageRunner(l, evaluations))
	var abandoned []ledger.Row
	operator.List(context.Background(), l, ledger.StateAbandoned, func(r ledger.Row) error { abandoned = append(abandoned, r); return nil }, nil)
	api.mu.Lock()
	tries := len(api.attempts[sha])
	api.mu.Unlock()
	if len(abandoned) != 1 || tries != 1 || !strings.Contains(abandoned[0].Reason, "422") {
		t.Fatalf("abandoned %+v after %d requests: want abandoned at the first 422", abandoned, tries)
	}
	fixed = true // for example: the commit reached the provider's mirror
	w.clock.Advance(24 * time.Hour)
	if _, err := operator.Republish(context.Background(), l, w.q, abandoned[0].Key, abandoned[0].EvaluationID); err != nil {
		t.Fatal(err)
	}
	w.drain(t, context.Background(), w.outageRunner(l, evaluations))
	published(t, api, []string{sha}, []string{`"state":"failure"`})
	if r, _ := l.Inspect(context.Background(), abandoned[0].Key); r.State != ledger.StateDone || evaluations.Load() != 1 {
		t.Fatalf("row %v after %d evaluations: want done, evaluated once", r.State, evaluations.Load())
	}
	// A second republish finds the row done: nothing is posted twice.
	if _, err := operator.Republish(context.Background(), l, w.q, abandoned[0].Key, ""); err == nil {
		t.Fatal("a done row was republished")
	}
}
