package githubapp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amiss-ci/amiss/functions/githubapp"
	"github.com/amiss-ci/amiss/functions/githubapp/githubapptest"
)

// Over three hours of GitHub's one-hour tokens, every token Token hands out is still
// accepted a little under RefreshMargin later: tokens are renewed before they expire, and
// reused until then.
func TestTokensAreRenewedBeforeTheyExpire(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	tk := w.tokens(t, nil)
	seen := map[string]bool{}
	for step := 0; step < 3*60/7; step++ {
		tok, err := tk.Token(context.Background(), 1)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		seen[tok] = true
		w.clock.Advance(githubapp.RefreshMargin - time.Second)
		if inst, ok := w.fake.Authorize(tok); !ok || inst != 1 {
			t.Fatalf("step %d: a token handed out %s ago is refused by GitHub (expired)", step, githubapp.RefreshMargin-time.Second)
		}
		w.clock.Advance(7*time.Minute - githubapp.RefreshMargin + time.Second)
	}
	// 3 hours of one-hour tokens renewed 5 minutes early: 4 tokens, not one per call.
	if n := w.fake.Exchanges(1); n != len(seen) || n < 3 || n > 5 {
		t.Fatalf("%d exchanges for %d tokens over 3 hours", n, len(seen))
	}
	w.noViolations(t)
}

// A token issued for less than twice RefreshMargin is reused for half its lifetime.
func TestAShortLivedTokenIsReusedForHalfItsLife(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	w.fake.Lifetime = 4 * time.Minute
	tk := w.tokens(t, nil)
	first, err := tk.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(119 * time.Second)
	if again, err := tk.Token(context.Background(), 1); err != nil || again != first {
		t.Fatalf("a 4-minute token was not reused after 1m59s: %v", err)
	}
	w.clock.Advance(2 * time.Second)
	second, err := tk.Token(context.Background(), 1)
	if err != nil || second == first {
		t.Fatalf("a 4-minute token was reused past half its life: %v", err)
	}
	if _, ok := w.fake.Authorize(second); !ok || w.fake.Exchanges(1) != 2 {
		t.Fatalf("second token refused or %d exchanges", w.fake.Exchanges(1))
	}
}

// Concurrent callers for one installation make one exchange and share its token; another
// installation gets a token of its own.
func TestConcurrentCallersShareOneExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := githubapptest.New(appID, publicKey())
		fake.Install(1, "acme/app")
		fake.Install(2, "other/app")
		// The exchanges wait at the gate until every caller is blocked.
		gate := make(chan struct{})
		_, pemKey := appKey()
		tk, err := githubapp.New(githubapp.Config{BaseURL: "https://api.github.com", AppID: "4242", PrivateKey: pemKey, Client: inProcess(gated(gate, fake))})
		if err != nil {
			t.Fatal(err)
		}
		const callers = 8
		tokens := make([]string, callers+1)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				var err error
				if tokens[i], err = tk.Token(context.Background(), 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Go(func() {
			var err error
			if tokens[callers], err = tk.Token(context.Background(), 2); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // every caller is blocked: on the gate, or on the exchange it shares
		close(gate)
		wg.Wait()
		for i := 1; i < callers; i++ {
			if tokens[i] != tokens[0] {
				t.Fatalf("caller %d got another token than caller 0", i)
			}
		}
		if n1, n2 := fake.Exchanges(1), fake.Exchanges(2); n1 != 1 || n2 != 1 {
			t.Fatalf("%d exchanges for installation 1 (%d callers), %d for installation 2; want one each", n1, callers, n2)
		}
		if inst, ok := fake.Authorize(tokens[callers]); !ok || inst != 2 || tokens[callers] == tokens[0] {
			t.Fatalf("installation 2's token: installation %d, ok %v", inst, ok)
		}
		if v := fake.Violations(); len(v) > 0 {
			t.Fatal(v)
		}
	})
}

// A caller that gives up waiting does not cancel the exchange the others wait for.
func TestACallerGivingUpLeavesTheSharedExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := githubapptest.New(appID, publicKey())
		fake.Install(1, "acme/app")
		gate := make(chan struct{})
		_, pemKey := appKey()
		tk, err := githubapp.New(githubapp.Config{AppID: "4242", PrivateKey: pemKey, Client: inProcess(gated(gate, fake))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var first error
		var second string
		var wg sync.WaitGroup
		wg.Go(func() { _, first = tk.Token(ctx, 1) }) // starts the exchange, then gives up
		synctest.Wait()
		wg.Go(func() { second, _ = tk.Token(context.Background(), 1) })
		synctest.Wait()
		cancel()
		synctest.Wait()
		close(gate)
		wg.Wait()
		if !errors.Is(first, context.Canceled) {
			t.Fatalf("the caller that gave up: %v", first)
		}
		if _, ok := fake.Authorize(second); !ok || fake.Exchanges(1) != 1 {
			t.Fatalf("the caller that waited got no token (%d exchanges)", fake.Exchanges(1))
		}
	})
}

// Forget drops the cached token, so the next Token exchanges again; forgetting a token that
// was already replaced keeps the new one.
func TestForgetLeadsToANewExchange(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	tk := w.tokens(t, nil)
	first, err := tk.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	tk.Forget(1, first)
	second, err := tk.Token(context.Background(), 1)
	if err != nil || second == first || w.fake.Exchanges(1) != 2 {
		t.Fatalf("after Forget: same token %v, %d exchanges, %v", second == first, w.fake.Exchanges(1), err)
	}
	tk.Forget(1, first) // a caller still holding the old token
	if third, err := tk.Token(context.Background(), 1); err != nil || third != second || w.fake.Exchanges(1) != 2 {
		t.Fatalf("forgetting a replaced token dropped its successor (%d exchanges): %v", w.fake.Exchanges(1), err)
	}
}

// An installation GitHub does not know (404) is ErrInstallationRefused naming it; a suspended
// one (403) too, with GitHub's message. Neither is temporary, nor cached.
func TestARefusedInstallationIsNamed(t *testing.T) {
	w := newWorld(t)
	tk := w.tokens(t, nil)
	_, err := tk.Token(context.Background(), 42)
	if !errors.Is(err, githubapp.ErrInstallationRefused) || githubapp.Temporary(err) || !strings.Contains(err.Error(), "installation 42") ||
		!strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "install the App") {
		t.Fatalf("an unknown installation: %v", err)
	}
	w.fake.Install(43, "acme/app")
	w.fake.Refuse(43, http.StatusForbidden, "")
	_, err = tk.Token(context.Background(), 43)
	if !errors.Is(err, githubapp.ErrInstallationRefused) || errors.Is(err, githubapp.ErrKeyRefused) ||
		!strings.Contains(err.Error(), "installation 43") || !strings.Contains(err.Error(), "This installation has been suspended") {
		t.Fatalf("a suspended installation: %v", err)
	}
	if _, err := tk.Token(context.Background(), 43); err == nil || w.fake.Exchanges(43) != 2 {
		t.Fatalf("a refusal was cached: %d exchanges, %v", w.fake.Exchanges(43), err)
	}
	w.noViolations(t)
}

// 5xx and rate limits are temporary (with GitHub's wait), and never cached.
func TestServerErrorsAndRateLimitsAreTemporary(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	tk := w.tokens(t, nil)
	w.fake.FailNext(1, http.StatusBadGateway)
	_, err := tk.Token(context.Background(), 1)
	if !githubapp.Temporary(err) || errors.Is(err, githubapp.ErrInstallationRefused) || errors.Is(err, githubapp.ErrKeyRefused) {
		t.Fatalf("502: %v", err)
	}
	w.fake.FailNext(1, http.StatusTooManyRequests)
	_, err = tk.Token(context.Background(), 1)
	var e *githubapp.Error
	if !githubapp.Temporary(err) || !errors.As(err, &e) || e.RetryAfter != time.Minute {
		t.Fatalf("429: %v", err)
	}
	if _, err := tk.Token(context.Background(), 1); err != nil {
		t.Fatalf("after the failures: %v", err)
	}
	// The network: nothing listens any more.
	w.srv.Close()
	if _, err := w.tokens(t, nil).Token(context.Background(), 1); !githubapp.Temporary(err) {
		t.Fatalf("no server: %v", err)
	}
}

// A GitHub Enterprise Server base URL keeps its path (/api/v3), with or without a trailing
// slash; a base URL without it reaches no App API.
func TestAGitHubEnterpriseBaseURLKeepsItsPath(t *testing.T) {
	w := newWorld(t)
	w.fake.Prefix = "/api/v3"
	w.fake.Install(1, "acme/app")
	_, pemKey := appKey()
	for _, base := range []string{w.srv.URL + "/api/v3", w.srv.URL + "/api/v3/"} {
		tk, err := githubapp.New(githubapp.Config{BaseURL: base, AppID: "4242", PrivateKey: pemKey, Now: w.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tk.Token(context.Background(), 1)
		if _, ok := w.fake.Authorize(tok); err != nil || !ok {
			t.Fatalf("%s: %v", base, err)
		}
		if in, err := tk.Installation(context.Background(), "acme", "app"); err != nil || in.ID != 1 {
			t.Fatalf("%s: installation %+v, %v", base, in, err)
		}
	}
	w.noViolations(t)
	if _, err := w.tokens(t, nil).Token(context.Background(), 1); err == nil || len(w.fake.Violations()) != 1 {
		t.Fatalf("a base URL without /api/v3 was served: %v", err)
	}
}

// The installation of a repository is found by its name; a repository the App is not
// installed on is ErrInstallationRefused naming it.
func TestTheInstallationOfARepositoryIsFound(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(7, "acme/app", "acme/lib")
	tk := w.tokens(t, nil)
	in, err := tk.Installation(context.Background(), "acme", "lib")
	if err != nil || in.ID != 7 || in.Account.Login != "acme" || in.Permissions["checks"] != "write" || in.SuspendedAt != nil {
		t.Fatalf("acme/lib: %+v, %v", in, err)
	}
	_, err = tk.Installation(context.Background(), "acme", "other")
	if !errors.Is(err, githubapp.ErrInstallationRefused) || !strings.Contains(err.Error(), "acme/other") {
		t.Fatalf("acme/other: %v", err)
	}
	w.noViolations(t)
}

// No error ever holds a token, a JWT or the key.
func TestErrorsHoldNoSecret(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	tk := w.tokens(t, nil)
	tok, err := tk.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, pemKey := appKey()
	keyLine := strings.Split(string(pemKey), "\n")[5]
	var errs []error
	w.fake.Refuse(1, http.StatusForbidden, "")
	tk.Forget(1, tok)
	_, err = tk.Token(context.Background(), 1)
	errs = append(errs, err)
	w.fake.RevokeKey()
	_, err = tk.App(context.Background())
	errs = append(errs, err)
	_, err = githubapp.New(githubapp.Config{AppID: "1", PrivateKey: []byte(strings.Replace(string(pemKey), keyLine, keyLine[:10], 1))})
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("no error")
		}
		if s := err.Error(); strings.Contains(s, tok) || strings.Contains(s, "eyJ") || strings.Contains(s, keyLine[:10]) {
			t.Errorf("an error holds a secret: %s", s)
		}
	}
}
