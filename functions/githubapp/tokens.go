// Package githubapp authenticates amiss as a GitHub App: it signs the App's JWT with the App's
// private key and exchanges it for installation tokens, which it caches per installation
// until shortly before they expire. It works against api.github.com and GitHub Enterprise
// Server (a base URL such as https://ghe.example/api/v3).
//
// Neither a token, a JWT nor the key ever appears in an error or a log line.
package githubapp

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultBaseURL is GitHub's API.
const DefaultBaseURL = "https://api.github.com"

// RefreshMargin is how long before its expiry a cached installation token is replaced: a
// token is never handed out with less than this left (GitHub's tokens live an hour), so a
// request made with it does not meet its expiry midway. A token issued with less than twice
// this lifetime is replaced once half its lifetime has passed.
const RefreshMargin = 5 * time.Minute

// The App JWT's times: issued a minute in the past, for clock drift between this host and
// GitHub, and expiring 9 minutes from now (GitHub refuses an exp more than 10 minutes after
// iat... and after its own now).
const (
	JWTBackdate = 60 * time.Second
	JWTLifetime = 9 * time.Minute
)

// exchangeTimeout bounds one token exchange that callers share, whatever their contexts.
const exchangeTimeout = 30 * time.Second

// maxAnswer bounds how much of an answer is read.
const maxAnswer = 1 << 20

// Config names an App and where it authenticates.
type Config struct {
	// BaseURL is https://api.github.com (the default when empty) or a GitHub Enterprise
	// Server's API base, https://HOST/api/v3.
	BaseURL string
	// AppID is the App's id or its client id (GitHub accepts either as the JWT's iss).
	AppID string
	// PrivateKey is the App's private key: PEM, PKCS#1 ("RSA PRIVATE KEY", as GitHub
	// downloads it) or PKCS#8.
	PrivateKey []byte
	// Client sends the requests; nil: a client with a 30 s timeout that follows no redirect.
	Client *http.Client
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Tokens hands out installation tokens of one App. It is safe for concurrent use.
type Tokens struct {
	base  string
	appID string
	key   *rsa.PrivateKey
	hc    *http.Client
	now   func() time.Time

	mu      sync.Mutex
	cache   map[int64]cached
	flights map[int64]*flight
}

// cached is an installation token and when it stops being handed out (on this host's clock).
type cached struct {
	token   string
	refresh time.Time
}

// flight is one exchange in progress; the callers for its installation wait for it.
type flight struct {
	done chan struct{}
	tok  cached
	err  error
}

// New checks the configuration and parses the key. The error names what is wrong and never
// holds the key.
func New(cfg Config) (*Tokens, error) {
	if strings.TrimSpace(cfg.AppID) == "" {
		return nil, errors.New("githubapp: no App id")
	}
	key, err := ParsePrivateKey(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("githubapp: App %s: %w", cfg.AppID, err)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Timeout: exchangeTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Tokens{base: base, appID: strings.TrimSpace(cfg.AppID), key: key, hc: hc, now: now,
		cache: map[int64]cached{}, flights: map[int64]*flight{}}, nil
}

// JWT returns a freshly signed App JWT (RS256): iss the App id, iat a minute ago (clock
// drift), exp 9 minutes from now (GitHub refuses more than 10).
func (t *Tokens) JWT() (string, error) {
	now := t.now()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer:    t.appID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-JWTBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(JWTLifetime)),
	}).SignedString(t.key)
	if err != nil {
		return "", fmt.Errorf("githubapp: sign the App JWT: %w", err)
	}
	return s, nil
}

// Token returns an installation token for the installation: the cached one while it has
// more than RefreshMargin (5 minutes) left, otherwise a new one, exchanged for a fresh JWT at POST
// {base}/app/installations/{installation}/access_tokens. Concurrent callers for one
// installation share one exchange; each stops waiting when its own ctx ends, without
// cancelling the exchange for the others. A failed exchange is not cached: the next call
// tries again.
func (t *Tokens) Token(ctx context.Context, installation int64) (string, error) {
	if installation <= 0 {
		return "", fmt.Errorf("githubapp: installation id %d: want the positive id of the webhook's installation.id", installation)
	}
	t.mu.Lock()
	if c, ok := t.cache[installation]; ok && t.now().Before(c.refresh) {
		t.mu.Unlock()
		return c.token, nil
	}
	f, ok := t.flights[installation]
	if !ok {
		f = &flight{done: make(chan struct{})}
		t.flights[installation] = f
		go t.exchange(context.WithoutCancel(ctx), installation, f)
	}
	t.mu.Unlock()
	select {
	case <-f.done:
		return f.tok.token, f.err
	case <-ctx.Done():
		return "", fmt.Errorf("githubapp: waiting for a token for installation %d: %w", installation, context.Cause(ctx))
	}
}

// exchange runs one flight and publishes its outcome.
func (t *Tokens) exchange(ctx context.Context, installation int64, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	f.tok, f.err = t.newToken(ctx, installation)
	t.mu.Lock()
	if f.err == nil {
		t.cache[installation] = f.tok
	}
	delete(t.flights, installation)
	t.mu.Unlock()
	close(f.done)
}

// Forget drops token from the cache if it is still the one cached for the installation (an
// API answered 401 to it: revoked, or expired early); the next Token exchanges again. A
// token that was already replaced is left alone, so that callers holding an old token do not
// throw away a new one.
func (t *Tokens) Forget(installation int64, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cache[installation]; ok && c.token == token {
		delete(t.cache, installation)
	}
}

// accessToken is apps/create-installation-access-token's answer (schema installation-token:
// token and expires_at required).
type accessToken struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expires_at"`
}

// newToken exchanges a fresh JWT for an installation token.
func (t *Tokens) newToken(ctx context.Context, installation int64) (cached, error) {
	op := fmt.Sprintf("create an installation token for installation %d", installation)
	resp, body, err := t.appRequest(ctx, op, http.MethodPost, fmt.Sprintf("/app/installations/%d/access_tokens", installation))
	if err != nil {
		return cached{}, err
	}
	if resp.StatusCode != http.StatusCreated {
		e := classify(op, resp, body, t.now())
		if e.Kind == nil && !e.Retryable && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden) {
			e.Kind = ErrInstallationRefused
			e.Hint = installationHint(resp.StatusCode, fmt.Sprintf("installation %d", installation))
		}
		return cached{}, e
	}
	var at accessToken
	if err := json.Unmarshal(body, &at); err != nil || at.Token == "" {
		return cached{}, &Error{Op: op, Status: resp.StatusCode, Retryable: true, Hint: "the answer holds no token"}
	}
	expires, err := time.Parse(time.RFC3339, at.ExpiresAt)
	if err != nil {
		return cached{}, &Error{Op: op, Status: resp.StatusCode, Retryable: true, Hint: "the answer's expires_at is not a time"}
	}
	// The token's lifetime by GitHub's own clock (its Date header), counted from this host's
	// now: a host clock that is off does not make a token look fresher than it is.
	now := t.now()
	issued := now
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		issued = d
	}
	life := expires.Sub(issued)
	if life <= 0 {
		return cached{}, &Error{Op: op, Status: resp.StatusCode, Retryable: true, Hint: "GitHub issued a token that has already expired"}
	}
	return cached{token: at.Token, refresh: now.Add(life - min(RefreshMargin, life/2))}, nil
}

// installationHint says what a 404 or 403 about an installation means; what names it
// ("installation 42", "installation on acme/app").
func installationHint(status int, what string) string {
	if status == http.StatusNotFound {
		return "the App has no " + what + " (never installed, uninstalled, or the App id names another App): " +
			"install the App on the repository (the App's page, Install App)"
	}
	return "GitHub refuses the " + what + ": the installation is suspended, or lacks a permission this needs (see GitHub's message): " +
		"an owner of the account unsuspends it or accepts the App's permissions (Settings, GitHub Apps)"
}

// appRequest sends a request authenticated with a fresh App JWT and reads the answer.
func (t *Tokens) appRequest(ctx context.Context, op, method, path string) (*http.Response, []byte, error) {
	jwtString, err := t.JWT()
	if err != nil {
		return nil, nil, err
	}
	return t.request(ctx, op, method, path, "Bearer "+jwtString)
}

// request sends one request to the API with the headers GitHub asks for, and reads at most
// maxAnswer bytes of the answer.
func (t *Tokens) request(ctx context.Context, op, method, path, auth string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, nil)
	if err != nil {
		return nil, nil, &Error{Op: op, Err: err, Hint: "check publish.base_url"}
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("githubapp: %s: %w", op, ctx.Err())
		}
		return nil, nil, &Error{Op: op, Err: err, Retryable: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, &Error{Op: op, Status: resp.StatusCode, Err: err, Retryable: true}
	}
	return resp, body, nil
}

// message is GitHub's error message in body, cut to maxMessage characters.
func message(body []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s := m.Message
	if utf8.RuneCountInString(s) > maxMessage {
		s = string([]rune(s)[:maxMessage]) + "..."
	}
	return s
}
