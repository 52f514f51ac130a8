// Package publishtest holds fakes of the providers' commit status APIs for tests: each checks
// every request against the provider's published API description (the paths, the headers, the
// body's fields, types and enums) and keeps the statuses it created, in order, so a test can
// ask what a user would see on a commit.
package publishtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/internal/githubspec"
)

// Created is one status a fake provider created.
type Created struct {
	ID                                     int64
	Repository, SHA                        string
	Context, State, Description, TargetURL string
	At                                     time.Time
}

// Behavior is how a fake answers one POST.
type Behavior struct {
	// Code, when not zero, is answered instead of creating the status (with the provider's
	// error body).
	Code int
	// Delay holds the answer back; the status is created before the delay when ApplyFirst is
	// set, after it otherwise (when the client is still there to be answered or not).
	Delay      time.Duration
	ApplyFirst bool
}

// GitHub fakes GitHub's commit status API as its OpenAPI description (api.github.com,
// 2022-11-28) gives it: POST /repos/{owner}/{repo}/statuses/{sha} with a JSON body of state
// (required: error, failure, pending or success), target_url, description (strings or null)
// and context (a string, "default" when left out), answered 201 with the status; and GET
// /repos/{owner}/{repo}/commits/{ref}/status, the combined status, whose statuses hold the
// latest status of each context, paginated by per_page (at most 100) and page. Requests must
// carry the token as a bearer and accept application/vnd.github+json; each is checked
// against the description itself (internal/githubspec) before the fake's own checks. Anything
// else is a violation: answered as GitHub would (404, 401, 422) and recorded.
type GitHub struct {
	Token string
	// Post decides how the n-th POST (from 1) is answered; nil: created at once.
	Post func(n int, s Created) Behavior

	mu         sync.Mutex
	posts      int
	created    []Created
	violations []string
}

// NewGitHub returns a fake accepting token.
func NewGitHub(token string) *GitHub {
	githubspec.Load() // its error is every request's (described)
	return &GitHub{Token: token}
}

func (g *GitHub) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	g.mu.Lock()
	g.violations = append(g.violations, msg)
	g.mu.Unlock()
	writeJSON(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// ServeHTTP implements http.Handler.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if r.Header.Get("Authorization") != "Bearer "+g.Token {
		g.violate(w, http.StatusUnauthorized, "Bad credentials: Authorization %q", r.Header.Get("Authorization"))
		return
	}
	if a := r.Header.Get("Accept"); a != "application/vnd.github+json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Accept %q, want application/vnd.github+json", a)
		return
	}
	if !described(w, r, "", g.violate) {
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 5 && parts[0] == "repos" && parts[3] == "statuses":
		g.create(w, r, parts[1]+"/"+parts[2], parts[4])
	case r.Method == http.MethodGet && len(parts) == 6 && parts[0] == "repos" && parts[3] == "commits" && parts[5] == "status":
		g.combined(w, r, parts[1]+"/"+parts[2], parts[4])
	default:
		g.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
	}
}

func (g *GitHub) create(w http.ResponseWriter, r *http.Request, repo, sha string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		g.violate(w, http.StatusBadRequest, "Problems parsing JSON: %v", err)
		return
	}
	s := Created{Repository: repo, SHA: sha, Context: "default"}
	for name, v := range fields {
		var str *string
		if err := json.Unmarshal(v, &str); err != nil {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s is not a string", name)
			return
		}
		switch name {
		case "state":
			if str == nil || !map[string]bool{"error": true, "failure": true, "pending": true, "success": true}[*str] {
				g.violate(w, http.StatusUnprocessableEntity, "Invalid request: state %s is not one of error, failure, pending, success", v)
				return
			}
			s.State = *str
		case "target_url", "description":
			if str != nil {
				if name == "target_url" {
					s.TargetURL = *str
				} else {
					s.Description = *str
				}
			}
		case "context":
			if str == nil {
				g.violate(w, http.StatusUnprocessableEntity, "Invalid request: context is null")
				return
			}
			s.Context = *str
		default:
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %q is not a permitted key", name)
			return
		}
	}
	if s.State == "" {
		g.violate(w, http.StatusUnprocessableEntity, "Invalid request: state wasn't supplied")
		return
	}
	if n := utf8.RuneCountInString(s.Description); n > 140 {
		g.violate(w, http.StatusUnprocessableEntity, "Validation Failed: description is too long (%d characters, maximum is 140)", n)
		return
	}
	g.mu.Lock()
	g.posts++
	n := g.posts
	g.mu.Unlock()
	b := Behavior{}
	if g.Post != nil {
		b = g.Post(n, s)
	}
	if b.Code != 0 {
		writeJSON(w, b.Code, map[string]string{"message": http.StatusText(b.Code)})
		return
	}
	if b.ApplyFirst {
		s = g.add(s)
	}
	// The request is finished whether or not the client is still waiting for the answer.
	time.Sleep(b.Delay)
	if !b.ApplyFirst {
		s = g.add(s)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": s.ID, "state": s.State, "description": s.Description,
		"target_url": s.TargetURL, "context": s.Context, "created_at": s.At.Format(time.RFC3339), "updated_at": s.At.Format(time.RFC3339)})
}

func (g *GitHub) add(s Created) Created {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.ID, s.At = int64(len(g.created)+1), time.Now()
	g.created = append(g.created, s)
	return s
}

func (g *GitHub) combined(w http.ResponseWriter, r *http.Request, repo, ref string) {
	q := r.URL.Query()
	perPage, page := 30, 1
	if v := q.Get("per_page"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			perPage = min(n, 100)
		}
	}
	if v := q.Get("page"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			page = n
		}
	}
	g.mu.Lock()
	latest := map[string]Created{}
	var order []string
	for _, s := range g.created {
		if s.Repository != repo || s.SHA != ref {
			continue
		}
		if _, ok := latest[s.Context]; !ok {
			order = append(order, s.Context)
		}
		latest[s.Context] = s
	}
	g.mu.Unlock()
	statuses := []map[string]any{}
	for i := (page - 1) * perPage; i < len(order) && i < page*perPage; i++ {
		s := latest[order[i]]
		statuses = append(statuses, map[string]any{"id": s.ID, "state": s.State, "description": s.Description,
			"target_url": s.TargetURL, "context": s.Context, "created_at": s.At.Format(time.RFC3339)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": "pending", "sha": ref, "total_count": len(order), "statuses": statuses})
}

// Created returns every status created for the commit, oldest first.
func (g *GitHub) Created(repo, sha string) []Created {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Created
	for _, s := range g.created {
		if s.Repository == repo && s.SHA == sha {
			out = append(out, s)
		}
	}
	return out
}

// Latest returns the status a user sees for a commit and context: the last one created.
func (g *GitHub) Latest(repo, sha, context string) (Created, bool) {
	all := g.Created(repo, sha)
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Context == context {
			return all[i], true
		}
	}
	return Created{}, false
}

// Posts counts the POSTs received (those that passed validation).
func (g *GitHub) Posts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.posts
}

// Violations lists the requests that broke the API description.
func (g *GitHub) Violations() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.violations...)
}
