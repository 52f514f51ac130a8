// Package gitlabtest is the fake of GitLab's REST API (/api/v4) for amiss's tests, serving,
// as GitLab's API description and documentation give them:
//
//	POST /api/v4/projects/{id}/statuses/{sha}                                state, name, description, target_url, ...
//	GET  /api/v4/projects/{id}/repository/commits/{sha}/statuses             name, all, page, per_page
//	GET  /api/v4/projects/{id}                                               the project
//	GET  /api/v4/projects/{id}/merge_requests/{merge_request_iid}            the merge request
//	GET  /api/v4/projects/{id}/merge_requests/{merge_request_iid}/diffs      page, per_page
//	GET  /api/v4/projects/{id}/merge_requests/{merge_request_iid}/commits    page, per_page
//	GET  /api/v4/projects/{id}/repository/compare                            from, to, straight
//
// Every request but the status POST is checked against GitLab's published description
// (internal/gitlabspec: its path, parameters, and no query parameter it does not declare); the
// POST, whose body's description was not copied, is checked by hand against GitLab's API
// documentation: a request breaking either is answered as GitLab would (404, 415, 400) and
// recorded, and a test asserts Violations() is empty. The project is named by its URL-encoded
// path. A request must carry PRIVATE-TOKEN with a token Authorize accepts (a refused one is
// answered 401 and counted). A status's state is pending, running, success, failed, canceled
// or skipped; its name, description and target_url are at most 255 characters (longer: 400).
// The listings are paged by per_page (default 20, at most 100) with GitLab's
// offset-pagination headers: X-Page, X-Per-Page, X-Next-Page (empty on the last page),
// X-Total, X-Total-Pages and Link; the statuses oldest first. The reads are described in
// reads.go.
//
// RefuseUnchanged makes it an older GitLab, which answers 400 "Cannot transition status" to a
// status whose state repeats the latest under its name (current GitLab adds a job and answers
// 201).
//
// Hooks (hooks.go) fakes project and group webhooks: their deliveries, the log of attempts
// GitLab lists, and its resend.
package gitlabtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/internal/gitlabspec"
)

// Status is one commit status the fake holds.
type Status struct {
	ID                                       int64
	Project, SHA                             string
	Name, State, Description, TargetURL, Ref string
	At                                       time.Time
	// Author, when set, is the status's author object as GitLab sends it (about a kilobyte).
	Author map[string]any
}

// GitLab fakes one GitLab instance's commit statuses.
type GitLab struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Post decides how the n-th valid POST (from 1) is answered; nil: created at once (or
	// refused, with RefuseUnchanged).
	Post func(n int, s Status) providerapitest.Behavior
	// List, when it returns a status code, answers the n-th valid listing (from 1) with it.
	List func(n int) int
	// RefuseUnchanged: answer 400 to a status repeating the latest state under its name.
	RefuseUnchanged bool
	// MaxPerPage, when set, is the most statuses a page holds whatever per_page asks (a proxy
	// or an instance that caps it), with X-Next-Page still naming the next.
	MaxPerPage int
	// Answer, when it returns a status code, answers the n-th valid request (from 1) of the
	// read op (an operationId: OpGetMR...) with it instead (403: a token without the read_api
	// scope, as GitLab words it).
	Answer func(op string, n int) int
	// DiffMaxFiles is the instance's limit on the files of a diff (0: DiffMaxFiles).
	DiffMaxFiles int
	// DefaultBranch is every project's default branch (default main).
	DefaultBranch string

	// Record counts the valid requests of each operation (Requests, AllRequests), the
	// requests refused for their token (Unauthorized) and the violations.
	providerapitest.Record

	mu           sync.Mutex
	posts, lists int
	held         *providerapitest.Statuses[Status]
	// reads
	history *providerapitest.History[Commit]
	mrs     providerapitest.Pulls[MergeRequest]
}

// New returns a fake accepting the tokens authorize accepts (nil: any).
func New(authorize func(string) bool) *GitLab {
	gitlabspec.Load() // its error is every request's (ServeHTTP)
	return &GitLab{Authorize: authorize, held: providerapitest.NewStatuses(func(s Status) (string, string, string) {
		return s.Project, s.SHA, s.Name
	}), history: providerapitest.NewHistory(func(c Commit) string { return c.SHA }, parentOf)}
}

func (g *GitLab) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, time.Now())
}

func (g *GitLab) refuse(w http.ResponseWriter, code int) {
	g.answer(w, code, map[string]string{"message": fmt.Sprintf("%d %s", code, http.StatusText(code))})
}

func (g *GitLab) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := g.Violate(format, a...)
	g.answer(w, code, map[string]string{"message": msg})
}

// ServeHTTP implements http.Handler.
func (g *GitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	token := r.Header.Get("PRIVATE-TOKEN")
	if token == "" {
		g.violate(w, http.StatusUnauthorized, "no PRIVATE-TOKEN")
		return
	}
	if g.Authorize != nil && !g.Authorize(token) {
		g.Refused()
		g.answer(w, http.StatusUnauthorized, map[string]string{"message": "401 Unauthorized"})
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if len(parts) < 4 || parts[0] != "api" || parts[1] != "v4" || parts[2] != "projects" {
		g.violate(w, http.StatusNotFound, "404 Not Found: %s %s", r.Method, r.URL.EscapedPath())
		return
	}
	project, err := url.PathUnescape(parts[3])
	if err != nil {
		g.violate(w, http.StatusNotFound, "404 Project Not Found: %q", parts[3])
		return
	}
	op := OpCreateStatus
	if !(r.Method == http.MethodPost && len(parts) == 6 && parts[4] == "statuses") {
		var err error
		if op, err = gitlabspec.Check(r); err != nil {
			code := http.StatusBadRequest
			if op == "" {
				code = http.StatusNotFound
			}
			g.violate(w, code, "%v", err)
			return
		}
	}
	n := g.Tally(op)
	switch op {
	case OpCreateStatus:
		g.create(w, r, body, project, parts[5])
	case OpListStatuses:
		g.list(w, r, project, parts[6])
	default:
		g.read(w, r, op, project, parts, n)
	}
}

func (g *GitLab) create(w http.ResponseWriter, r *http.Request, body []byte, project, sha string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		g.violate(w, http.StatusBadRequest, "the body is not an object: %v", err)
		return
	}
	s := Status{Project: project, SHA: sha, Name: "default"}
	for k, raw := range in {
		var v string
		if k != "pipeline_id" && k != "coverage" && json.Unmarshal(raw, &v) != nil {
			g.violate(w, http.StatusBadRequest, "%s is not a string", k)
			return
		}
		switch k {
		case "state":
			s.State = v
		case "name", "context":
			s.Name = v
		case "description":
			s.Description = v
		case "target_url":
			s.TargetURL = v
		case "ref":
			s.Ref = v
		case "pipeline_id", "coverage":
		default:
			g.violate(w, http.StatusBadRequest, "%q is not a parameter of POST /projects/:id/statuses/:sha", k)
			return
		}
	}
	switch s.State {
	case "pending", "running", "success", "failed", "canceled", "skipped":
	default:
		g.violate(w, http.StatusBadRequest, "state does not have a valid value: %q", s.State)
		return
	}
	for field, v := range map[string]string{"name": s.Name, "description": s.Description, "target_url": s.TargetURL} {
		if utf8.RuneCountInString(v) > 255 {
			g.violate(w, http.StatusBadRequest, "%s is too long (maximum is 255 characters)", field)
			return
		}
	}
	g.mu.Lock()
	g.posts++
	n := g.posts
	latest, held := g.held.Latest(project, sha, s.Name)
	unchanged := held && latest.State == s.State
	g.mu.Unlock()
	b := providerapitest.Behavior{}
	if g.Post != nil {
		b = g.Post(n, s)
	}
	if g.RefuseUnchanged && unchanged && b.Code == 0 {
		g.answer(w, http.StatusBadRequest, map[string]string{"message": fmt.Sprintf(
			`Cannot transition status via :%s from :%s (Reason(s): Status cannot transition via "%s")`, s.State, s.State, s.State)})
		return
	}
	providerapitest.Write(w, http.StatusCreated, b, func() any { return statusJSON(g.Add(s)) }, g.answer, g.refuse)
}

func statusJSON(s Status) map[string]any {
	out := map[string]any{"id": s.ID, "sha": s.SHA, "ref": s.Ref, "status": s.State, "name": s.Name, "target_url": nilIfEmpty(s.TargetURL),
		"description": nilIfEmpty(s.Description), "created_at": s.At.UTC().Format(time.RFC3339Nano), "started_at": nil,
		"finished_at": s.At.UTC().Format(time.RFC3339Nano), "allow_failure": false, "coverage": nil, "pipeline_id": 1000 + s.ID}
	if s.Author != nil {
		out["author"] = s.Author
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Add adds a status as if posted (its ID and time set), and returns it.
func (g *GitLab) Add(s Status) Status {
	if s.Name == "" {
		s.Name = "default"
	}
	return g.held.Add(s, func(s Status, held, _ int) Status {
		s.ID, s.At = int64(held+1), time.Now()
		return s
	})
}

func (g *GitLab) list(w http.ResponseWriter, r *http.Request, project, sha string) {
	q := r.URL.Query()
	page, perPage := 1, 20
	for k := range q {
		switch k {
		case "name", "all", "ref", "stage", "pipeline_id", "order_by", "sort":
		case "page", "per_page":
			n, err := strconv.Atoi(q.Get(k))
			if err != nil || n < 1 {
				g.violate(w, http.StatusBadRequest, "%s %q", k, q.Get(k))
				return
			}
			if k == "page" {
				page = n
			} else {
				perPage = min(n, 100)
			}
		default:
			g.violate(w, http.StatusBadRequest, "%q is not a parameter of the commit's statuses", k)
			return
		}
	}
	if g.MaxPerPage > 0 {
		perPage = min(perPage, g.MaxPerPage)
	}
	g.mu.Lock()
	g.lists++
	n := g.lists
	g.mu.Unlock()
	var match []Status
	for _, s := range g.held.Of(project, sha) {
		if q.Get("name") == "" || s.Name == q.Get("name") {
			match = append(match, s)
		}
	}
	if g.List != nil {
		if code := g.List(n); code != 0 {
			g.refuse(w, code)
			return
		}
	}
	out := []map[string]any{}
	for _, s := range providerapitest.PageOf(match, page, perPage) {
		out = append(out, statusJSON(s))
	}
	pageHeaders(w, r, page, perPage, len(match))
	g.answer(w, http.StatusOK, out)
}

// Latest returns the status a user sees for a commit and name: the newest.
func (g *GitLab) Latest(project, sha, name string) (Status, bool) {
	return g.held.Latest(project, sha, name)
}

// ByID returns the status of id (from 1, in the order they were held).
func (g *GitLab) ByID(id int64) (Status, bool) { return g.held.Nth(id) }

// Count counts the statuses held for a commit and name.
func (g *GitLab) Count(project, sha, name string) int { return g.held.Count(project, sha, name) }

// Posts counts the valid POSTs; Lists the valid listings.
func (g *GitLab) Posts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.posts
}

// Lists counts the valid listings of a commit's statuses.
func (g *GitLab) Lists() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lists
}
