// Package giteatest is the fake of Gitea's and Forgejo's REST API (/api/v1) for amiss's tests,
// serving, as Gitea's API description (its swagger) and its source give them:
//
//	repoCreateStatus            POST /api/v1/repos/{owner}/{repo}/statuses/{sha}
//	repoGetCombinedStatusByRef  GET  /api/v1/repos/{owner}/{repo}/commits/{ref}/status   page, limit
//	repoGet                     GET  /api/v1/repos/{owner}/{repo}
//	repoGetPullRequest          GET  /api/v1/repos/{owner}/{repo}/pulls/{index}
//	repoGetPullRequestFiles     GET  /api/v1/repos/{owner}/{repo}/pulls/{index}/files     page, limit
//	repoGetPullRequestCommits   GET  /api/v1/repos/{owner}/{repo}/pulls/{index}/commits   page, limit, files, verification
//	repoCompareDiff             GET  /api/v1/repos/{owner}/{repo}/compare/{basehead}
//
// Every request is checked against the description itself (internal/giteaspec: its path,
// parameters and body, and no query parameter it does not declare), then against what Gitea's
// source does: a request that breaks either is answered as Gitea would (404, 415, 422) and
// recorded, and a test asserts Violations() is empty. A request must carry
// "Authorization: token T" with a token Authorize accepts (a refused one is answered 401 and
// counted). A status's body holds the fields Gitea reads: state (pending, success, error,
// failure, warning: required), target_url, description, context. The combined status lists
// the latest status of each context, limit a page (default 30, at most 50, as Gitea's default
// MAX_RESPONSE_ITEMS), and, as Gitea's handler does, names the count of contexts in
// X-Total-Count and sends no Link header. The reads are described in reads.go.
package giteatest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/internal/giteaspec"
)

// Status is one commit status the fake created.
type Status struct {
	ID                                     int64
	Repository, SHA                        string
	Context, State, Description, TargetURL string
	At                                     time.Time
}

// Gitea fakes one Gitea server: its commit statuses, and its repositories' history for reads.
// Set its fields before serving.
type Gitea struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Post decides how the n-th valid POST (from 1) is answered; nil: created at once.
	Post func(n int, s Status) providerapitest.Behavior
	// Answer, when it returns a status code, answers the n-th valid request (from 1) of the
	// read op (an operationId: OpGetPull...) with it instead (403: a token without the
	// read:repository scope, as Gitea words it).
	Answer func(op string, n int) int
	// CompareWithoutFiles makes a comparison list its commits without their files, as a Gitea
	// whose compare handler predates them does.
	CompareWithoutFiles bool
	// DefaultBranch is every repository's default branch (default main).
	DefaultBranch string
	// MaxItems is the most entries a page of a listing holds, whatever limit asks (0:
	// MaxResponseItems, Gitea's default; a server may set less).
	MaxItems int

	// Record counts the valid requests of each operation (Requests, AllRequests), the
	// requests refused for their token (Unauthorized) and the violations.
	providerapitest.Record

	mu      sync.Mutex
	posts   int
	created *providerapitest.Statuses[Status]
	// reads
	history *providerapitest.History[Commit]
	pulls   providerapitest.Pulls[Pull]
}

// New returns a fake accepting the tokens authorize accepts (nil: any).
func New(authorize func(string) bool) *Gitea {
	giteaspec.Load() // its error is every request's (ServeHTTP)
	return &Gitea{Authorize: authorize, created: providerapitest.NewStatuses(func(s Status) (string, string, string) {
		return s.Repository, s.SHA, s.Context
	}), history: providerapitest.NewHistory(func(c Commit) string { return c.SHA }, parentOf)}
}

func (g *Gitea) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, time.Now())
}

func (g *Gitea) refuse(w http.ResponseWriter, code int) {
	g.answer(w, code, map[string]string{"message": http.StatusText(code), "url": "https://gitea.example.com/api/swagger"})
}

func (g *Gitea) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := g.Violate(format, a...)
	g.answer(w, code, map[string]string{"message": msg})
}

// ServeHTTP implements http.Handler.
func (g *Gitea) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "token ")
	if !ok || token == "" {
		g.violate(w, http.StatusUnauthorized, "Authorization %q is not a token", r.Header.Get("Authorization"))
		return
	}
	if g.Authorize != nil && !g.Authorize(token) {
		g.Refused()
		g.refuse(w, http.StatusUnauthorized)
		return
	}
	op, err := giteaspec.Check(r)
	switch {
	case err != nil && op == "":
		g.violate(w, http.StatusNotFound, "Not Found: %v", err)
		return
	case err != nil:
		g.violate(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	n := g.Tally(op)
	repo := parts[3] + "/" + parts[4]
	switch op {
	case OpCreateStatus:
		g.create(w, r, body, repo, parts[6])
	case OpCombinedStatus:
		g.combined(w, r, repo, parts[6])
	default:
		g.read(w, r, op, repo, parts, n)
	}
}

func (g *Gitea) create(w http.ResponseWriter, r *http.Request, body []byte, repo, sha string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	var in map[string]*string
	if err := json.Unmarshal(body, &in); err != nil {
		g.violate(w, http.StatusUnprocessableEntity, "the body is not an object of strings: %v", err)
		return
	}
	s := Status{Repository: repo, SHA: sha}
	for k, v := range in {
		val := ""
		if v != nil {
			val = *v
		}
		switch k {
		case "state":
			s.State = val
		case "context":
			s.Context = val
		case "description":
			s.Description = val
		case "target_url":
			s.TargetURL = val
		default:
			g.violate(w, http.StatusUnprocessableEntity, "%q is not a field of CreateStatusOption", k)
			return
		}
	}
	switch s.State {
	case "pending", "success", "error", "failure", "warning":
	default:
		g.violate(w, http.StatusUnprocessableEntity, "state %q is not pending, success, error, failure or warning", s.State)
		return
	}
	g.mu.Lock()
	g.posts++
	n := g.posts
	g.mu.Unlock()
	b := providerapitest.Behavior{}
	if g.Post != nil {
		b = g.Post(n, s)
	}
	providerapitest.Write(w, http.StatusCreated, b, func() any { return statusJSON(g.Add(s)) }, g.answer, g.refuse)
}

func statusJSON(s Status) map[string]any {
	return map[string]any{"id": s.ID, "status": s.State, "context": s.Context, "description": s.Description, "target_url": s.TargetURL,
		"created_at": s.At.Format(time.RFC3339), "updated_at": s.At.Format(time.RFC3339)}
}

// Add adds a status as if posted (its ID and time set), and returns it.
func (g *Gitea) Add(s Status) Status {
	return g.created.Add(s, func(s Status, held, _ int) Status {
		s.ID, s.At = int64(held+1), time.Now()
		return s
	})
}

func (g *Gitea) combined(w http.ResponseWriter, r *http.Request, repo, ref string) {
	q := r.URL.Query()
	page, limit := 1, 30
	for name, v := range map[string]*int{"page": &page, "limit": &limit} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				g.violate(w, http.StatusUnprocessableEntity, "%s %q", name, s)
				return
			}
			*v = n
		}
	}
	limit = min(limit, 50)
	current := g.created.Current(repo, ref)
	statuses := []map[string]any{}
	for _, s := range providerapitest.PageOf(current, page, limit) {
		statuses = append(statuses, statusJSON(s))
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(current)))
	g.answer(w, http.StatusOK, map[string]any{"state": "pending", "sha": ref, "total_count": len(statuses), "statuses": statuses})
}

// Latest returns the status a user sees for a commit and context: the last one created.
func (g *Gitea) Latest(repo, sha, context string) (Status, bool) {
	return g.created.Latest(repo, sha, context)
}

// Statuses returns the statuses created for a commit, oldest first.
func (g *Gitea) Statuses(repo, sha string) []Status { return g.created.Of(repo, sha) }
