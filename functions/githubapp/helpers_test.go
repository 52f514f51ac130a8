package githubapp_test

import (
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/githubapp"
	"github.com/amiss-ci/amiss/functions/githubapp/githubapptest"
)

const appID = 4242

// The App's key and a key of no App, generated once for the package's tests.
var (
	appKey   = sync.OnceValues(githubapptest.GenerateKey)
	otherKey = sync.OnceValues(githubapptest.GenerateKey)
)

// world is a fake GitHub on 127.0.0.1 serving one App, and a clock both sides read.
type world struct {
	fake  *githubapptest.App
	srv   *httptest.Server
	clock *githubapptest.Clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	key, _ := appKey()
	clock := githubapptest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	fake := githubapptest.New(appID, &key.PublicKey)
	fake.Now = clock.Now
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &world{fake: fake, srv: srv, clock: clock}
}

// tokens returns the App's Tokens against the fake, signing with the PEM pemKey (the App's
// own when nil).
func (w *world) tokens(t *testing.T, pemKey []byte) *githubapp.Tokens {
	t.Helper()
	if pemKey == nil {
		_, pemKey = appKey()
	}
	tk, err := githubapp.New(githubapp.Config{BaseURL: w.srv.URL, AppID: "4242", PrivateKey: pemKey, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return tk
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
