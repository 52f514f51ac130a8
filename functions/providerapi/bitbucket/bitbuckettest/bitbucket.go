// Package bitbuckettest fakes Bitbucket Cloud's REST API (2.0) for tests, as Atlassian's REST
// API reference gives it, every request checked against the published description of the
// operation (internal/bitbucketspec):
//
//	POST /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}/statuses/build         create or update the key's status
//	GET  /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}/statuses/build/{key}   the key's status, 404 when none
//	GET  /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}                        the commit (fields=hash: its hash alone)
//	GET  /2.0/repositories/{workspace}/{repo_slug}                                        the repository and its main branch
//	GET  /2.0/repositories/{workspace}/{repo_slug}/pullrequests/{id}                      a pull request (abbreviated hashes)
//	GET  /2.0/repositories/{workspace}/{repo_slug}/pullrequests/{id}/diffstat             302 to the diffstat of its source..destination
//	GET  /2.0/repositories/{workspace}/{repo_slug}/pullrequests/{id}/commits              its commits, newest first
//	GET  /2.0/repositories/{workspace}/{repo_slug}/diffstat/{spec}                        the files spec (a..b: of a not in b) changes
//	GET  /2.0/repositories/{workspace}/{repo_slug}/commits/{revision}?exclude=            the commits of revision not of exclude, newest first
//
// A request must carry a bearer token Authorize accepts (a refused one is answered 401 and
// counted). A status is key (required, at most 40 characters), state (INPROGRESS, SUCCESSFUL,
// FAILED, STOPPED: required), url (required), name and description; Bitbucket keeps one
// status per key and commit (a POST for a key that has one replaces it, answered 200; a new
// key is 201). A commit is named by its full hash or an abbreviation of one the fake knows
// (AddCommit, AddHistory), a branch by its name (SetBranch); an unknown one is 404.
//
// Listings page as Bitbucket Cloud documents: page and pagelen (10 by default, at most 100),
// each page naming the next page's URL in next, absent on the last. A request's fields (a
// partial response) keep the top-level properties it names: a listing read with fields that
// leave out next is not told of its next page. A diffstat of a range a..b is, as the
// description of its topic parameter gives it, with topic=true (or left out) the "2-way
// 'three-dot' diff ... between the source commit and the merge base of the source commit and
// the destination commit", with topic=false "a simple 'two dot' diff between the source and
// destination" (the files whose content differs between b's tree and a's); of one commit, what
// it changes against its first parent. Anything the description or these rules refuse is a
// violation, answered as Bitbucket would (400, 404, 415) and recorded.
package bitbuckettest

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
	"github.com/amiss-ci/amiss/internal/bitbucketspec"
)

// The operations the fake serves, as bitbucketspec names them.
const (
	repoOps         = "/repositories/{workspace}/{repo_slug}"
	OpPostStatus    = "POST " + repoOps + "/commit/{commit}/statuses/build"
	OpGetStatus     = "GET " + repoOps + "/commit/{commit}/statuses/build/{key}"
	OpGetCommit     = "GET " + repoOps + "/commit/{commit}"
	OpGetRepository = "GET " + repoOps
	OpGetPull       = "GET " + repoOps + "/pullrequests/{pull_request_id}"
	OpPullDiffStat  = "GET " + repoOps + "/pullrequests/{pull_request_id}/diffstat"
	OpPullCommits   = "GET " + repoOps + "/pullrequests/{pull_request_id}/commits"
	OpDiffStat      = "GET " + repoOps + "/diffstat/{spec}"
	OpCommits       = "GET " + repoOps + "/commits/{revision}"
	defaultPageLen  = 10
	maxPageLen      = 100
	shortHash       = 12
	minShortHash    = 7
)

// Status is one build status the fake holds.
type Status struct {
	Repository, SHA             string
	Key, State, Name, URL, Desc string
	Updates                     int
	At                          time.Time
}

// Commit is one commit of a repository's history: its parents (the first parent first), its
// message and the files it changes.
type Commit struct {
	Hash    string
	Parents []string
	Message string
	Changes []Change
}

// Change is a file a commit changes: Status is added, removed, modified or renamed; OldPath
// is a renamed file's old path.
type Change struct {
	Path, OldPath, Status string
}

// Pull is a pull request: its source branch and head commit, its destination branch and the
// commit that branch is at.
type Pull struct {
	ID                              int
	Title                           string
	Source, Destination             string
	SourceCommit, DestinationCommit string
}

// Bitbucket fakes Bitbucket Cloud.
type Bitbucket struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Post decides how the n-th valid POST (from 1) is answered; nil: applied at once.
	Post func(n int, s Status) providerapitest.Behavior
	// Answer decides the status of the n-th valid request (from 1) of a read operation (one of
	// the Op constants but OpPostStatus): 0 serves it, any other status answers it with
	// Bitbucket's error body (403: the token lacks a scope).
	Answer func(op string, n int) int

	// Record counts the valid reads of each operation (Requests), the requests refused for
	// their token (Unauthorized) and the violations.
	providerapitest.Record

	mu       sync.Mutex
	posts    int
	history  *providerapitest.History[Commit]
	pulls    providerapitest.Pulls[Pull]
	statuses *providerapitest.Statuses[Status]
}

// New returns a fake accepting the tokens authorize accepts (nil: any).
func New(authorize func(string) bool) *Bitbucket {
	if err := bitbucketspec.Cloud.Load(); err != nil {
		panic(err)
	}
	return &Bitbucket{Authorize: authorize, statuses: providerapitest.NewStatuses(func(s Status) (string, string, string) {
		return s.Repository, s.SHA, s.Key
	}), history: providerapitest.NewHistory(func(c Commit) string { return c.Hash },
		func(c Commit) []string { return c.Parents })}
}

// AddCommit makes repo (workspace/slug) hold the commit of the full hash sha.
func (b *Bitbucket) AddCommit(repo, sha string) { b.AddHistory(repo, Commit{Hash: sha}) }

// AddHistory adds c to repo; commits added later are newer.
func (b *Bitbucket) AddHistory(repo string, c Commit) { b.history.Add(repo, c) }

// AddPull adds (or replaces) pull request p of repo.
func (b *Bitbucket) AddPull(repo string, p Pull) { b.pulls.Put(repo, p.ID, p) }

// SetBranch points repo's branch name at the commit head.
func (b *Bitbucket) SetBranch(repo, name, head string) { b.history.SetBranch(repo, name, head) }

// SetMainBranch makes the branch name repo's main branch (main unless set).
func (b *Bitbucket) SetMainBranch(repo, name string) { b.history.SetDefaultBranch(repo, name) }

// resolve is the full hash of ref in repo: a full hash, an abbreviation of one (at least 7
// characters), or a branch; "" when none. b.mu is held.
func (b *Bitbucket) resolve(repo, ref string) string {
	if head, ok := b.history.Branch(repo, ref); ok {
		return head
	}
	if len(ref) < minShortHash {
		return ""
	}
	return b.history.Expand(repo, strings.ToLower(ref))
}

func (b *Bitbucket) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, time.Now())
}

func (b *Bitbucket) refuse(w http.ResponseWriter, code int) {
	msg := http.StatusText(code)
	if code == http.StatusForbidden {
		msg = "Your credentials lack one or more required privilege scopes."
	}
	b.answer(w, code, map[string]any{"type": "error", "error": map[string]string{"message": msg}})
}

func (b *Bitbucket) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := b.Violate(format, a...)
	b.answer(w, code, map[string]any{"type": "error", "error": map[string]string{"message": msg}})
}

// ServeHTTP implements http.Handler.
func (b *Bitbucket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, err := bitbucketspec.Cloud.Check(r, "/2.0")
	body, _ := io.ReadAll(r.Body)
	switch {
	case op == "":
		b.violate(w, http.StatusNotFound, "%v", err)
		return
	case err != nil:
		b.violate(w, http.StatusBadRequest, "%v", err)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		b.violate(w, http.StatusUnauthorized, "Authorization %q is not a bearer token", r.Header.Get("Authorization"))
		return
	}
	if b.Authorize != nil && !b.Authorize(token) {
		b.Refused()
		b.refuse(w, http.StatusUnauthorized)
		return
	}
	// repositories ws slug ..., each segment as sent (a status key may hold an escaped slash)
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/2.0/"), "/")
	for i := range parts {
		parts[i], _ = url.PathUnescape(parts[i])
	}
	repo := parts[1] + "/" + parts[2]
	if op == OpPostStatus {
		b.mu.Lock()
		sha := b.resolve(repo, parts[4])
		b.mu.Unlock()
		if sha == "" {
			b.refuse(w, http.StatusNotFound)
			return
		}
		b.create(w, r, body, repo, sha)
		return
	}
	if code := providerapitest.Refusal(b.Answer, op, b.Tally(op)); code != 0 {
		b.refuse(w, code)
		return
	}
	b.read(w, r, op, repo, parts)
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
	case s.State == "":
		b.violate(w, http.StatusBadRequest, "state is required")
		return
	}
	b.mu.Lock()
	b.posts++
	n := b.posts
	_, existed := b.statuses.Latest(repo, sha, s.Key)
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

func (b *Bitbucket) read(w http.ResponseWriter, r *http.Request, op, repo string, parts []string) {
	q := r.URL.Query()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.history.Known(repo) && !b.pulls.Has(repo) {
		b.refuse(w, http.StatusNotFound)
		return
	}
	page, pagelen, ok := b.page(w, q)
	if !ok {
		return
	}
	fields := q.Get("fields")
	switch op {
	case OpGetCommit, OpGetStatus:
		sha := b.resolve(repo, parts[4])
		if sha == "" {
			b.refuse(w, http.StatusNotFound)
			return
		}
		if op == OpGetCommit {
			c, _ := b.history.Commit(repo, sha)
			b.answer(w, http.StatusOK, partial(map[string]any{"type": "commit", "hash": sha, "message": c.Message,
				"summary": map[string]any{"raw": c.Message, "markup": "markdown", "html": "<p>" + c.Message + "</p>"}}, fields))
			return
		}
		if s, ok := b.statuses.Latest(repo, sha, parts[7]); ok {
			b.answer(w, http.StatusOK, statusJSON(s))
			return
		}
		b.refuse(w, http.StatusNotFound)
	case OpGetRepository:
		b.answer(w, http.StatusOK, partial(map[string]any{"type": "repository", "full_name": repo, "is_private": true,
			"mainbranch": map[string]any{"type": "branch", "name": b.history.DefaultBranch(repo)}}, fields))
	case OpGetPull, OpPullDiffStat, OpPullCommits:
		id, err := strconv.Atoi(parts[4])
		p, found := b.pulls.Get(repo, id)
		if err != nil || !found {
			b.refuse(w, http.StatusNotFound)
			return
		}
		switch op {
		case OpGetPull:
			side := func(branch, commit string) map[string]any {
				return map[string]any{"branch": map[string]any{"name": branch}, "commit": map[string]any{"type": "commit", "hash": commit[:min(len(commit), shortHash)]},
					"repository": map[string]any{"type": "repository", "full_name": repo}}
			}
			b.answer(w, http.StatusOK, partial(map[string]any{"type": "pullrequest", "id": p.ID, "title": p.Title, "state": "OPEN",
				"description": "a pull request's description, which amiss does not read", "source": side(p.Source, p.SourceCommit),
				"destination": side(p.Destination, p.DestinationCommit)}, fields))
		case OpPullDiffStat:
			// Bitbucket answers with a redirect to the repository's diffstat of the revspec that
			// corresponds to the pull request; the request's own query goes along.
			to := url.Values{}
			for k, v := range q {
				to[k] = v
			}
			to.Set("topic", "true")
			spec := p.SourceCommit[:min(len(p.SourceCommit), shortHash)] + ".." + p.DestinationCommit[:min(len(p.DestinationCommit), shortHash)]
			w.Header().Set("Location", (&url.URL{Scheme: "http", Host: r.Host, Path: "/2.0/repositories/" + repo + "/diffstat/" + spec,
				RawQuery: to.Encode()}).String())
			w.WriteHeader(http.StatusFound)
		case OpPullCommits:
			b.answer(w, http.StatusOK, partial(pageOf(r, commitsJSON(b.history.Between(repo, p.SourceCommit, p.DestinationCommit)), page, pagelen), fields))
		}
	case OpDiffStat:
		from, to, ranged := strings.Cut(parts[4], "..")
		head := b.resolve(repo, from)
		var base string
		switch {
		case ranged:
			base = b.resolve(repo, to)
		case head != "":
			if c, _ := b.history.Commit(repo, head); len(c.Parents) > 0 {
				base = c.Parents[0] // a single commit: against its first parent
			}
		}
		if head == "" || ranged && base == "" {
			b.refuse(w, http.StatusNotFound)
			return
		}
		changes := changesOf(b.history.Between(repo, head, base))
		if ranged {
			if q.Get("topic") != "false" {
				if base = b.history.MergeBase(repo, head, base); base == "" {
					b.refuse(w, http.StatusNotFound)
					return
				}
			}
			changes = b.diff(repo, base, head)
		}
		b.answer(w, http.StatusOK, partial(pageOf(r, diffStatJSON(changes), page, pagelen), fields))
	case OpCommits:
		head := b.resolve(repo, parts[4])
		if head == "" {
			b.refuse(w, http.StatusNotFound)
			return
		}
		if len(q["include"]) > 0 || len(q["exclude"]) > 1 {
			b.Violate("the fake serves one revision and at most one exclude")
			b.refuse(w, http.StatusBadRequest)
			return
		}
		var base string
		if ex := q.Get("exclude"); ex != "" {
			if base = b.resolve(repo, ex); base == "" {
				b.refuse(w, http.StatusNotFound)
				return
			}
		}
		b.answer(w, http.StatusOK, partial(pageOf(r, commitsJSON(b.history.Between(repo, head, base)), page, pagelen), fields))
	}
}

// page reads page and pagelen. b.mu is held.
func (b *Bitbucket) page(w http.ResponseWriter, q url.Values) (page, pagelen int, ok bool) {
	page, pagelen = 1, defaultPageLen
	for name, v := range map[string]*int{"page": &page, "pagelen": &pagelen} {
		s := q.Get(name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || name == "pagelen" && n > maxPageLen {
			msg := fmt.Sprintf("%s %q: want a number from 1 (pagelen: to %d)", name, s, maxPageLen)
			b.Violate("%s", msg)
			b.answer(w, http.StatusBadRequest, map[string]any{"type": "error", "error": map[string]string{"message": msg}})
			return 0, 0, false
		}
		*v = n
	}
	return page, pagelen, true
}

// diff is the files whose content differs between base's tree and head's, each with the status
// the last of head's commits since base changing it gives it, in the order they change them;
// then those none of them changes (a merge's side taken whole, a range whose head is behind
// its base), by path. b.mu is held.
func (b *Bitbucket) diff(repo, base, head string) []Change {
	return providerapitest.TreeDiff(b.tree(repo, base), b.tree(repo, head), changesOf(b.history.Between(repo, head, base)),
		func(c Change) (string, string) { return c.Path, c.OldPath },
		func(path string, added, removed bool) Change {
			return Change{Path: path, Status: providerapitest.Status(added, removed, "added", "removed", "modified")}
		})
}

// tree is commit sha's tree (providerapitest.History.Tree).
func (b *Bitbucket) tree(repo, sha string) map[string]string {
	return b.history.Tree(repo, sha, func(c Commit) []providerapitest.FileChange {
		out := make([]providerapitest.FileChange, len(c.Changes))
		for i, ch := range c.Changes {
			out[i] = providerapitest.FileChange{Path: ch.Path, From: ch.OldPath, Removed: ch.Status == "removed"}
		}
		return out
	})
}

// changesOf is what commits (newest first) change together: each path once, with its newest
// change.
func changesOf(commits []Commit) []Change {
	return providerapitest.Changed(providerapitest.Reversed(commits), func(c Commit) []Change { return c.Changes },
		func(c Change) string { return c.Path })
}

func diffStatJSON(changes []Change) []map[string]any {
	out := make([]map[string]any, 0, len(changes))
	file := func(p string) map[string]any {
		return map[string]any{"type": "commit_file", "path": p, "escaped_path": p,
			"links": map[string]any{"self": map[string]any{"href": "https://api.bitbucket.org/2.0/repositories/ws/app/src/abc/" + p}}}
	}
	for _, c := range changes {
		e := map[string]any{"type": "diffstat", "status": c.Status, "lines_added": 1, "lines_removed": 0, "old": nil, "new": nil}
		switch c.Status {
		case "added":
			e["new"] = file(c.Path)
		case "removed":
			e["old"] = file(c.Path)
		case "renamed":
			e["old"], e["new"] = file(c.OldPath), file(c.Path)
		default:
			e["old"], e["new"] = file(c.Path), file(c.Path)
		}
		out = append(out, e)
	}
	return out
}

func commitsJSON(commits []Commit) []map[string]any {
	out := make([]map[string]any, 0, len(commits))
	for _, c := range commits {
		parents := []any{}
		for _, p := range c.Parents {
			parents = append(parents, map[string]any{"type": "commit", "hash": p})
		}
		out = append(out, map[string]any{"type": "commit", "hash": c.Hash, "message": c.Message, "date": "2026-07-01T12:00:00+00:00",
			"author": map[string]any{"type": "author", "raw": "Charlie <charlie@example.com>"}, "parents": parents,
			"summary": map[string]any{"raw": c.Message, "markup": "markdown", "html": "<p>" + c.Message + "</p>"}})
	}
	return out
}

// pageOf is page (from 1) of values, pagelen a page, as Bitbucket writes one: next names the
// next page's URL, on the fake, when there is one.
func pageOf(r *http.Request, values []map[string]any, page, pagelen int) map[string]any {
	from := min((page-1)*pagelen, len(values))
	to := min(from+pagelen, len(values))
	out := map[string]any{"pagelen": pagelen, "page": page, "values": values[from:to]}
	if to < len(values) {
		out["next"] = providerapitest.PageURL(r, "page", page+1)
	}
	return out
}

// partial keeps the top-level properties fields names (a partial response; all when fields
// is empty).
func partial(v map[string]any, fields string) map[string]any {
	if fields == "" {
		return v
	}
	out := map[string]any{}
	for _, f := range strings.Split(fields, ",") {
		top, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(f), "+"), ".")
		if x, ok := v[top]; ok {
			out[top] = x
		}
	}
	return out
}

// Put sets the status of s's key on its commit (as if posted), and returns it.
func (b *Bitbucket) Put(s Status) Status {
	return b.statuses.Add(s, func(s Status, _, updates int) Status {
		s.At, s.Updates = time.Now(), updates
		return s
	})
}

// Status returns the status of key on a commit.
func (b *Bitbucket) Status(repo, sha, key string) (Status, bool) {
	return b.statuses.Latest(repo, sha, key)
}

// Posts counts the valid POSTs.
func (b *Bitbucket) Posts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posts
}
