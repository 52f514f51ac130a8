package github

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// RefreshMargin is how long before its expiry a cached installation token is replaced: a
// token is never handed out with less than this left (GitHub's tokens live an hour), so a
// request made with it does not meet its expiry midway. A token issued with less than twice
// this lifetime is replaced once half its lifetime has passed.
const RefreshMargin = 5 * time.Minute

// The App JWT's times: issued a minute in the past, for clock drift between this host and
// GitHub, and expiring 9 minutes from now (GitHub refuses an exp more than 10 minutes after
// iat, and after its own now), both on this host's clock corrected by the offset GitHub's Date
// taught (see App.JWT).
const (
	JWTBackdate = 60 * time.Second
	JWTLifetime = 9 * time.Minute
)

// exchangeTimeout bounds one token exchange that callers share, whatever their contexts, and
// is the App client's request timeout when the configuration names no client.
const exchangeTimeout = 30 * time.Second

// The refusals a caller tells apart with errors.Is.
var (
	// ErrInstallationRefused: GitHub refused the installation (404 or 403 on the token
	// exchange or the installation lookup): the App is not installed there (or no longer),
	// the installation is suspended, or it lacks a permission. Retrying does not help until
	// someone with access to the account changes the installation.
	ErrInstallationRefused = errors.New("installation refused")
	// ErrKeyRefused: GitHub refused the App's JWT (401): the App id is wrong, the private key
	// is revoked or belongs to another App, or this host's clock is off by minutes and GitHub
	// sent no Date to correct it by.
	ErrKeyRefused = errors.New("App JWT refused")
)

// AppConfig names an App and where it authenticates.
type AppConfig struct {
	// BaseURL is https://api.github.com (the default when empty) or a GitHub Enterprise
	// Server's API base, https://HOST/api/v3.
	BaseURL string
	// AppID is the App's id or its client id (GitHub accepts either as the JWT's iss).
	AppID string
	// PrivateKey is one of the App's private keys: PEM, PKCS#1 ("RSA PRIVATE KEY", as GitHub
	// downloads it) or PKCS#8.
	PrivateKey []byte
	// Client sends the requests to the App endpoints; nil: one with a 30 s timeout.
	Client *http.Client
	// Now is this host's clock; nil: time.Now.
	Now func() time.Time
	// Cache keeps the installation tokens and the clock offset; nil: a cache of this App's
	// own. Apps made with the same App id and base URL and one cache share their tokens,
	// whichever of the App's keys each signs with.
	Cache *TokenCache
}

// App authenticates as one GitHub App with one of its keys: it signs the App's JWTs and
// exchanges them for installation tokens, which it caches (see TokenCache). It is safe for
// concurrent use, and implements InstallationTokens.
type App struct {
	base   string
	appID  string
	key    *rsa.PrivateKey
	keyID  [32]byte
	now    func() time.Time
	cache  *TokenCache
	client *Client
}

// TokenCache keeps installation tokens per App (its id), base URL and installation, until
// shortly before they expire, with the exchanges in flight, and the offset between this host's
// clock and each base URL's. One cache serves every App of a process: two routes with two keys
// of one App share one token per installation. It is safe for concurrent use.
type TokenCache struct {
	mu      sync.Mutex
	tokens  map[tokenKey]cached
	flights map[tokenKey]*flight
	offsets map[string]time.Duration
}

// NewTokenCache returns an empty cache.
func NewTokenCache() *TokenCache {
	return &TokenCache{tokens: map[tokenKey]cached{}, flights: map[tokenKey]*flight{}, offsets: map[string]time.Duration{}}
}

type tokenKey struct {
	base, app    string
	installation int64
}

// cached is an installation token, when it was issued and when it stops being handed out
// (both on this host's clock).
type cached struct {
	token   InstallationToken
	refresh time.Time
}

// flight is one exchange in progress; the callers for its installation wait for it. keyID
// names the key that signs its JWT.
type flight struct {
	done  chan struct{}
	keyID [32]byte
	tok   cached
	err   error
}

// NewApp checks the configuration and parses the key. The error names what is wrong and never
// holds the key.
func NewApp(cfg AppConfig) (*App, error) {
	if strings.TrimSpace(cfg.AppID) == "" {
		return nil, errors.New("githubapp: no App id")
	}
	key, err := ParsePrivateKey(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("githubapp: App %s: %w", cfg.AppID, err)
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Timeout: exchangeTimeout}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	cache := cfg.Cache
	if cache == nil {
		cache = NewTokenCache()
	}
	a := &App{appID: strings.TrimSpace(cfg.AppID), key: key, keyID: sha256.Sum256(x509.MarshalPKCS1PublicKey(&key.PublicKey)),
		now: now, cache: cache}
	a.client = newClient(cfg.BaseURL, hc)
	a.client.app, a.client.Now, a.client.MaxAttempts = a, now, 1 // the caller retries an exchange
	a.base = a.client.BaseURL
	return a, nil
}

// JWT returns a freshly signed App JWT (RS256): iss the App id, iat a minute ago and exp 9
// minutes ahead, on this host's clock plus the offset GitHub's Date taught after a JWT was
// refused for its times.
func (a *App) JWT() (string, error) {
	a.cache.mu.Lock()
	now := a.now().Add(a.cache.offsets[a.base])
	a.cache.mu.Unlock()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer:    a.appID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-JWTBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(JWTLifetime)),
	}).SignedString(a.key)
	if err != nil {
		return "", fmt.Errorf("githubapp: sign the App JWT: %w", err)
	}
	return s, nil
}

// reclock learns the offset of GitHub's clock from err, GitHub's 401 to a JWT, when GitHub
// refused the JWT for its times (the messages @octokit/auth-app recognises) and sent its Date;
// hostNow is this host's time at the answer. It reports whether a JWT signed again may be
// taken.
func (a *App) reclock(err error, hostNow time.Time) bool {
	var pe *providerapi.Error
	if !errors.As(err, &pe) || pe.At.IsZero() || !timeClaimRefused(pe.Message) {
		return false
	}
	a.cache.mu.Lock()
	a.cache.offsets[a.base] = pe.At.Sub(hostNow)
	a.cache.mu.Unlock()
	return true
}

// timeClaimRefused reports whether GitHub's message refuses a JWT's iat or exp.
func timeClaimRefused(msg string) bool {
	return strings.Contains(msg, "'Issued at' claim ('iat')") || strings.Contains(msg, "'Expiration time' claim ('exp')")
}

// Clock returns the offset between GitHub's clock and this host's that the App's JWTs are
// signed with (zero until a JWT was refused for its times).
func (a *App) Clock() time.Duration {
	a.cache.mu.Lock()
	defer a.cache.mu.Unlock()
	return a.cache.offsets[a.base]
}

// Token returns an installation token for the installation: the cached one while it has more
// than RefreshMargin left, otherwise a new one, exchanged for a fresh JWT at POST
// {base}/app/installations/{installation}/access_tokens. Concurrent callers for one
// installation share one exchange, whichever key each App signs with; each stops waiting when
// its own ctx ends, without cancelling the exchange for the others, and no caller's
// providerapi.SendBefore bound holds the exchange back. An exchange that failed
// with another key's JWT is tried once with this App's own. A failed exchange is not cached.
func (a *App) Token(ctx context.Context, installation int64) (InstallationToken, error) {
	if installation <= 0 {
		return InstallationToken{}, fmt.Errorf("githubapp: installation id %d: want the positive id of the webhook's installation.id", installation)
	}
	k := tokenKey{base: a.base, app: a.appID, installation: installation}
	for tried := false; ; tried = true {
		c := a.cache
		c.mu.Lock()
		if t, ok := c.tokens[k]; ok && a.now().Before(t.refresh) {
			c.mu.Unlock()
			return t.token, nil
		}
		f, ok := c.flights[k]
		if !ok {
			f = &flight{done: make(chan struct{}), keyID: a.keyID}
			c.flights[k] = f
			// The exchange is every waiting caller's: neither the end of the starter's ctx
			// nor its bound on sending (it posts nothing to a commit) stops it.
			go a.exchange(providerapi.WithoutSendBefore(context.WithoutCancel(ctx)), k, f)
		}
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return InstallationToken{}, fmt.Errorf("githubapp: waiting for a token for installation %d: %w", installation, context.Cause(ctx))
		}
		if f.err == nil || f.keyID == a.keyID || tried {
			return f.tok.token, f.err
		}
	}
}

// exchange runs one flight and publishes its outcome.
func (a *App) exchange(ctx context.Context, k tokenKey, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	f.tok, f.err = a.newToken(ctx, k.installation)
	c := a.cache
	c.mu.Lock()
	if f.err == nil {
		c.tokens[k] = f.tok
	}
	delete(c.flights, k)
	c.mu.Unlock()
	close(f.done)
}

// Forget drops token from the cache if it is still the one cached for the installation (an
// API answered 401 to it: revoked, or expired early); the next Token exchanges again. A token
// that was already replaced is left alone, so that callers holding an old token do not throw
// away a new one.
func (a *App) Forget(installation int64, token string) {
	k := tokenKey{base: a.base, app: a.appID, installation: installation}
	a.cache.mu.Lock()
	defer a.cache.mu.Unlock()
	if t, ok := a.cache.tokens[k]; ok && t.token.Value == token {
		delete(a.cache.tokens, k)
	}
}

// accessToken is apps/create-installation-access-token's answer (schema installation-token:
// token and expires_at required).
type accessToken struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expires_at"`
}

// newToken exchanges a fresh JWT for an installation token.
func (a *App) newToken(ctx context.Context, installation int64) (cached, error) {
	op := fmt.Sprintf("create an installation token for installation %d", installation)
	ans, err := a.client.Do(ctx, 0, providerapi.Request{Method: http.MethodPost, URL: fmt.Sprintf("/app/installations/%d/access_tokens", installation)})
	if err != nil {
		return cached{}, a.fail(op, fmt.Sprintf("installation %d", installation), err)
	}
	var at accessToken
	if err := ans.Decode("the installation token", &at); err != nil || at.Token == "" {
		return cached{}, &AppError{Op: op, Hint: "the answer holds no token", Err: &providerapi.Error{Class: providerapi.Transient, Status: ans.Status,
			Err: errors.New("no token in the answer")}}
	}
	expires, err := time.Parse(time.RFC3339, at.ExpiresAt)
	if err != nil {
		return cached{}, &AppError{Op: op, Hint: "the answer's expires_at is not a time", Err: &providerapi.Error{Class: providerapi.Transient,
			Status: ans.Status, Err: err}}
	}
	// The token's lifetime by GitHub's own clock (its Date), counted from this host's now: a
	// host clock that is off does not make a token look fresher than it is.
	now := a.now()
	life := expires.Sub(ans.Now)
	if life <= 0 {
		return cached{}, &AppError{Op: op, Hint: "GitHub issued a token that has already expired", Err: &providerapi.Error{Class: providerapi.Transient,
			Status: ans.Status, Err: errors.New("expired on issue")}}
	}
	return cached{token: InstallationToken{Value: at.Token, Issued: now}, refresh: now.Add(life - min(RefreshMargin, life/2))}, nil
}

// AppError is a request to GitHub's App endpoints that failed: what was asked, what an
// operator does about it, and the classified failure (errors.As finds its *providerapi.Error,
// errors.Is its Kind). It never holds a token, a JWT or the key.
type AppError struct {
	// Op says what was asked, for example "create an installation token for installation 42".
	Op string
	// Kind is ErrInstallationRefused, ErrKeyRefused or nil.
	Kind error
	// Hint says what to do.
	Hint string
	// Err is the *providerapi.Error of the request.
	Err error
}

func (e *AppError) Error() string {
	var b strings.Builder
	b.WriteString("githubapp: ")
	b.WriteString(e.Op)
	var pe *providerapi.Error
	switch {
	case errors.As(e.Err, &pe) && pe.Status != 0 && pe.Status/100 != 2:
		fmt.Fprintf(&b, ": GitHub answered %d", pe.Status)
		if pe.Message != "" {
			fmt.Fprintf(&b, " %q", pe.Message)
		}
	case e.Kind != nil: // the kind and the hint say it
	case pe != nil:
		fmt.Fprintf(&b, ": %v", pe.Err)
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Kind != nil {
		fmt.Fprintf(&b, " (%v)", e.Kind)
	}
	if e.Hint != "" {
		b.WriteString(": ")
		b.WriteString(e.Hint)
	}
	if pe != nil && pe.Class == providerapi.Transient {
		b.WriteString(" (temporary")
		if d := pe.RetryAfter; d > 0 {
			fmt.Fprintf(&b, ", retry after %s", d)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As the kind and the failure.
func (e *AppError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// keyHint is the remedy of a refused JWT.
const keyHint = "check the App id (publish.app.id: the App's id or client id, on its settings page), " +
	"that the private key is a current key of that App (a revoked or deleted key is refused; generate a new one), " +
	"and that this host's clock is right (GitHub refuses a JWT whose times are off by more than a minute or so)"

// fail makes an AppError of err, the failure of op about what ("installation 42", "installation
// on acme/app", or "" for no installation): a 401 is the key's, a 404 or 403 that is no rate
// limit the installation's, a redirect the base URL's.
func (a *App) fail(op, what string, err error) error {
	e := &AppError{Op: op, Err: err}
	var pe *providerapi.Error
	if !errors.As(err, &pe) {
		return e
	}
	switch code := pe.Status; {
	case code == http.StatusUnauthorized:
		e.Kind, e.Hint = ErrKeyRefused, keyHint
		if !pe.At.IsZero() {
			if d := pe.At.Sub(a.now().Add(a.Clock())); d.Abs() > time.Minute {
				e.Hint += fmt.Sprintf("; this host's clock is %s %s GitHub's", d.Abs().Round(time.Second),
					map[bool]string{true: "behind", false: "ahead of"}[d > 0])
			}
		}
	case what != "" && pe.Class == providerapi.Operator && (code == http.StatusNotFound || code == http.StatusForbidden):
		e.Kind, e.Hint = ErrInstallationRefused, installationHint(code, what)
	case pe.Class == providerapi.Transient && (code == http.StatusForbidden || code == http.StatusTooManyRequests):
		e.Hint = "GitHub's rate limit"
	}
	return e
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

// AppInfo is what GitHub says of the authenticated App (apps/get-authenticated, schema
// integration).
type AppInfo struct {
	ID          int64             `json:"id"`
	Slug        string            `json:"slug"`
	Name        string            `json:"name"`
	Permissions map[string]string `json:"permissions"`
	Events      []string          `json:"events"`
}

// Info asks GitHub which App the JWT authenticates as: GET {base}/app. It proves the App id
// and the key (a refusal is ErrKeyRefused).
func (a *App) Info(ctx context.Context) (AppInfo, error) {
	const op = "get the authenticated App"
	ans, err := a.client.Do(ctx, 0, providerapi.Request{Method: http.MethodGet, URL: "/app"})
	if err != nil {
		e := a.fail(op, "", err)
		if providerapi.StatusOf(err) == http.StatusNotFound {
			e.(*AppError).Hint = "no App API at this base URL: check publish.base_url (https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise Server)"
		}
		return AppInfo{}, e
	}
	var info AppInfo
	if err := ans.Decode("the App", &info); err != nil || info.ID == 0 {
		return AppInfo{}, &AppError{Op: op, Hint: "the answer is not an App", Err: &providerapi.Error{Class: providerapi.Transient,
			Status: ans.Status, Err: errors.New("not an App")}}
	}
	return info, nil
}

// Installation is an installation of the App (schema installation).
type Installation struct {
	ID      int64 `json:"id"`
	Account struct {
		Login string `json:"login"`
	} `json:"account"`
	Permissions         map[string]string `json:"permissions"`
	RepositorySelection string            `json:"repository_selection"`
	SuspendedAt         *time.Time        `json:"suspended_at"`
}

// Installation finds the App's installation on a repository: GET
// {base}/repos/{owner}/{repo}/installation (apps/get-repo-installation). The App not being
// installed there is ErrInstallationRefused.
func (a *App) Installation(ctx context.Context, owner, repo string) (Installation, error) {
	op := fmt.Sprintf("find the installation on %s/%s", owner, repo)
	ans, err := a.client.Do(ctx, 0, providerapi.Request{Method: http.MethodGet,
		URL: fmt.Sprintf("/repos/%s/%s/installation", url.PathEscape(owner), url.PathEscape(repo))})
	if err != nil {
		return Installation{}, a.fail(op, "installation on "+owner+"/"+repo, err)
	}
	var in Installation
	if err := ans.Decode("the installation", &in); err != nil || in.ID == 0 {
		return Installation{}, &AppError{Op: op, Hint: "the answer is not an installation", Err: &providerapi.Error{Class: providerapi.Transient,
			Status: ans.Status, Err: errors.New("not an installation")}}
	}
	return in, nil
}

// notInstalled is the failure of a search for an installation that found none.
var notInstalled = &providerapi.Error{Class: providerapi.Operator, Err: errors.New("no installation found")}

// maxInstallationPages bounds AccountInstallation's listing: 10 pages of 100 installations.
const maxInstallationPages = 10

// AccountInstallation finds the App's installation on an account (a user or an organization,
// for a route that names owner/*) by listing the App's installations: GET
// {base}/app/installations (apps/list-installations), 100 a page by its Link header, at most
// maxInstallationPages pages. No installation on the account is ErrInstallationRefused.
func (a *App) AccountInstallation(ctx context.Context, account string) (Installation, error) {
	op := "find the installation on the account " + account
	var found *Installation
	pages := 0
	var beyond bool
	err := a.client.Pages(ctx, 0, providerapi.Request{Method: http.MethodGet, URL: "/app/installations?per_page=100"}, maxInstallationPages+1,
		func(ans *providerapi.Answer) (bool, error) {
			pages++
			var ins []Installation
			if err := ans.Decode("the App's installations", &ins); err != nil {
				return false, err
			}
			for i := range ins {
				if strings.EqualFold(ins[i].Account.Login, account) && ins[i].ID != 0 {
					found = &ins[i]
					return false, nil
				}
			}
			if next, _ := providerapi.NextLink(ans.Header); next != "" && pages == maxInstallationPages {
				beyond = true
				return false, nil
			}
			return true, nil
		})
	switch {
	case err != nil:
		return Installation{}, a.fail(op, "", err)
	case found != nil:
		return *found, nil
	case beyond:
		return Installation{}, &AppError{Op: op, Kind: ErrInstallationRefused, Err: notInstalled,
			Hint: fmt.Sprintf("not among the App's first %d installations: name one of the account's repositories instead of %s/*",
				maxInstallationPages*100, account)}
	}
	return Installation{}, &AppError{Op: op, Kind: ErrInstallationRefused, Err: notInstalled,
		Hint: "the App is not installed on the account " + account + ": install it there (the App's page, Install App)"}
}
