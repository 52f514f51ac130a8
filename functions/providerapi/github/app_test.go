package github_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// Over three hours of GitHub's one-hour tokens, every token Token hands out is still accepted
// a little under RefreshMargin later: tokens are renewed before they expire, and reused until
// then.
func TestTokensAreRenewedBeforeTheyExpire(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	app := w.app(t, nil, nil)
	seen := map[string]bool{}
	for step := 0; step < 3*60/7; step++ {
		tok, err := app.Token(context.Background(), 1)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		seen[tok.Value] = true
		w.clock.Advance(github.RefreshMargin - time.Second)
		if inst, ok := w.fake.Installed(tok.Value); !ok || inst != 1 {
			t.Fatalf("step %d: a token handed out %s ago is refused by GitHub (expired)", step, github.RefreshMargin-time.Second)
		}
		w.clock.Advance(7*time.Minute - github.RefreshMargin + time.Second)
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
	app := w.app(t, nil, nil)
	first, err := app.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(119 * time.Second)
	if again, err := app.Token(context.Background(), 1); err != nil || again != first {
		t.Fatalf("a 4-minute token was not reused after 1m59s: %v", err)
	}
	w.clock.Advance(2 * time.Second)
	second, err := app.Token(context.Background(), 1)
	if err != nil || second == first {
		t.Fatalf("a 4-minute token was reused past half its life: %v", err)
	}
	if _, ok := w.fake.Installed(second.Value); !ok || w.fake.Exchanges(1) != 2 {
		t.Fatalf("second token refused or %d exchanges", w.fake.Exchanges(1))
	}
}

// Concurrent callers for one installation make one exchange and share its token; another
// installation gets a token of its own.
func TestConcurrentCallersShareOneExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := githubtest.NewApp(appID, publicKey())
		fake.Install(1, "acme/app")
		fake.Install(2, "other/app")
		// The exchanges wait at the gate until every caller is blocked.
		gate := make(chan struct{})
		_, pemKey := appKey()
		app, err := github.NewApp(github.AppConfig{BaseURL: "https://api.github.com", AppID: "4242", PrivateKey: pemKey, Client: inProcess(gated(gate, fake))})
		if err != nil {
			t.Fatal(err)
		}
		const callers = 8
		tokens := make([]github.InstallationToken, callers+1)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				var err error
				if tokens[i], err = app.Token(context.Background(), 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Go(func() {
			var err error
			if tokens[callers], err = app.Token(context.Background(), 2); err != nil {
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
		if inst, ok := fake.Installed(tokens[callers].Value); !ok || inst != 2 || tokens[callers] == tokens[0] {
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
		fake := githubtest.NewApp(appID, publicKey())
		fake.Install(1, "acme/app")
		gate := make(chan struct{})
		_, pemKey := appKey()
		app, err := github.NewApp(github.AppConfig{AppID: "4242", PrivateKey: pemKey, Client: inProcess(gated(gate, fake))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var first error
		var second github.InstallationToken
		var wg sync.WaitGroup
		wg.Go(func() { _, first = app.Token(ctx, 1) }) // starts the exchange, then gives up
		synctest.Wait()
		wg.Go(func() { second, _ = app.Token(context.Background(), 1) })
		synctest.Wait()
		cancel()
		synctest.Wait()
		close(gate)
		wg.Wait()
		if !errors.Is(first, context.Canceled) {
			t.Fatalf("the caller that gave up: %v", first)
		}
		if _, ok := fake.Installed(second.Value); !ok || fake.Exchanges(1) != 1 {
			t.Fatalf("the caller that waited got no token (%d exchanges)", fake.Exchanges(1))
		}
	})
}

// Forget drops the cached token, so the next Token exchanges again; forgetting a token that
// was already replaced keeps the new one.
func TestForgetLeadsToANewExchange(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	app := w.app(t, nil, nil)
	first, err := app.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	app.Forget(1, first.Value)
	second, err := app.Token(context.Background(), 1)
	if err != nil || second == first || w.fake.Exchanges(1) != 2 {
		t.Fatalf("after Forget: same token %v, %d exchanges, %v", second == first, w.fake.Exchanges(1), err)
	}
	app.Forget(1, first.Value) // a caller still holding the old token
	if third, err := app.Token(context.Background(), 1); err != nil || third != second || w.fake.Exchanges(1) != 2 {
		t.Fatalf("forgetting a replaced token dropped its successor (%d exchanges): %v", w.fake.Exchanges(1), err)
	}
}

// Two routes name one App with two of its keys (a key being rotated, or two configurations):
// the installation tokens are the App's, whichever key signed the JWT, so the two share one
// token per installation. Alternating between them, as deliveries do, costs one exchange for
// each installation, not one each time the other key was used last.
func TestTwoKeysOfOneAppShareOneTokenPerInstallation(t *testing.T) {
	w := newWorld(t)
	key2, pem2 := secondKey()
	w.fake.Keys = append(w.fake.Keys, &key2.PublicKey)
	w.fake.Install(7, "acme/app")
	w.fake.Install(8, "acme/lib")
	cache := github.NewTokenCache()
	first, second := w.app(t, nil, cache), w.app(t, pem2, cache)
	for round := range 2 {
		for _, app := range []*github.App{first, second} {
			for _, inst := range []int64{7, 8} {
				tok, err := app.Token(context.Background(), inst)
				if got, ok := w.fake.Installed(tok.Value); err != nil || !ok || got != inst {
					t.Fatalf("round %d, installation %d: %v", round, inst, err)
				}
			}
		}
	}
	if n7, n8 := w.fake.Exchanges(7), w.fake.Exchanges(8); n7 != 1 || n8 != 1 {
		t.Fatalf("%d and %d exchanges for installations 7 and 8 with two keys of one App; want one each", n7, n8)
	}
	w.noViolations(t)
}

// An exchange that fails with one key (revoked) does not fail a caller with another key of
// the App that waited for it: that caller exchanges with its own.
func TestAKeyRefusedByGitHubDoesNotFailTheAppsOtherKey(t *testing.T) {
	w := newWorld(t)
	_, foreign := otherKey()
	w.fake.Install(7, "acme/app")
	cache := github.NewTokenCache()
	good, bad := w.app(t, nil, cache), w.app(t, foreign, cache)
	if _, err := bad.Token(context.Background(), 7); !errors.Is(err, github.ErrKeyRefused) {
		t.Fatalf("a key GitHub does not list: %v", err)
	}
	if tok, err := good.Token(context.Background(), 7); err != nil {
		t.Fatalf("the App's own key after another key was refused: %v", err)
	} else if _, ok := w.fake.Installed(tok.Value); !ok {
		t.Fatal("a token GitHub does not know")
	}
	// Once a token is cached, the App's tokens are handed out whichever key asks.
	if _, err := bad.Token(context.Background(), 7); err != nil {
		t.Fatalf("a cached token of the App: %v", err)
	}
}

// A host clock 5 minutes fast signs JWTs whose iat is 4 minutes in GitHub's future: GitHub
// refuses them 401, naming iat. The App reads GitHub's clock from the answer's Date, signs
// again with the offset, and gets its token; the later JWTs are signed with the offset from
// the start. A clock 10 minutes slow (exp in GitHub's past) is caught alike.
func TestAHostClockMinutesOffStillGetsTokens(t *testing.T) {
	for name, skew := range map[string]time.Duration{"5 minutes fast": 5 * time.Minute, "10 minutes slow": -10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.skew = skew
			w.fake.Install(1, "acme/app")
			app := w.app(t, nil, nil)
			tok, err := app.Token(context.Background(), 1)
			if _, ok := w.fake.Installed(tok.Value); err != nil || !ok {
				t.Fatalf("a host clock %s: %v", name, err)
			}
			if got := app.Clock(); got != -skew {
				t.Fatalf("the App signs with an offset of %s, want %s", got, -skew)
			}
			if info, err := app.Info(context.Background()); err != nil || info.ID != appID {
				t.Fatalf("GET /app after the offset was learnt: %+v, %v", info, err)
			}
			if n := w.fake.ClockRefusals(); n != 1 {
				t.Fatalf("%d JWTs refused for their times, want 1 (the first, before GitHub's Date was read)", n)
			}
			w.noViolations(t)
		})
	}
}

// A new installation token is not known to every GitHub server at once: one that answers 401
// within seconds of the token's creation is waited out (a second, then two), and the request
// sent again with the same token, not reported as the operator's and not exchanged again.
func TestA401OnATokenASecondOldIsRetried(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(7, "acme/app")
	w.fake.ReplicationDelay = 2 * time.Second
	w.fake.AddStatus(githubtest.Created{Repository: "acme/app", SHA: sha, Context: "ci", State: "success"})
	c := w.client(w.app(t, nil, nil))
	a, err := c.Do(context.Background(), 7, getStatus)
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("a read with a token GitHub was still replicating: %v", err)
	}
	if n, u := w.fake.Exchanges(7), w.fake.Unauthorized(); n != 1 || u != 2 {
		t.Fatalf("%d exchanges and %d refusals, want 1 exchange and the refusals of the first 2 s (at 0 s and 1 s)", n, u)
	}
	w.noViolations(t)
}

// A token still refused once ReplicationDelay has passed is no replication: the 401 is the
// operator's, with no new exchange for a token that was just made.
func TestATokenRefusedPastItsReplicationIsTheOperators(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(7, "acme/app")
	w.fake.ReplicationDelay = time.Hour
	c := w.client(w.app(t, nil, nil))
	_, err := c.Do(context.Background(), 7, getStatus)
	if providerapi.ClassOf(err) != providerapi.Operator || providerapi.StatusOf(err) != http.StatusUnauthorized ||
		!strings.Contains(err.Error(), "replication") {
		t.Fatalf("%v (class %v), want the operator's 401 naming the replication waited for", err, providerapi.ClassOf(err))
	}
	if n := w.fake.Exchanges(7); n != 1 {
		t.Fatalf("%d exchanges, want 1", n)
	}
}

// A token refused long after its creation (revoked, or expired early) is dropped, and the
// request sent once more with a new token.
func TestAnOldTokenRefusedIsReplacedOnce(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(7, "acme/app")
	w.fake.AddStatus(githubtest.Created{Repository: "acme/app", SHA: sha, Context: "ci", State: "success"})
	app := w.app(t, nil, nil)
	c := w.client(app)
	first, err := app.Token(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	w.fake.RevokeToken(first.Value)
	if _, err := c.Do(context.Background(), 7, getStatus); err != nil {
		t.Fatalf("a revoked token: %v", err)
	}
	if n, u := w.fake.Exchanges(7), w.fake.Unauthorized(); n != 2 || u != 1 {
		t.Fatalf("%d exchanges and %d refusals, want 2 and 1", n, u)
	}
}

// An installation GitHub does not know (404) is ErrInstallationRefused naming it; a suspended
// one (403) too, with GitHub's message. Neither is transient, nor cached.
func TestARefusedInstallationIsNamed(t *testing.T) {
	w := newWorld(t)
	app := w.app(t, nil, nil)
	_, err := app.Token(context.Background(), 42)
	if !errors.Is(err, github.ErrInstallationRefused) || providerapi.ClassOf(err) != providerapi.Operator ||
		!strings.Contains(err.Error(), "installation 42") || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "install the App") {
		t.Fatalf("an unknown installation: %v", err)
	}
	w.fake.Install(43, "acme/app")
	w.fake.Refuse(43, http.StatusForbidden, "")
	_, err = app.Token(context.Background(), 43)
	if !errors.Is(err, github.ErrInstallationRefused) || errors.Is(err, github.ErrKeyRefused) ||
		!strings.Contains(err.Error(), "installation 43") || !strings.Contains(err.Error(), "This installation has been suspended") {
		t.Fatalf("a suspended installation: %v", err)
	}
	if _, err := app.Token(context.Background(), 43); err == nil || w.fake.Exchanges(43) != 2 {
		t.Fatalf("a refusal was cached: %d exchanges, %v", w.fake.Exchanges(43), err)
	}
	w.noViolations(t)
}

// 5xx and rate limits are transient (with GitHub's wait), and never cached.
func TestServerErrorsAndRateLimitsAreTransient(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	app := w.app(t, nil, nil)
	w.fake.FailNext(1, http.StatusBadGateway)
	_, err := app.Token(context.Background(), 1)
	if providerapi.ClassOf(err) != providerapi.Transient || errors.Is(err, github.ErrInstallationRefused) || errors.Is(err, github.ErrKeyRefused) {
		t.Fatalf("502: %v", err)
	}
	w.fake.FailNext(1, http.StatusTooManyRequests)
	_, err = app.Token(context.Background(), 1)
	if providerapi.ClassOf(err) != providerapi.Transient || providerapi.RetryAfterOf(err) != time.Minute {
		t.Fatalf("429: %v", err)
	}
	if _, err := app.Token(context.Background(), 1); err != nil {
		t.Fatalf("after the failures: %v", err)
	}
	// The network: nothing listens any more.
	w.srv.Close()
	if _, err := w.app(t, nil, nil).Token(context.Background(), 1); providerapi.ClassOf(err) != providerapi.Transient {
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
		app, err := github.NewApp(github.AppConfig{BaseURL: base, AppID: "4242", PrivateKey: pemKey, Now: w.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := app.Token(context.Background(), 1)
		if _, ok := w.fake.Installed(tok.Value); err != nil || !ok {
			t.Fatalf("%s: %v", base, err)
		}
		if in, err := app.Installation(context.Background(), "acme", "app"); err != nil || in.ID != 1 {
			t.Fatalf("%s: installation %+v, %v", base, in, err)
		}
	}
	w.noViolations(t)
	if _, err := w.app(t, nil, nil).Token(context.Background(), 1); err == nil || len(w.fake.Violations()) != 1 {
		t.Fatalf("a base URL without /api/v3 was served: %v", err)
	}
}

// The installation of a repository is found by its name; a repository the App is not
// installed on is ErrInstallationRefused naming it.
func TestTheInstallationOfARepositoryIsFound(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(7, "acme/app", "acme/lib")
	app := w.app(t, nil, nil)
	in, err := app.Installation(context.Background(), "acme", "lib")
	if err != nil || in.ID != 7 || in.Account.Login != "acme" || in.Permissions["checks"] != "write" || in.SuspendedAt != nil {
		t.Fatalf("acme/lib: %+v, %v", in, err)
	}
	_, err = app.Installation(context.Background(), "acme", "other")
	if !errors.Is(err, github.ErrInstallationRefused) || !strings.Contains(err.Error(), "acme/other") {
		t.Fatalf("acme/other: %v", err)
	}
	w.noViolations(t)
}

// The installation on an account is found among the App's installations, paged by GitHub's
// Link header; an account without one is ErrInstallationRefused.
func TestTheInstallationOnAnAccountIsFoundAcrossPages(t *testing.T) {
	w := newWorld(t)
	for i := range 250 {
		w.fake.Install(int64(i+1), "org"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+"/app")
	}
	w.fake.Install(251, "zeta/app")
	app := w.app(t, nil, nil)
	in, err := app.AccountInstallation(context.Background(), "zeta")
	if err != nil || in.ID != 251 {
		t.Fatalf("zeta: %+v, %v", in, err)
	}
	if _, err := app.AccountInstallation(context.Background(), "nobody"); !errors.Is(err, github.ErrInstallationRefused) ||
		providerapi.ClassOf(err) != providerapi.Operator {
		t.Fatalf("nobody: %v (class %v)", err, providerapi.ClassOf(err))
	}
	w.noViolations(t)
}

// No error ever holds a token, a JWT or the key.
func TestErrorsHoldNoSecret(t *testing.T) {
	w := newWorld(t)
	w.fake.Install(1, "acme/app")
	app := w.app(t, nil, nil)
	tok, err := app.Token(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, pemKey := appKey()
	keyLine := strings.Split(string(pemKey), "\n")[5]
	var errs []error
	w.fake.Refuse(1, http.StatusForbidden, "")
	app.Forget(1, tok.Value)
	_, err = app.Token(context.Background(), 1)
	errs = append(errs, err)
	w.fake.RevokeKey()
	_, err = app.Info(context.Background())
	errs = append(errs, err)
	_, err = github.NewApp(github.AppConfig{AppID: "1", PrivateKey: []byte(strings.Replace(string(pemKey), keyLine, keyLine[:10], 1))})
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("no error")
		}
		if s := err.Error(); strings.Contains(s, tok.Value) || strings.Contains(s, "eyJ") || strings.Contains(s, keyLine[:10]) {
			t.Errorf("an error holds a secret: %s", s)
		}
	}
}

// The App JWT is RS256 with iss the App id, iat a minute back and exp 9 minutes ahead, and the
// fake accepts it only after checking its signature with the App's public key.
func TestTheJWTCarriesGitHubsClaimsAndTheAppsSignature(t *testing.T) {
	w := newWorld(t)
	app := w.app(t, nil, nil)
	raw, err := app.JWT()
	if err != nil {
		t.Fatal(err)
	}
	var claims jwt.RegisteredClaims
	if _, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return publicKey(), nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(w.clock.Now)); err != nil {
		t.Fatalf("the JWT does not verify with the App's public key: %v", err)
	}
	now := w.clock.Now()
	if claims.Issuer != "4242" || !claims.IssuedAt.Equal(now.Add(-time.Minute)) || !claims.ExpiresAt.Equal(now.Add(9*time.Minute)) {
		t.Fatalf("claims iss %q iat %v exp %v (now %v)", claims.Issuer, claims.IssuedAt, claims.ExpiresAt, now)
	}
	info, err := app.Info(context.Background())
	if err != nil || info.ID != appID || info.Slug != "amiss-test" {
		t.Fatalf("GET /app: %+v, %v", info, err)
	}
	w.noViolations(t)
}

// A JWT signed by a key that is not the App's is refused 401 by the fake, which records it,
// and surfaces as ErrKeyRefused naming every cause an operator can fix.
func TestAJWTSignedByAnotherKeyIsRefused(t *testing.T) {
	w := newWorld(t)
	_, other := otherKey()
	app := w.app(t, other, nil)
	_, err := app.Token(context.Background(), 7)
	if !errors.Is(err, github.ErrKeyRefused) || providerapi.ClassOf(err) != providerapi.Operator {
		t.Fatalf("a foreign key: %v, want ErrKeyRefused, the operator's", err)
	}
	for _, want := range []string{"installation 7", "401", "App id", "private key", "clock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if _, err := app.Info(context.Background()); !errors.Is(err, github.ErrKeyRefused) {
		t.Fatalf("GET /app with a foreign key: %v", err)
	}
	if v := w.fake.Violations(); len(v) != 2 || !strings.Contains(v[0], "signature") {
		t.Fatalf("the fake recorded %q, want two signature refusals", v)
	}
	if providerapi.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("no status in the error: %#v", err)
	}
}

// A revoked key is refused like a foreign one.
func TestARevokedKeyIsRefused(t *testing.T) {
	w := newWorld(t)
	app := w.app(t, nil, nil)
	w.fake.Install(1, "acme/app")
	if _, err := app.Token(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	w.fake.RevokeKey()
	if _, err := app.Info(context.Background()); !errors.Is(err, github.ErrKeyRefused) {
		t.Fatalf("a revoked key: %v", err)
	}
	w.noViolations(t)
}

// A JWT refused with a clock that is off, and no answer to correct it by (a key GitHub does
// not list refuses it whatever its times), names by how much the host's clock is off.
func TestAClockOffByMinutesIsNamedWhenTheKeyIsRefused(t *testing.T) {
	w := newWorld(t)
	w.skew = 10 * time.Minute
	_, other := otherKey()
	_, err := w.app(t, other, nil).Info(context.Background())
	if !errors.Is(err, github.ErrKeyRefused) || !strings.Contains(err.Error(), "this host's clock is 10m0s ahead of GitHub's") {
		t.Fatalf("a clock 10 minutes ahead: %v", err)
	}
}

// The fake refuses, with 401, every JWT GitHub refuses: a JWT the App signed wrong is a
// violation; one refused for its times (a host clock that is off) is counted apart.
func TestTheFakeRefusesTheJWTsGitHubRefuses(t *testing.T) {
	w := newWorld(t)
	key, _ := appKey()
	now := w.clock.Now()
	at := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	for _, c := range []struct {
		name   string
		method jwt.SigningMethod
		claims jwt.RegisteredClaims
		want   string
		clock  bool
	}{
		{"another issuer", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "99", IssuedAt: at(-time.Minute), ExpiresAt: at(9 * time.Minute)}, "'Issuer' claim", false},
		{"no iat", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", ExpiresAt: at(9 * time.Minute)}, "'Issued at' claim", false},
		{"no exp", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute)}, "'Expiration time' claim", false},
		{"over ten minutes", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute), ExpiresAt: at(9*time.Minute + time.Second)}, "too far in the future", false},
		{"iat in the future", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(2 * time.Minute), ExpiresAt: at(9 * time.Minute)}, "in the future", true},
		{"expired", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-10 * time.Minute), ExpiresAt: at(-time.Second)}, "expired", true},
		{"RS512", jwt.SigningMethodRS512, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute), ExpiresAt: at(9 * time.Minute)}, "could not be decoded", false},
	} {
		raw, err := jwt.NewWithClaims(c.method, c.claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		violations, refusals := len(w.fake.Violations()), w.fake.ClockRefusals()
		req, _ := http.NewRequest(http.MethodGet, w.srv.URL+"/app", nil)
		req.Header = github.Header("Bearer " + raw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Message string }
		decodeJSON(resp, &body)
		v := w.fake.Violations()
		switch {
		case resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body.Message, c.want):
			t.Errorf("%s: %d %q, want 401 saying %q", c.name, resp.StatusCode, body.Message, c.want)
		case c.clock && (w.fake.ClockRefusals() != refusals+1 || len(v) != violations):
			t.Errorf("%s: %d clock refusals, violations %q: want it counted as a clock refusal", c.name, w.fake.ClockRefusals()-refusals, v[violations:])
		case !c.clock && len(v) != violations+1:
			t.Errorf("%s: violations %q, want it recorded", c.name, v[violations:])
		}
	}
}

// A shared exchange is no request of one caller's: a caller whose SendBefore bound has passed
// (its host's clock stepped since its grant to post) does not fail the exchange the others
// wait for. The exchange posts nothing to a commit, so no caller's bound holds it back.
func TestACallerPastItsSendBoundLeavesTheSharedExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := githubtest.NewApp(appID, publicKey())
		fake.Install(1, "acme/app")
		_, pemKey := appKey()
		app, err := github.NewApp(github.AppConfig{AppID: "4242", PrivateKey: pemKey, Client: inProcess(fake)})
		if err != nil {
			t.Fatal(err)
		}
		// The late caller's wall clock is read when the exchange it started is about to be
		// sent: held there until the other caller waits for that exchange too.
		bound := time.Now()
		reading := make(chan struct{})
		late := providerapi.SendBefore(context.Background(), bound, func() time.Time { <-reading; return bound.Add(time.Minute) })
		var wg sync.WaitGroup
		wg.Go(func() { app.Token(late, 1) })
		synctest.Wait()
		var other github.InstallationToken
		var otherErr error
		wg.Go(func() { other, otherErr = app.Token(context.Background(), 1) })
		synctest.Wait()
		close(reading)
		wg.Wait()
		if _, ok := fake.Installed(other.Value); otherErr != nil || !ok {
			t.Fatalf("the caller with no bound, waiting for the exchange a caller past its bound started: %v", otherErr)
		}
	})
}
