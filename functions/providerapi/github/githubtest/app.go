package githubtest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
	at, expires  time.Time
}

func (g *GitHub) lifetime() time.Duration {
	if g.Lifetime > 0 {
		return g.Lifetime
	}
	return DefaultLifetime
}

func (g *GitHub) permissions() map[string]string {
	if g.Permissions != nil {
		return g.Permissions
	}
	return map[string]string{"checks": "write", "statuses": "write", "pull_requests": "read", "contents": "read", "metadata": "read"}
}

// Install installs the App on repositories (owner/name) as the installation id; the account is
// the first repository's owner. Installing again adds repositories.
func (g *GitHub) Install(id int64, repos ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.installations == nil {
		g.installations = map[int64]*installation{}
	}
	in, ok := g.installations[id]
	if !ok {
		in = &installation{id: id}
		g.installations[id] = in
	}
	for _, r := range repos {
		if in.account == "" {
			in.account, _, _ = strings.Cut(r, "/")
		}
		in.repos = append(in.repos, r)
	}
}

// Refuse makes GitHub refuse the installation from now on: 404 (uninstalled: it is gone from
// its repositories too) or 403 (suspended, or lacking a permission: its repositories still
// name it) with message (a default when empty).
func (g *GitHub) Refuse(id int64, status int, message string) {
	if message == "" {
		message = map[int]string{http.StatusNotFound: "Not Found", http.StatusForbidden: "This installation has been suspended"}[status]
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.installations == nil {
		g.installations = map[int64]*installation{}
	}
	if in, ok := g.installations[id]; ok {
		in.refusal, in.message = status, message
		return
	}
	g.installations[id] = &installation{id: id, refusal: status, message: message}
}

// RevokeKey makes GitHub refuse every JWT from now on (401), as when the App's key is deleted.
// Those refusals are not violations: the client did as it should.
func (g *GitHub) RevokeKey() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked = true
}

// RevokeToken makes GitHub refuse an installation token from now on (401), as when it is
// revoked.
func (g *GitHub) RevokeToken(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.tokens[token]; ok {
		t.expires = t.at
		g.tokens[token] = t
	}
}

// FailNext answers the next n requests that carry a valid JWT with status (a 5xx, 429...).
func (g *GitHub) FailNext(n, status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range n {
		g.failures = append(g.failures, status)
	}
}

// Installed reports the installation a token was issued for; ok is false for a token the fake
// never issued, one that has expired, and one still within ReplicationDelay of its issue.
func (g *GitHub) Installed(token string) (installation int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, found := g.tokens[token]
	now := g.now()
	if !found || now.Before(t.at.Add(g.ReplicationDelay)) || !now.Before(t.expires) {
		return 0, false
	}
	return t.installation, true
}

// Exchanges counts the token requests for the installation that carried a valid JWT.
func (g *GitHub) Exchanges(id int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in, ok := g.installations[id]; ok {
		return in.requests
	}
	return 0
}

// serveApp serves an App endpoint (op) for a request with a valid JWT.
func (g *GitHub) serveApp(w http.ResponseWriter, r *http.Request, op string, parts []string) {
	if !g.verifyJWT(w, r) {
		return
	}
	g.mu.Lock()
	var fail int
	if len(g.failures) > 0 {
		fail, g.failures = g.failures[0], g.failures[1:]
	}
	g.mu.Unlock()
	if fail != 0 {
		g.refuse(w, fail, http.StatusText(fail))
		return
	}
	switch op {
	case "apps/get-authenticated":
		g.getApp(w)
	case "apps/create-installation-access-token":
		g.createToken(w, r, parts)
	case "apps/get-repo-installation":
		g.repoInstallation(w, parts)
	case "apps/list-installations":
		g.listInstallations(w, r)
	default:
		g.violate(w, http.StatusNotFound, "Not Found: %s %s is not served by the fake", r.Method, r.URL.Path)
	}
}

// verifyJWT checks the request's App JWT as GitHub does; it answers 401 and returns false when
// it is refused. A JWT refused for its times is counted (ClockRefusals); any other refusal of
// a JWT the App did not sign right is a violation.
func (g *GitHub) verifyJWT(w http.ResponseWriter, r *http.Request) bool {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		g.violate(w, http.StatusUnauthorized, "A JSON web token could not be decoded: Authorization is not a Bearer JWT")
		return false
	}
	var claims jwt.RegisteredClaims
	err := jwt.ErrTokenUnverifiable
	for _, key := range g.Keys {
		claims = jwt.RegisteredClaims{}
		if _, err = jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return key, nil },
			jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}), jwt.WithoutClaimsValidation()); err == nil {
			break
		}
	}
	if err != nil {
		g.violate(w, http.StatusUnauthorized, "A JSON web token could not be decoded: %v", err)
		return false
	}
	now := g.now()
	clock := func(format string, args ...any) {
		g.mu.Lock()
		g.clockRefusals++
		g.mu.Unlock()
		g.refuse(w, http.StatusUnauthorized, fmt.Sprintf(format, args...))
	}
	switch {
	case claims.Issuer != strconv.FormatInt(g.AppID, 10) && (g.ClientID == "" || claims.Issuer != g.ClientID):
		g.violate(w, http.StatusUnauthorized, "'Issuer' claim ('iss') %q is not this App's id %d", claims.Issuer, g.AppID)
	case claims.IssuedAt == nil:
		g.violate(w, http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued")
	case claims.ExpiresAt == nil:
		g.violate(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires")
	case claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxJWTLifetime:
		g.violate(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future: %s after iat, at most %s",
			claims.ExpiresAt.Sub(claims.IssuedAt.Time), MaxJWTLifetime)
	case claims.IssuedAt.After(now.Add(MaxJWTSkew)):
		clock("'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued: %s in the future",
			claims.IssuedAt.Sub(now))
	case !now.Before(claims.ExpiresAt.Time):
		clock("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires: expired %s ago",
			now.Sub(claims.ExpiresAt.Time))
	default:
		g.mu.Lock()
		revoked := g.revoked
		g.mu.Unlock()
		if revoked {
			g.refuse(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
			return false
		}
		return true
	}
	return false
}

// getApp answers apps/get-authenticated with the schema integration's required fields.
func (g *GitHub) getApp(w http.ResponseWriter) {
	at := g.now().UTC().Format(time.RFC3339)
	g.answer(w, http.StatusOK, map[string]any{
		"id": g.AppID, "slug": g.Slug, "node_id": "A_" + strconv.FormatInt(g.AppID, 10), "client_id": g.ClientID,
		"owner": map[string]any{"login": "octo-org", "id": 1, "type": "Organization"},
		"name":  g.Name, "description": nil, "external_url": "https://example.com", "html_url": "https://github.com/apps/" + g.Slug,
		"created_at": at, "updated_at": at, "permissions": g.permissions(),
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
func (g *GitHub) createToken(w http.ResponseWriter, r *http.Request, parts []string) {
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || id <= 0 {
		g.violate(w, http.StatusNotFound, "Not Found: installation_id %q is not an integer", parts[2])
		return
	}
	var body []byte
	if r.Body != nil { // a server's request always has one; a test's in-process client may not
		if body, err = io.ReadAll(r.Body); err != nil {
			return
		}
	}
	var req tokenRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q for a JSON body", ct)
			return
		}
		if msg := checkTokenRequest(body, &req); msg != "" {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s", msg)
			return
		}
	}
	g.mu.Lock()
	in, ok := g.installations[id]
	if ok {
		in.requests++
	}
	g.mu.Unlock()
	switch {
	case !ok:
		g.refuse(w, http.StatusNotFound, "Not Found")
		return
	case in.refusal != 0:
		g.refuse(w, in.refusal, in.message)
		return
	}
	for _, name := range req.Repositories {
		if !in.has(in.account + "/" + name) {
			g.refuse(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	perms := g.permissions()
	if req.Permissions != nil {
		perms = req.Permissions
	}
	token := "ghs_" + rand.Text()
	now := g.now()
	expires := now.Add(g.lifetime())
	g.mu.Lock()
	if g.tokens == nil {
		g.tokens = map[string]issued{}
	}
	g.tokens[token] = issued{installation: id, at: now, expires: expires}
	g.mu.Unlock()
	selection := "all"
	if len(req.Repositories) > 0 || len(req.RepositoryIDs) > 0 {
		selection = "selected"
	}
	g.answer(w, http.StatusCreated, map[string]any{"token": token, "expires_at": expires.UTC().Format(time.RFC3339),
		"permissions": perms, "repository_selection": selection})
}

// checkTokenRequest validates the body against the operation's schema: an object of
// repositories (array of strings), repository_ids (array of integers) and permissions (object
// of read or write); at most 500 repositories. It returns what is wrong.
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

// repoInstallation answers apps/get-repo-installation with the schema installation's required
// fields.
func (g *GitHub) repoInstallation(w http.ResponseWriter, parts []string) {
	repo := parts[1] + "/" + parts[2]
	g.mu.Lock()
	var found *installation
	for _, in := range g.installations {
		if in.refusal != http.StatusNotFound && in.has(repo) {
			found = in
		}
	}
	var body map[string]any
	if found != nil {
		body = g.installationJSON(found)
	}
	g.mu.Unlock()
	if found == nil {
		g.refuse(w, http.StatusNotFound, "Not Found")
		return
	}
	g.answer(w, http.StatusOK, body)
}

// listInstallations answers apps/list-installations: the App's installations (not the
// uninstalled ones), ordered by id, per_page a page, with GitHub's Link header.
func (g *GitHub) listInstallations(w http.ResponseWriter, r *http.Request) {
	page, perPage, ok := g.pageQuery(w, r.URL.Query())
	if !ok {
		return
	}
	g.mu.Lock()
	var ids []int64
	for id, in := range g.installations {
		if in.refusal != http.StatusNotFound {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []map[string]any{}
	for _, id := range pageOf(ids, page, perPage) {
		out = append(out, g.installationJSON(g.installations[id]))
	}
	g.mu.Unlock()
	link(w, r, page, perPage, len(ids))
	g.answer(w, http.StatusOK, out)
}

// installationJSON is in as the schema installation gives it, with its required fields. The
// caller holds g.mu.
func (g *GitHub) installationJSON(in *installation) map[string]any {
	at := g.now().UTC().Format(time.RFC3339)
	var suspended any
	if in.refusal == http.StatusForbidden {
		suspended = at
	}
	return map[string]any{
		"id": in.id, "account": map[string]any{"login": in.account, "id": 1, "type": "Organization"},
		"access_tokens_url": fmt.Sprintf("https://api.github.com/app/installations/%d/access_tokens", in.id),
		"repositories_url":  "https://api.github.com/installation/repositories",
		"html_url":          fmt.Sprintf("https://github.com/organizations/%s/settings/installations/%d", in.account, in.id),
		"app_id":            g.AppID, "app_slug": g.Slug, "target_id": 1, "target_type": "Organization",
		"permissions": g.permissions(), "events": []string{"check_run", "check_suite", "pull_request", "push"},
		"created_at": at, "updated_at": at, "single_file_name": nil, "repository_selection": "selected",
		"suspended_at": suspended, "suspended_by": nil,
	}
}
