package runner_test

import (
	"context"
	"encoding/json"
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
