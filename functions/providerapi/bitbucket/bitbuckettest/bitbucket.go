// Package bitbuckettest fakes Bitbucket Cloud's commit build status API (2.0) for tests, as
// Atlassian's REST API reference gives it:
//
//	POST /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}/statuses/build         create or update the key's status
//	GET  /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}/statuses/build/{key}   the key's status, 404 when none
//	GET  /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}                        the commit (fields=hash: its hash alone)
//
// A request must carry a bearer token Authorize accepts (a refused one is answered 401 and
// counted). A status is key (required, at most 40 characters), state (INPROGRESS, SUCCESSFUL,
// FAILED, STOPPED: required), url (required), name and description; Bitbucket keeps one
// status per key and commit (a POST for a key that has one replaces it, answered 200; a new
// key is 201). A commit is named by its full hash or an abbreviation of one the fake knows
// (AddCommit); an unknown one is 404. Anything else is a violation, answered as Bitbucket would
// (400, 404, 415) and recorded.
package bitbuckettest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// Status is one build status the fake holds.
type Status struct {
	Repository, SHA             string
	Key, State, Name, URL, Desc string
	Updates                     int
	At                          time.Time
}

// Bitbucket fakes Bitbucket Cloud's build statuses.
type Bitbucket struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Post decides how the n-th valid POST (from 1) is answered; nil: applied at once.
	Post func(n int, s Status) providerapitest.Behavior

	mu           sync.Mutex
	posts        int
	unauthorized int
	commits      map[string][]string // repository: full hashes
	statuses     []Status
	violations   []string
}

// New returns a fake accepting the tokens authorize accepts (nil: any).
func New(authorize func(string) bool) *Bitbucket { return &Bitbucket{Authorize: authorize} }

// AddCommit makes repo (workspace/slug) hold the commit of the full hash sha.
func (b *Bitbucket) AddCommit(repo, sha string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.commits == nil {
		b.commits = map[string][]string{}
	}
	b.commits[repo] = append(b.commits[repo], sha)
}

// resolve is the full hash of ref in repo, or "". b.mu is held.
func (b *Bitbucket) resolve(repo, ref string) string {
	if len(ref) < 7 {
		return ""
	}
	for _, sha := range b.commits[repo] {
		if strings.HasPrefix(sha, strings.ToLower(ref)) {
			return sha
		}
	}
	return ""
}

func (b *Bitbucket) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, time.Now())
}

func (b *Bitbucket) refuse(w http.ResponseWriter, code int) {
	b.answer(w, code, map[string]any{"type": "error", "error": map[string]string{"message": http.StatusText(code)}})
}

func (b *Bitbucket) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	b.mu.Lock()
	b.violations = append(b.violations, msg)
	b.mu.Unlock()
	b.answer(w, code, map[string]any{"type": "error", "error": map[string]string{"message": msg}})
}

// ServeHTTP implements http.Handler.
func (b *Bitbucket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		b.violate(w, http.StatusUnauthorized, "Authorization %q is not a bearer token", r.Header.Get("Authorization"))
		return
	}
	if b.Authorize != nil && !b.Authorize(token) {
		b.mu.Lock()
		b.unauthorized++
		b.mu.Unlock()
		b.refuse(w, http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if len(parts) < 6 || parts[0] != "2.0" || parts[1] != "repositories" || parts[4] != "commit" {
		b.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.EscapedPath())
		return
	}
	repo := parts[2] + "/" + parts[3]
	b.mu.Lock()
	sha := b.resolve(repo, parts[5])
	b.mu.Unlock()
	if sha == "" {
		b.refuse(w, http.StatusNotFound)
		return
	}
	switch {
	case r.Method == http.MethodGet && len(parts) == 6:
		if f := r.URL.Query().Get("fields"); f != "" && f != "hash" {
			b.violate(w, http.StatusBadRequest, "fields %q", f)
			return
		}
		b.answer(w, http.StatusOK, map[string]any{"hash": sha})
	case r.Method == http.MethodPost && len(parts) == 8 && parts[6] == "statuses" && parts[7] == "build":
		b.create(w, r, body, repo, sha)
	case r.Method == http.MethodGet && len(parts) == 9 && parts[6] == "statuses" && parts[7] == "build":
		key, _ := url.PathUnescape(parts[8])
		if s, ok := b.Status(repo, sha, key); ok {
			b.answer(w, http.StatusOK, statusJSON(s))
			return
		}
		b.refuse(w, http.StatusNotFound)
	default:
		b.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.EscapedPath())
	}
}

func (b *Bitbucket) create(w http.ResponseWriter, r *http.Request, body []byte, repo, sha string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		b.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	var in map[string]string
	if err := json.Unmarshal(body, &in); err != nil {
		b.violate(w, http.StatusBadRequest, "the body is not an object of strings: %v", err)
		return
	}
	s := Status{Repository: repo, SHA: sha}
	for k, v := range in {
		switch k {
		case "key":
			s.Key = v
		case "state":
			s.State = v
		case "name":
			s.Name = v
		case "url":
			s.URL = v
		case "description":
			s.Desc = v
		case "refname":
		default:
			b.violate(w, http.StatusBadRequest, "%q is not a field of a commit status", k)
			return
		}
	}
	switch {
	case s.Key == "" || utf8.RuneCountInString(s.Key) > 40:
		b.violate(w, http.StatusBadRequest, "key %q: required, at most 40 characters", s.Key)
		return
	case s.URL == "":
		b.violate(w, http.StatusBadRequest, "url is required")
		return
	case s.State != "INPROGRESS" && s.State != "SUCCESSFUL" && s.State != "FAILED" && s.State != "STOPPED":
		b.violate(w, http.StatusBadRequest, "state %q", s.State)
		return
	}
	b.mu.Lock()
	b.posts++
	n := b.posts
	_, existed := b.find(repo, sha, s.Key)
	b.mu.Unlock()
	be := providerapitest.Behavior{}
	if b.Post != nil {
		be = b.Post(n, s)
	}
	code := http.StatusCreated
	if existed {
		code = http.StatusOK
	}
	providerapitest.Write(w, code, be, func() any { return statusJSON(b.Put(s)) }, b.answer, b.refuse)
}

func statusJSON(s Status) map[string]any {
	return map[string]any{"type": "build", "key": s.Key, "state": s.State, "name": s.Name, "url": s.URL, "description": s.Desc,
		"created_on": s.At.UTC().Format(time.RFC3339), "updated_on": s.At.UTC().Format(time.RFC3339)}
}

// find is the index of the status of key on a commit, b.mu held.
func (b *Bitbucket) find(repo, sha, key string) (int, bool) {
	for i, s := range b.statuses {
		if s.Repository == repo && s.SHA == sha && s.Key == key {
			return i, true
		}
	}
	return -1, false
}

// Put sets the status of s's key on its commit (as if posted), and returns it.
func (b *Bitbucket) Put(s Status) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.At = time.Now()
	if i, ok := b.find(s.Repository, s.SHA, s.Key); ok {
		s.Updates = b.statuses[i].Updates + 1
		b.statuses[i] = s
		return s
	}
	b.statuses = append(b.statuses, s)
	return s
}

// Status returns the status of key on a commit.
func (b *Bitbucket) Status(repo, sha, key string) (Status, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i, ok := b.find(repo, sha, key); ok {
		return b.statuses[i], true
	}
	return Status{}, false
}

// Posts counts the valid POSTs.
func (b *Bitbucket) Posts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posts
}

// Unauthorized counts the requests refused for their token.
func (b *Bitbucket) Unauthorized() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unauthorized
}

// Violations lists the requests that broke the API.
func (b *Bitbucket) Violations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.violations...)
}
