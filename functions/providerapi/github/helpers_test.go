package github_test

import (
	"context"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

const appID = 4242

// The App's key, a second key of the App, and a key of no App, generated once for the
// package's tests.
var (
	appKey    = sync.OnceValues(githubtest.GenerateKey)
	secondKey = sync.OnceValues(githubtest.GenerateKey)
	otherKey  = sync.OnceValues(githubtest.GenerateKey)
)

// world is a fake GitHub on 127.0.0.1 serving one App, and a clock both sides read (a test
// sets the host's apart from GitHub's with skew).
type world struct {
	fake  *githubtest.GitHub
	srv   *httptest.Server
	clock *githubtest.Clock
	skew  time.Duration
}

func newWorld(t *testing.T) *world {
	t.Helper()
	key, _ := appKey()
	clock := githubtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	fake := githubtest.NewApp(appID, &key.PublicKey)
	fake.Now = clock.Now
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &world{fake: fake, srv: srv, clock: clock}
}

// hostNow is this host's clock: GitHub's, skewed.
func (w *world) hostNow() time.Time { return w.clock.Now().Add(w.skew) }

// app returns the App against the fake, signing with the PEM pemKey (the App's own when nil),
// keeping its tokens in cache (its own when nil).
func (w *world) app(t *testing.T, pemKey []byte, cache *github.TokenCache) *github.App {
	t.Helper()
	if pemKey == nil {
		_, pemKey = appKey()
	}
	a, err := github.NewApp(github.AppConfig{BaseURL: w.srv.URL, AppID: "4242", PrivateKey: pemKey, Now: w.hostNow, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// client is an installation client of app against the fake, whose waits move the clock.
func (w *world) client(app github.InstallationTokens) *github.Client {
	c := github.NewInstallationClient(w.srv.URL, app, w.srv.Client())
	c.Now = w.hostNow
	c.Sleep = func(_ context.Context, d time.Duration) error { w.clock.Advance(d); return nil }
	return c
}

// noViolations fails the test when the fake saw a request GitHub would refuse.
func (w *world) noViolations(t *testing.T) {
	t.Helper()
	if v := w.fake.Violations(); len(v) > 0 {
		t.Fatalf("requests GitHub would refuse:\n%s", strings.Join(v, "\n"))
	}
}

// inProcess is an HTTP client that serves every request with h in this process (no network),
// for tests run in a synctest bubble. A request whose context ended is answered with its
// error, as a transport does.
func inProcess(h http.Handler) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		return rec.Result(), nil
	})}
}

// gated serves h once gate is closed (or not at all, when the request's context ends first).
func gated(gate <-chan struct{}, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
			h.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// publicKey is the App's public key.
func publicKey() *rsa.PublicKey {
	k, _ := appKey()
	return &k.PublicKey
}
