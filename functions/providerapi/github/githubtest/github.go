// Package githubtest is the one fake of GitHub's REST API for amiss's tests: a handler on
// 127.0.0.1 serving, as GitHub's OpenAPI description (api.github.com, 2022-11-28) gives them,
// every operation amiss calls:
//
//	meta/root                              GET   /                                               none
//	apps/get-authenticated                 GET   /app                                            App JWT
//	apps/list-installations                GET   /app/installations                              App JWT, paged
//	apps/create-installation-access-token  POST  /app/installations/{id}/access_tokens           App JWT
//	apps/get-repo-installation             GET   /repos/{owner}/{repo}/installation              App JWT
//	repos/create-commit-status             POST  /repos/{owner}/{repo}/statuses/{sha}
//	repos/get-combined-status-for-ref      GET   /repos/{owner}/{repo}/commits/{ref}/status      paged
//	checks/create                          POST  /repos/{owner}/{repo}/check-runs
//	checks/update                          PATCH /repos/{owner}/{repo}/check-runs/{id}
//	checks/get                             GET   /repos/{owner}/{repo}/check-runs/{id}
//	checks/list-for-ref                    GET   /repos/{owner}/{repo}/commits/{ref}/check-runs  paged
//	pulls/get, pulls/list-files, pulls/list-commits, repos/compare-commits, repos/get-commit    paged
//	webhooks' deliveries (list, redeliver) of the App, an organization, a repository (hooks.go)
//
// Every request is checked against the description itself (internal/githubspec: its path,
// parameters and body), then against what GitHub says in prose (the media type, the API
// version when one is named, the App JWT's claims and signature, a check run's rules): a request that breaks
// either is answered as GitHub would (401, 404, 415, 422) and recorded, and a test asserts
// Violations() is empty. Listings are paged by per_page (at most 100) and page, with a Link
// header naming the next and last pages, as GitHub pages them.
//
// A request to the App endpoints carries the App's JWT, verified as GitHub does (RS256 by the
// App's key; iss its id or client id; exp at most 10 minutes after iat; iat at most a minute
// ahead of GitHub's clock; not expired). Any other request carries a bearer token: one the
// fake issued to an installation (valid once ReplicationDelay has passed since it was issued,
// until it expires), or one Authorize accepts. A refused token is answered 401 and counted
// (Unauthorized), not recorded as a violation: the client did as it should.
package githubtest

import (
	"crypto/rsa"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/internal/githubspec"
)

// Behavior is how the fake answers one write (a status's POST, a check run's create or
// update): the fakes of every provider share it.
type Behavior = providerapitest.Behavior

// GitHub fakes GitHub for one App and any number of tokens. Set its fields before serving.
type GitHub struct {
	// Authorize says whether a bearer token the fake did not issue is valid (nil: any
	// non-empty one). Token(t) accepts t alone.
	Authorize func(token string) bool
	// Prefix is the API's path prefix: "" for api.github.com, "/api/v3" for GitHub Enterprise
	// Server. A request outside it is a violation.
	Prefix string
	// Now is GitHub's clock (default time.Now): its Date header, the JWT's checks, tokens'
	// expiry.
	Now func() time.Time

	// The App: its id (and client id, also accepted as the JWT's iss), slug and name, the
	// public halves of the keys it lists (GitHub accepts a JWT signed by any of them), and the
	// permissions of the App and of every installation (default: checks and statuses write,
	// pull_requests, contents and metadata read).
	AppID       int64
	ClientID    string
	Slug, Name  string
	Keys        []*rsa.PublicKey
	Permissions map[string]string
	// Lifetime is an installation token's lifetime (default DefaultLifetime).
	Lifetime time.Duration
	// ReplicationDelay is how long after its issue an installation token is still refused
	// (401), as a GitHub server it has not reached yet refuses it (default none).
	ReplicationDelay time.Duration

	// Post decides how the n-th valid status POST (from 1) is answered; nil: created at once.
	Post func(n int, s Created) Behavior
	// Create and Update decide how the n-th valid check-run create or update is answered.
	Create func(n int, r CheckRun) Behavior
	Update func(n int, r CheckRun) Behavior
	// Answer, when it returns a status code, answers the n-th valid request (from 1) of the
	// read op (an operationId: OpGetPull...) with it instead (403: "Resource not accessible by
	// integration", the answer to a token whose App lacks the permission).
	Answer func(op string, n int) int
	// HookAnswer, when it returns a status code, answers the n-th request (from 1) to a
	// webhook's deliveries with it instead (429 with Retry-After: 60, a secondary rate limit).
	HookAnswer func(op string, n int) int
	// HookRateLimitReset, when set, makes a 403 from HookAnswer GitHub's primary rate limit,
	// its window resetting that long after the answer.
	HookRateLimitReset time.Duration
	// DeliveryTimeout is how long an attempt waits for the hook's endpoint (default 10 s,
	// GitHub's).
	DeliveryTimeout time.Duration

	// Record counts the valid reads of each operation (Requests), the requests refused for
	// their bearer token (Unauthorized: not those with an App JWT) and the violations.
	providerapitest.Record

	mu            sync.Mutex
	clockRefusals int
	// the App
	installations map[int64]*installation
	tokens        map[string]issued
	revoked       bool
	failures      []int
	// statuses
	posts   int
	created *providerapitest.Statuses[Created]
	// check runs
	creates, updates int
	runs             []CheckRun
	// reads: each repository's commits and branches, its pull requests, and its default
	// branch's name ("main" unless set)
	history *providerapitest.History[HistoryCommit]
	pulls   providerapitest.Pulls[HistoryPull]
	// webhooks
	hooks        map[Hook]*hook
	deliveryID   int64
	hookRequests int
}

// New returns a fake accepting the bearer tokens authorize accepts (nil: any), and the
// installation tokens it issues.
func New(authorize func(token string) bool) *GitHub {
	githubspec.Load() // its error is every request's (ServeHTTP)
	return &GitHub{Authorize: authorize, Slug: "amiss-test", Name: "amiss test",
		created: providerapitest.NewStatuses(func(s Created) (string, string, string) { return s.Repository, s.SHA, s.Context }),
		history: providerapitest.NewHistory(func(c HistoryCommit) string { return c.SHA }, parentOf)}
}

// NewApp returns a fake of App id whose keys' public halves are keys, accepting only the
// installation tokens it issues.
func NewApp(id int64, keys ...*rsa.PublicKey) *GitHub {
	g := New(func(string) bool { return false })
	g.AppID, g.Keys = id, keys
	return g
}

// Token accepts t alone.
func Token(t string) func(string) bool { return func(tok string) bool { return tok == t } }

func (g *GitHub) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// ClockRefusals counts the App JWTs refused for their times (iat ahead of GitHub's clock, or
// expired): a client whose host clock is off sends them, and GitHub refuses them 401.
func (g *GitHub) ClockRefusals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clockRefusals
}

// violate records a violation and answers it as GitHub would.
func (g *GitHub) violate(w http.ResponseWriter, code int, format string, args ...any) {
	msg := g.Violate(format, args...)
	g.answer(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func (g *GitHub) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, g.now())
}

func (g *GitHub) refuse(w http.ResponseWriter, code int, message string) {
	g.answer(w, code, map[string]string{"message": message, "documentation_url": "https://docs.github.com/rest"})
}

// ServeHTTP implements http.Handler.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// GitHub's description decides what a request may carry; its body is read first, before
	// a client that gives up can take it away.
	op, err := githubspec.Check(r, g.Prefix)
	path, inPrefix := strings.CutPrefix(r.URL.Path, g.Prefix)
	if inPrefix && (path == "" || path == "/") && r.Method == http.MethodGet {
		// meta/root: the API answers, no authentication needed (amiss check asks it).
		g.answer(w, http.StatusOK, map[string]string{"current_user_url": "https://api.github.com/user"})
		return
	}
	switch {
	case !inPrefix || (path != "" && !strings.HasPrefix(path, "/")):
		g.violate(w, http.StatusNotFound, "Not Found: %s is outside the API's prefix %q", r.URL.Path, g.Prefix)
		return
	case r.Header.Get("Accept") != "application/vnd.github+json":
		g.violate(w, http.StatusUnsupportedMediaType, "Accept %q, want application/vnd.github+json", r.Header.Get("Accept"))
		return
	case r.Header.Get("X-GitHub-Api-Version") != "" && r.Header.Get("X-GitHub-Api-Version") != "2022-11-28":
		// GitHub takes a request without one as 2022-11-28.
		g.violate(w, http.StatusBadRequest, "X-GitHub-Api-Version %q, want 2022-11-28", r.Header.Get("X-GitHub-Api-Version"))
		return
	case err != nil && op == "":
		g.violate(w, http.StatusNotFound, "Not Found: %v", err)
		return
	case err != nil:
		g.violate(w, http.StatusUnprocessableEntity, "Validation Failed: %v", err)
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if strings.HasSuffix(op, "-webhook-deliveries") || strings.HasSuffix(op, "/redeliver-webhook-delivery") {
		if strings.HasPrefix(op, "apps/") && !g.verifyJWT(w, r) {
			return
		}
		if !strings.HasPrefix(op, "apps/") && !g.hookAuthorized(w, r) {
			return
		}
		g.serveHooks(w, r, op, parts)
		return
	}
	if strings.HasPrefix(op, "apps/") {
		g.serveApp(w, r, op, parts)
		return
	}
	repo := parts[1] + "/" + parts[2]
	if !g.authorized(w, r, repo) {
		return
	}
	switch op {
	case "repos/create-commit-status":
		g.createStatus(w, r, repo, parts[4])
	case "repos/get-combined-status-for-ref":
		g.combined(w, r, repo, parts[4])
	case "checks/create":
		g.createRun(w, r, repo)
	case "checks/update", "checks/get":
		id, err := strconv.ParseInt(parts[4], 10, 64)
		switch {
		case err != nil:
			g.violate(w, http.StatusNotFound, "Not Found: check_run_id %q is not an integer", parts[4])
		case op == "checks/get":
			g.getRun(w, repo, id)
		default:
			g.updateRun(w, r, repo, id)
		}
	case "checks/list-for-ref":
		g.listRuns(w, r, repo, parts[4])
	case OpGetPull, OpListPullFiles, OpListPullCommits, OpCompareCommits, OpGetCommit, OpGetRepo:
		g.read(w, r, op, repo, parts)
	default:
		g.violate(w, http.StatusNotFound, "Not Found: %s %s is not served by the fake", r.Method, r.URL.Path)
	}
}

// hookAuthorized checks the bearer token of a request to an organization's or a repository's
// hook: one Authorize accepts (a token with admin:org_hook or admin:repo_hook); an
// installation's token is refused 403, as GitHub refuses an App without the hooks permission.
func (g *GitHub) hookAuthorized(w http.ResponseWriter, r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		g.violate(w, http.StatusUnauthorized, "Requires authentication: no bearer token")
		return false
	}
	g.mu.Lock()
	_, issuedHere := g.tokens[token]
	g.mu.Unlock()
	switch {
	case issuedHere:
		g.refuse(w, http.StatusForbidden, "Resource not accessible by integration")
		return false
	case g.Authorize != nil && !g.Authorize(token):
		g.Refused()
		g.refuse(w, http.StatusUnauthorized, "Bad credentials")
		return false
	}
	return true
}

// authorized checks a request's bearer token for repo, answering 401 for one that is not
// valid, and 404 for an installation's token on a repository the installation does not have.
func (g *GitHub) authorized(w http.ResponseWriter, r *http.Request, repo string) bool {
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || token == "" {
		g.violate(w, http.StatusUnauthorized, "Requires authentication: Authorization %q is not a bearer token", auth)
		return false
	}
	g.mu.Lock()
	t, issuedHere := g.tokens[token]
	var visible bool
	if in := g.installations[t.installation]; issuedHere && in != nil {
		visible = in.has(repo)
	}
	g.mu.Unlock()
	var valid bool
	switch {
	case issuedHere:
		now := g.now()
		valid = !now.Before(t.at.Add(g.ReplicationDelay)) && now.Before(t.expires)
		if valid && !visible {
			g.refuse(w, http.StatusNotFound, "Not Found")
			return false
		}
	case g.Authorize != nil:
		valid = g.Authorize(token)
	default:
		valid = true
	}
	if !valid {
		g.Refused()
		g.refuse(w, http.StatusUnauthorized, "Bad credentials")
	}
	return valid
}

// pageQuery reads per_page (1 to 100; default 30) and page (from 1), recording a value out of
// range.
func (g *GitHub) pageQuery(w http.ResponseWriter, q url.Values) (page, perPage int, ok bool) {
	page, perPage = 1, 30
	for name, v := range map[string]*int{"per_page": &perPage, "page": &page} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || (name == "per_page" && n > 100) {
				g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s %q is not an integer in range", name, s)
				return 0, 0, false
			}
			*v = n
		}
	}
	return page, perPage, true
}

func link(w http.ResponseWriter, r *http.Request, page, perPage, total int) {
	providerapitest.Link(w, r, "page", page, perPage, total)
}

func pageOf[T any](all []T, page, perPage int) []T { return providerapitest.PageOf(all, page, perPage) }
