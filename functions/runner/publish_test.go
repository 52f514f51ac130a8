package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

func TestPublishFailures(t *testing.T) {
	t.Run("permanent refusal abandons", func(t *testing.T) {
		w := newWorld(t)
		w.pub.fail = []error{fmt.Errorf("%w: 404", publish.ErrPermanent)}
		res, err := w.runner("a", verdict("success", "ok")).Process(context.Background(), w.msg)
		if err != nil || !res.Done || w.state(t) != ledger.StateAbandoned {
			t.Fatalf("%+v %v, row %v", res, err, w.state(t))
		}
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		if row.Reason == "" {
			t.Fatal("no reason kept")
		}
	})
	t.Run("transient failures then success publish the frozen verdict", func(t *testing.T) {
		w := newWorld(t)
		w.pub.fail = []error{errors.New("503"), errors.New("503")}
		r := w.runner("a", verdict("success", "first evaluation"))
		res, _ := r.Process(context.Background(), w.msg)
		for i := 0; !res.Done && i < 5; i++ {
			w.clock.Set(res.RetryAt)
			// Another runner with another evaluator: it must publish the frozen verdict.
			res, _ = w.runner("b", verdict("failure", "second evaluation")).Process(context.Background(), w.msg)
		}
		got := w.pub.all()
		if !res.Done || len(got) != 1 || got[0].Description != "first evaluation" || w.state(t) != ledger.StateDone {
			t.Fatalf("%+v %+v %v", res, got, w.state(t))
		}
	})
}

// An outage longer than any fixed number of attempts is ridden out: the verdict waits saved,
// retried on a growing schedule with jitter, and is published once the provider answers. It is
// abandoned only when the publish budget is spent.
func TestOutagesAreRiddenOutUntilTheBudget(t *testing.T) {
	for _, code := range []int{503, 401} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			w := newWorld(t)
			up := epoch.Add(time.Hour)
			p := &scripted{clock: w.clock, answer: func(now time.Time) error {
				if now.Before(up) {
					return outage(code)
				}
				return nil
			}}
			m := &counter{}
			r := w.runner("a", verdict("failure", "failed: pull request title"))
			r.Metrics = m
			r.Routes = func(context.Context, string) (*runner.Route, error) {
				return &runner.Route{Evaluator: verdict("failure", "failed: pull request title"), Publisher: p, Context: "amiss/verdict"}, nil
			}
			drive(t, w, r, 100)
			if len(p.posted) != 1 || p.posted[0].Description != "failed: pull request title" || w.state(t) != ledger.StateDone {
				t.Fatalf("posted %+v, row %v: want the verdict published once", p.posted, w.state(t))
			}
			// The schedule: each wait between half and all of 30 s doubled per attempt, capped at
			// 30 minutes; never past the next attempt's claim.
			for i := 1; i < len(p.attempts)-1; i++ {
				gap := p.attempts[i].Sub(p.attempts[i-1])
				full := min(30*time.Second<<(i-1), 30*time.Minute)
				if gap < full/2 || gap > full {
					t.Errorf("wait %d: %v, want within [%v, %v]", i, gap, full/2, full)
				}
			}
			if last := p.attempts[len(p.attempts)-1]; last.Before(up) || last.Sub(up) > 30*time.Minute {
				t.Errorf("published at %v, the provider was back at %v", last, up)
			}
			if code == 401 && m.get("publish_refused") != len(p.attempts)-1 {
				t.Errorf("publish_refused counted %d times for %d refusals", m.get("publish_refused"), len(p.attempts)-1)
			}
			t.Logf("%d: published after %d attempts, %v after the provider came back", code, len(p.attempts), p.attempts[len(p.attempts)-1].Sub(up))
		})
	}
	t.Run("budget spent", func(t *testing.T) {
		w := newWorld(t)
		p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
		r := w.runner("a", verdict("success", "ok")) // the default budget: 72 hours
		r.Routes = func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
		}
		drive(t, w, r, 1000)
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		last := p.attempts[len(p.attempts)-1]
		if row.State != ledger.StateAbandoned || len(p.posted) != 0 || last.Before(epoch.Add(72*time.Hour)) ||
			!strings.Contains(row.Reason, "publish budget of 72h0m0s spent") || !strings.Contains(row.Reason, `verdict success: "ok"`) {
			t.Fatalf("row %v (%q), last attempt at %v", row.State, row.Reason, last.Sub(epoch))
		}
		if prev := p.attempts[len(p.attempts)-2]; prev.After(epoch.Add(72 * time.Hour)) {
			t.Fatalf("two attempts after the budget's end")
		}
		t.Logf("a 72h outage: %d attempts, abandoned at %v", len(p.attempts), last.Sub(epoch))
	})
}

// The provider's own wait is honoured, however long.
func TestRetryAfterIsHonoured(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(now time.Time) error {
		return &publish.Error{Class: publish.Transient, Status: 429, RetryAfter: 2 * time.Hour, Err: errors.New("429")}
	}}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || res.Done || res.RetryAt.Before(epoch.Add(2*time.Hour)) {
		t.Fatalf("%+v %v: want a retry no sooner than 2h", res, err)
	}
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	if row.State != ledger.StateSaved || row.NotBefore.Before(epoch.Add(2*time.Hour)) {
		t.Fatalf("row %v, not before %v", row.State, row.NotBefore)
	}
}

// The budget is measured on the ledger's clock: a runner whose own clock is days ahead does
// not give up on a verdict saved a minute ago.
func TestBudgetIgnoresTheRunnersClock(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
	r := w.runner("a", verdict("success", "ok"))
	r.Now = func() time.Time { return w.clock.Now().Add(100 * time.Hour) }
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	for range 3 {
		if res, _ := r.Process(context.Background(), w.msg); res.Done {
			t.Fatal("abandoned on the runner's clock")
		}
		w.clock.Advance(time.Hour)
	}
	if w.state(t) != ledger.StateSaved {
		t.Fatalf("row %v", w.state(t))
	}
}

// legacy hides PublishSince, as for a row saved by an older version.
type legacy struct{ ledger.Ledger }

func (l legacy) Claim(ctx context.Context, k ledger.Key, b ledger.Digest, o string, d time.Duration) (ledger.Claim, error) {
	c, err := l.Ledger.Claim(ctx, k, b, o, d)
	if c.Staged != nil {
		c.Staged.Lease.PublishSince = time.Time{}
	}
	return c, err
}

// A row saved by an older version records no start of its budget: it counts from admission.
func TestBudgetOfARowSavedByAnOlderVersion(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	if res, _ := r.Process(context.Background(), w.msg); res.Done {
		t.Fatal("abandoned at the first failure")
	}
	w.clock.Set(epoch.Add(73 * time.Hour))
	r.Ledger = legacy{w.l}
	if res, _ := r.Process(context.Background(), w.msg); !res.Done || w.state(t) != ledger.StateAbandoned {
		t.Fatalf("%+v, row %v: a budget counted from admission 73h ago is spent", res, w.state(t))
	}
}

// movedGitHub stands in for a GitHub (Enterprise) API whose statuses endpoint for acme/app
// answers with a redirect (a renamed repository, a proxy moving http to https, a host name
// moved), as HTTP allows: 301 with a Location. At the new location it behaves as GitHub does:
// GET lists the commit's statuses (200), POST creates one (201).
type movedGitHub struct {
	code int // the redirect's status

	mu       sync.Mutex
	statuses []map[string]string
	requests []string
}

func (g *movedGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests = append(g.requests, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	switch {
	case strings.HasPrefix(r.URL.Path, "/repos/acme/app/statuses/"):
		sha := strings.TrimPrefix(r.URL.Path, "/repos/acme/app/statuses/")
		w.Header().Set("Location", "/repositories/42/statuses/"+sha)
		w.WriteHeader(g.code)
		io.WriteString(w, `{"message":"Moved Permanently","url":"/repositories/42/statuses/`+sha+`"}`)
	case strings.HasPrefix(r.URL.Path, "/repositories/42/statuses/"):
		if r.Method == http.MethodGet {
			b, _ := json.Marshal(g.statuses)
			w.WriteHeader(http.StatusOK)
			w.Write(b)
			return
		}
		var body map[string]string
		json.NewDecoder(r.Body).Decode(&body)
		g.statuses = append(g.statuses, body)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":1}`))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// A delivery whose row is marked done must have its verdict at the provider: a redirect the
// HTTP client follows by turning the POST into a GET (301, 302, 303) reads the commit's
// statuses (200) and must not be taken for a posted status. The client is the one production
// wiring builds (functions/wiring.Routes: a plain http.Client that follows redirects).
func TestARedirectedPostIsNotCountedAsPublished(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			w := newWorld(t)
			api := &movedGitHub{code: code}
			srv := httptest.NewServer(api)
			defer srv.Close()
			gh := publish.NewGitHub(srv.URL, "ghp_token", &http.Client{Timeout: 15 * time.Second})
			r := w.runner("a", verdict("failure", "failed: forbidden path secrets/key.pem"))
			r.Routes = func(context.Context, string) (*runner.Route, error) {
				return &runner.Route{Evaluator: verdict("failure", "failed: forbidden path secrets/key.pem"), Publisher: gh,
					Context: "amiss/verdict", TargetURL: "https://ci.example.com"}, nil
			}
			res, err := r.Process(context.Background(), w.msg)
			api.mu.Lock()
			posted, requests := len(api.statuses), append([]string(nil), api.requests...)
			api.mu.Unlock()
			if w.state(t) == ledger.StateDone && posted == 0 {
				t.Fatalf("row done (result %+v, err %v) but the provider holds no status for the delivery: the verdict is lost; "+
					"requests the provider saw: %v", res, err, requests)
			}
		})
	}
}

// A base URL no request can be built from (a typo in the port) is refused by the
// configuration with the field named; a publisher given one anyway (a configuration checked by
// an older release) treats it as an operator's to fix, like a route whose token cannot be
// read: the verdict stays saved and is retried on the publish schedule, never abandoned as
// "refused for good" by a provider it never reached.
func TestAnUnusableBaseURLDoesNotAbandonTheVerdict(t *testing.T) {
	const baseURL = "https://gitea.example.com:30OO" // letter O for zero
	_, err := config.ParseEnv([]byte(`
routes:
  r:
    provider: gitea
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/app"]
    publish: {provider: gitea, base_url: '`+baseURL+`', token: {from: 'env:T'}}
`), func(string) string { return "x" })
	if err == nil || !strings.Contains(err.Error(), "publish.base_url") {
		t.Fatalf("configuration with base_url %q: err %v, want a refusal naming publish.base_url", baseURL, err)
	}
	p, _ := provider.Publishing("gitea")
	pub := p.Publisher(provider.Target{BaseURL: baseURL, Token: "t"}) // no request ever leaves
	w := newWorld(t)
	r := w.runner("a", nil)
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("failure", "failed: pull request title"), Publisher: pub, Context: "amiss/verdict"}, nil
	}
	res, err := r.Process(context.Background(), w.msg)
	if st := w.state(t); st != ledger.StateSaved {
		t.Fatalf("row %v after one attempt (result %+v, err %v): a base URL no request can be built from abandoned the verdict "+
			"instead of keeping it for the operator's fix", st, res, err)
	}
}
