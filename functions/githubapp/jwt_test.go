package githubapp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/amiss-ci/amiss/functions/githubapp"
)

// The App JWT is RS256 with iss the App id, iat a minute back and exp 9 minutes ahead, and
// the fake accepts it only after checking its signature with the App's public key.
func TestTheJWTCarriesGitHubsClaimsAndTheAppsSignature(t *testing.T) {
	w := newWorld(t)
	tk := w.tokens(t, nil)
	raw, err := tk.JWT()
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
	app, err := tk.App(context.Background())
	if err != nil || app.ID != appID || app.Slug != "amiss-test" {
		t.Fatalf("GET /app: %+v, %v", app, err)
	}
	w.noViolations(t)
}

// A JWT signed by a key that is not the App's is refused 401 by the fake, which records it,
// and surfaces as ErrKeyRefused naming every cause an operator can fix.
func TestAJWTSignedByAnotherKeyIsRefused(t *testing.T) {
	w := newWorld(t)
	_, other := otherKey()
	tk := w.tokens(t, other)
	_, err := tk.Token(context.Background(), 7)
	if !errors.Is(err, githubapp.ErrKeyRefused) || githubapp.Temporary(err) {
		t.Fatalf("a foreign key: %v, want ErrKeyRefused, not temporary", err)
	}
	for _, want := range []string{"installation 7", "401", "App id", "private key", "clock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if _, err := tk.App(context.Background()); !errors.Is(err, githubapp.ErrKeyRefused) {
		t.Fatalf("GET /app with a foreign key: %v", err)
	}
	if v := w.fake.Violations(); len(v) != 2 || !strings.Contains(v[0], "signature") {
		t.Fatalf("the fake recorded %q, want two signature refusals", v)
	}
	var e *githubapp.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Fatalf("not a *githubapp.Error with the status: %#v", err)
	}
}

// A revoked key is refused like a foreign one.
func TestARevokedKeyIsRefused(t *testing.T) {
	w := newWorld(t)
	tk := w.tokens(t, nil)
	w.fake.Install(1, "acme/app")
	if _, err := tk.Token(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	w.fake.RevokeKey()
	if _, err := tk.App(context.Background()); !errors.Is(err, githubapp.ErrKeyRefused) {
		t.Fatalf("a revoked key: %v", err)
	}
	w.noViolations(t)
}

// A host clock off by minutes makes GitHub refuse the JWT; the error says by how much.
func TestAClockOffByMinutesIsNamed(t *testing.T) {
	w := newWorld(t)
	_, pemKey := appKey()
	ahead := func() time.Time { return w.clock.Now().Add(10 * time.Minute) }
	tk, err := githubapp.New(githubapp.Config{BaseURL: w.srv.URL, AppID: "4242", PrivateKey: pemKey, Now: ahead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tk.App(context.Background())
	if !errors.Is(err, githubapp.ErrKeyRefused) || !strings.Contains(err.Error(), "this host's clock is 10m0s ahead of GitHub's") {
		t.Fatalf("a clock 10 minutes ahead: %v", err)
	}
}

// The fake refuses, with 401, every JWT GitHub refuses, and records why.
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
	}{
		{"another issuer", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "99", IssuedAt: at(-time.Minute), ExpiresAt: at(9 * time.Minute)}, "'Issuer' claim"},
		{"no iat", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", ExpiresAt: at(9 * time.Minute)}, "'Issued at' claim"},
		{"no exp", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute)}, "'Expiration time' claim"},
		{"over ten minutes", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute), ExpiresAt: at(9*time.Minute + time.Second)}, "too far in the future"},
		{"iat in the future", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(2 * time.Minute), ExpiresAt: at(9 * time.Minute)}, "in the future"},
		{"expired", jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-10 * time.Minute), ExpiresAt: at(-time.Second)}, "expired"},
		{"RS512", jwt.SigningMethodRS512, jwt.RegisteredClaims{Issuer: "4242", IssuedAt: at(-time.Minute), ExpiresAt: at(9 * time.Minute)}, "could not be decoded"},
	} {
		raw, err := jwt.NewWithClaims(c.method, c.claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		before := len(w.fake.Violations())
		req, _ := http.NewRequest(http.MethodGet, w.srv.URL+"/app", nil)
		req.Header.Set("Authorization", "Bearer "+raw)
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		v := w.fake.Violations()
		if resp.StatusCode != http.StatusUnauthorized || len(v) != before+1 || !strings.Contains(v[len(v)-1], c.want) {
			t.Errorf("%s: %d, violations %q, want 401 recorded as %q", c.name, resp.StatusCode, v[before:], c.want)
		}
	}
}
