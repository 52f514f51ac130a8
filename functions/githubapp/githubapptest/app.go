// Package githubapptest fakes GitHub's App endpoints for tests, as GitHub's OpenAPI
// description (api.github.com, 2022-11-28) gives them, and verifies every App JWT the way
// GitHub does: RS256 signed by the App's key, iss the App's id (or client id), iat and exp
// present, exp at most 10 minutes after iat, iat not more than a minute in the future, not
// expired. Every request is checked against the description itself (internal/githubspec:
// its path, parameters and body), and against what it says in prose (the headers, the JWT).
// Every request that breaks it is answered as GitHub would (401, 404, 415, 422) and
// recorded: a test asserts Violations() is empty.
//
// It serves:
//   - GET / (meta/root): 200, no authentication.
//   - GET /app (apps/get-authenticated): the App (schema integration), for a JWT.
//   - POST /app/installations/{installation_id}/access_tokens
//     (apps/create-installation-access-token), for a JWT: an optional JSON body of
//     repositories (names), repository_ids (integers) and permissions (app-permissions:
//     name to read or write), answered 201 with token, expires_at, permissions and
//     repository_selection (schema installation-token); 404 for an installation the App does
//     not have, 403 for a suspended one.
//   - GET /repos/{owner}/{repo}/installation (apps/get-repo-installation), for a JWT: the
//     installation (schema installation), 404 when the App is not installed there.
//   - GET /app/installations (apps/list-installations), for a JWT: the installations, paged
//     by per_page (at most 100) and page.
//
// Every request must accept application/vnd.github+json and ask for API version 2022-11-28
// (X-GitHub-Api-Version), as amiss's GitHub clients do.
package githubapptest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/amiss-ci/amiss/internal/githubspec"
)

// GitHub's limits on an App JWT.
const (
	MaxJWTLifetime = 10 * time.Minute
	MaxJWTSkew     = 60 * time.Second
)

// DefaultLifetime is how long an installation token lives on GitHub.
const DefaultLifetime = time.Hour

// maxRepositories is how many repositories a token request may name.
const maxRepositories = 500

// App fakes one GitHub App and GitHub's endpoints for it. Set its fields before serving.
type App struct {
	ID       int64
	ClientID string // also accepted as the JWT's iss, when set
	Slug     string
	Name     string
	// Key is the App's public key: JWTs are verified with it.
	Key *rsa.PublicKey
	// Permissions are the App's, and every installation's (default: checks and statuses
	// write, pull_requests, contents and metadata read).
	Permissions map[string]string
	// Lifetime is an installation token's lifetime (default DefaultLifetime).
	Lifetime time.Duration
	// Now is GitHub's clock (default time.Now).
	Now func() time.Time
	// Prefix is the API's path prefix: "" for api.github.com, "/api/v3" for GitHub
	// Enterprise Server. A request outside it is a violation.
	Prefix string

	mu            sync.Mutex
	installations map[int64]*installation
	tokens        map[string]issued
	revoked       bool
	failures      []int
	violations    []string
}

type installation struct {
	id       int64
	account  string
	repos    []string // owner/name, as installed
	refusal  int      // 403 (suspended) or 404 (gone); 0: none
	message  string
	requests int
}

type issued struct {
	installation int64
	expires      time.Time
}

// New returns a fake of the App id whose public key is key.
func New(id int64, key *rsa.PublicKey) *App {
	githubspec.Load() // its error is every request's (ServeHTTP)
	return &App{ID: id, Key: key, Slug: "amiss-test", Name: "amiss test"}
}

func (a *App) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *App) lifetime() time.Duration {
	if a.Lifetime > 0 {
		return a.Lifetime
	}
	return DefaultLifetime
}

func (a *App) permissions() map[string]string {
	if a.Permissions != nil {
		return a.Permissions
	}
	return map[string]string{"checks": "write", "statuses": "write", "pull_requests": "read", "contents": "read", "metadata": "read"}
}

// Install installs the App on repositories (owner/name) as the installation id; the
// account is the first repository's owner. Installing again adds repositories.
func (a *App) Install(id int64, repos ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.installations == nil {
		a.installations = map[int64]*installation{}
	}
	in, ok := a.installations[id]
	if !ok {
		in = &installation{id: id}
		a.installations[id] = in
	}
	for _, r := range repos {
		if in.account == "" {
			in.account, _, _ = strings.Cut(r, "/")
		}
		in.repos = append(in.repos, r)
	}
}

// Refuse makes GitHub refuse the installation from now on: 404 (uninstalled: it is gone
// from its repositories too) or 403 (suspended, or lacking a permission: its repositories
// still name it) with message (a default when empty).
func (a *App) Refuse(id int64, status int, message string) {
	if message == "" {
		message = map[int]string{http.StatusNotFound: "Not Found", http.StatusForbidden: "This installation has been suspended"}[status]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if in, ok := a.installations[id]; ok {
		in.refusal, in.message = status, message
		return
	}
	if a.installations == nil {
		a.installations = map[int64]*installation{}
	}
	a.installations[id] = &installation{id: id, refusal: status, message: message}
}

// RevokeKey makes GitHub refuse every JWT from now on (401), as when the App's key is
// deleted. Those refusals are not violations: the client did as it should.
func (a *App) RevokeKey() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked = true
}

// FailNext answers the next n requests that need a JWT with status (a 5xx, 429...), before
// looking at them.
func (a *App) FailNext(n, status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range n {
		a.failures = append(a.failures, status)
	}
}

// Authorize reports the installation an installation token was issued for; ok is false for
// a token GitHub never issued or one that has expired.
func (a *App) Authorize(token string) (installation int64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, found := a.tokens[token]
	if !found || !a.now().Before(t.expires) {
		return 0, false
	}
	return t.installation, true
}

// Exchanges counts the token requests for the installation that carried a valid JWT.
func (a *App) Exchanges(id int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if in, ok := a.installations[id]; ok {
		return in.requests
	}
	return 0
}

// Violations lists the requests that broke GitHub's rules, in order.
func (a *App) Violations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.violations...)
}

// violate records a violation and answers it as GitHub would.
func (a *App) violate(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.mu.Lock()
	a.violations = append(a.violations, msg)
	a.mu.Unlock()
	a.answer(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func (a *App) answer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Date", a.now().UTC().Format(http.TimeFormat))
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// ServeHTTP implements http.Handler.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, a.Prefix)
	if !ok || (path != "" && !strings.HasPrefix(path, "/")) {
		a.violate(w, http.StatusNotFound, "Not Found: %s is outside the API's prefix %q", r.URL.Path, a.Prefix)
		return
	}
	if path == "" || path == "/" {
		if r.Method == http.MethodGet {
			a.answer(w, http.StatusOK, map[string]string{"current_user_url": "https://api.github.com/user"})
			return
		}
	}
	if v := r.Header.Get("Accept"); v != "application/vnd.github+json" {
		a.violate(w, http.StatusUnsupportedMediaType, "Accept %q, want application/vnd.github+json", v)
		return
	}
	if v := r.Header.Get("X-GitHub-Api-Version"); v != "2022-11-28" {
		a.violate(w, http.StatusBadRequest, "X-GitHub-Api-Version %q, want 2022-11-28", v)
		return
	}
	// GitHub's published OpenAPI description decides what a request may carry.
	if op, err := githubspec.Check(r, a.Prefix); err != nil {
		status := http.StatusUnprocessableEntity
		if op == "" {
			status = http.StatusNotFound
		}
		a.violate(w, status, "%v", err)
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var serve func(http.ResponseWriter, *http.Request, []string)
	switch {
	case r.Method == http.MethodGet && len(parts) == 1 && parts[0] == "app":
		serve = a.getApp
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "app" && parts[1] == "installations" && parts[3] == "access_tokens":
		serve = a.createToken
	case r.Method == http.MethodGet && len(parts) == 4 && parts[0] == "repos" && parts[3] == "installation":
		serve = a.repoInstallation
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "app" && parts[1] == "installations":
		serve = a.listInstallations
	default:
		a.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
		return
	}
	if !a.verifyJWT(w, r) {
		return
	}
	a.mu.Lock()
	var fail int
	if len(a.failures) > 0 {
		fail, a.failures = a.failures[0], a.failures[1:]
	}
	a.mu.Unlock()
	if fail != 0 {
		a.answer(w, fail, map[string]string{"message": http.StatusText(fail)})
		return
	}
	serve(w, r, parts)
}

// verifyJWT checks the request's App JWT as GitHub does; it answers 401 and returns false
// when it is refused.
func (a *App) verifyJWT(w http.ResponseWriter, r *http.Request) bool {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		a.violate(w, http.StatusUnauthorized, "A JSON web token could not be decoded: Authorization is not a Bearer JWT")
		return false
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return a.Key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}), jwt.WithoutClaimsValidation())
	if err != nil {
		a.violate(w, http.StatusUnauthorized, "A JSON web token could not be decoded: %v", err)
		return false
	}
	now := a.now()
	switch {
	case claims.Issuer != strconv.FormatInt(a.ID, 10) && (a.ClientID == "" || claims.Issuer != a.ClientID):
		a.violate(w, http.StatusUnauthorized, "'Issuer' claim ('iss') %q is not this App's id %d", claims.Issuer, a.ID)
	case claims.IssuedAt == nil:
		a.violate(w, http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued")
	case claims.ExpiresAt == nil:
		a.violate(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires")
	case claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxJWTLifetime:
		a.violate(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future: %s after iat, at most %s",
			claims.ExpiresAt.Sub(claims.IssuedAt.Time), MaxJWTLifetime)
	case claims.IssuedAt.After(now.Add(MaxJWTSkew)):
		a.violate(w, http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued: %s in the future",
			claims.IssuedAt.Sub(now))
	case !now.Before(claims.ExpiresAt.Time):
		a.violate(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires: expired %s ago",
			now.Sub(claims.ExpiresAt.Time))
	default:
		a.mu.Lock()
		revoked := a.revoked
		a.mu.Unlock()
		if revoked {
			a.answer(w, http.StatusUnauthorized, map[string]string{"message": "A JSON web token could not be decoded",
				"documentation_url": "https://docs.github.com/rest"})
			return false
		}
		return true
	}
	return false
}

// getApp answers apps/get-authenticated with the schema integration's required fields.
func (a *App) getApp(w http.ResponseWriter, _ *http.Request, _ []string) {
	at := a.now().UTC().Format(time.RFC3339)
	a.answer(w, http.StatusOK, map[string]any{
		"id": a.ID, "slug": a.Slug, "node_id": "A_" + strconv.FormatInt(a.ID, 10), "client_id": a.ClientID,
		"owner": map[string]any{"login": "octo-org", "id": 1, "type": "Organization"},
		"name":  a.Name, "description": nil, "external_url": "https://example.com", "html_url": "https://github.com/apps/" + a.Slug,
		"created_at": at, "updated_at": at, "permissions": a.permissions(),
		"events": []string{"check_run", "check_suite", "pull_request", "push"},
	})
}

// tokenRequest is apps/create-installation-access-token's optional body.
type tokenRequest struct {
	Repositories  []string          `json:"repositories"`
	RepositoryIDs []int64           `json:"repository_ids"`
	Permissions   map[string]string `json:"permissions"`
}

// createToken answers apps/create-installation-access-token.
func (a *App) createToken(w http.ResponseWriter, r *http.Request, parts []string) {
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || id <= 0 {
		a.violate(w, http.StatusNotFound, "Not Found: installation_id %q is not an integer", parts[2])
		return
	}
	var body []byte
	if r.Body != nil { // a server's request always has one; a test's in-process client may not
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return
		}
	}
	var req tokenRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			a.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q for a JSON body", ct)
			return
		}
		if msg := checkTokenRequest(body, &req); msg != "" {
			a.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s", msg)
			return
		}
	}
	a.mu.Lock()
	in, ok := a.installations[id]
	if ok {
		in.requests++
	}
	a.mu.Unlock()
	switch {
	case !ok:
		a.answer(w, http.StatusNotFound, map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
		return
	case in.refusal != 0:
		a.answer(w, in.refusal, map[string]string{"message": in.message, "documentation_url": "https://docs.github.com/rest"})
		return
	}
	for _, name := range req.Repositories {
		if !in.has(in.account + "/" + name) {
			a.answer(w, http.StatusUnprocessableEntity, map[string]string{"message": "There is at least one repository that does not exist or is not accessible to the parent installation.",
				"documentation_url": "https://docs.github.com/rest"})
			return
		}
	}
	perms := a.permissions()
	if req.Permissions != nil {
		perms = req.Permissions
	}
	token := "ghs_" + rand.Text()
	expires := a.now().Add(a.lifetime())
	a.mu.Lock()
	if a.tokens == nil {
		a.tokens = map[string]issued{}
	}
	a.tokens[token] = issued{installation: id, expires: expires}
	a.mu.Unlock()
	selection := "all"
	if len(req.Repositories) > 0 || len(req.RepositoryIDs) > 0 {
		selection = "selected"
	}
	a.answer(w, http.StatusCreated, map[string]any{"token": token, "expires_at": expires.UTC().Format(time.RFC3339),
		"permissions": perms, "repository_selection": selection})
}

// checkTokenRequest validates the body against the operation's schema: an object of
// repositories (array of strings), repository_ids (array of integers) and permissions
// (object of read or write); at most 500 repositories. It returns what is wrong.
func checkTokenRequest(body []byte, req *tokenRequest) string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return "the body is not a JSON object: " + err.Error()
	}
	for name, v := range fields {
		var err error
		switch name {
		case "repositories":
			err = json.Unmarshal(v, &req.Repositories)
		case "repository_ids":
			err = json.Unmarshal(v, &req.RepositoryIDs)
		case "permissions":
			err = json.Unmarshal(v, &req.Permissions)
			for p, level := range req.Permissions {
				if level != "read" && level != "write" {
					return fmt.Sprintf("permissions.%s %q is not read or write", p, level)
				}
			}
		default:
			return fmt.Sprintf("%q is not a permitted key", name)
		}
		if err != nil {
			return fmt.Sprintf("%s: %v", name, err)
		}
	}
	if n := len(req.Repositories) + len(req.RepositoryIDs); n > maxRepositories {
		return fmt.Sprintf("%d repositories, at most %d", n, maxRepositories)
	}
	return ""
}

func (in *installation) has(repo string) bool {
	for _, r := range in.repos {
		if strings.EqualFold(r, repo) {
			return true
		}
	}
	return false
}

// repoInstallation answers apps/get-repo-installation with the schema installation's
// required fields.
func (a *App) repoInstallation(w http.ResponseWriter, _ *http.Request, parts []string) {
	repo := parts[1] + "/" + parts[2]
	a.mu.Lock()
	var found *installation
	for _, in := range a.installations {
		if in.refusal != http.StatusNotFound && in.has(repo) {
			found = in
		}
	}
	var body map[string]any
	if found != nil {
		body = a.installationJSON(found)
	}
	a.mu.Unlock()
	if found == nil {
		a.answer(w, http.StatusNotFound, map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
		return
	}
	a.answer(w, http.StatusOK, body)
}

// listInstallations answers apps/list-installations: the App's installations (not the
// uninstalled ones), ordered by id, per_page (at most 100, default 30) a page.
func (a *App) listInstallations(w http.ResponseWriter, r *http.Request, _ []string) {
	perPage, page := 30, 1
	q := r.URL.Query()
	for name, v := range map[string]*int{"per_page": &perPage, "page": &page} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || (name == "per_page" && n > 100) {
				a.violate(w, http.StatusUnprocessableEntity, "%s %q is not an integer in range", name, s)
				return
			}
			*v = n
		}
	}
	a.mu.Lock()
	var ids []int64
	for id, in := range a.installations {
		if in.refusal != http.StatusNotFound {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []map[string]any{}
	for i := (page - 1) * perPage; i < len(ids) && i < page*perPage; i++ {
		out = append(out, a.installationJSON(a.installations[ids[i]]))
	}
	a.mu.Unlock()
	a.answer(w, http.StatusOK, out)
}

// installationJSON is in as the schema installation gives it, with its required fields. The
// caller holds a.mu.
func (a *App) installationJSON(in *installation) map[string]any {
	at := a.now().UTC().Format(time.RFC3339)
	var suspended any
	if in.refusal == http.StatusForbidden {
		suspended = at
	}
	return map[string]any{
		"id": in.id, "account": map[string]any{"login": in.account, "id": 1, "type": "Organization"},
		"access_tokens_url": fmt.Sprintf("https://api.github.com/app/installations/%d/access_tokens", in.id),
		"repositories_url":  "https://api.github.com/installation/repositories",
		"html_url":          fmt.Sprintf("https://github.com/organizations/%s/settings/installations/%d", in.account, in.id),
		"app_id":            a.ID, "app_slug": a.Slug, "target_id": 1, "target_type": "Organization",
		"permissions": a.permissions(), "events": []string{"check_run", "check_suite", "pull_request", "push"},
		"created_at": at, "updated_at": at, "single_file_name": nil, "repository_selection": "selected",
		"suspended_at": suspended, "suspended_by": nil,
	}
}
