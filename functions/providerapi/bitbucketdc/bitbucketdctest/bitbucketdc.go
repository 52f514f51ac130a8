// Package bitbucketdctest fakes a Bitbucket Data Center server's REST API for tests, as
// Atlassian's REST API reference for Data Center gives it, every request checked against the
// published description of the operation (internal/bitbucketspec):
//
//	POST /rest/api/latest/projects/{key}/repos/{slug}/commits/{commitId}/builds          store the key's build status (204)
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/commits/{commitId}/builds?key=     the key's build status, 404 when none
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/default-branch                     the repository's default branch
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}                 a pull request
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}/changes         its changes: one page, never more
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}/commits         its commits, newest first, paged
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/compare/changes?from=&to=          the changes of from not in to, paged
//	GET  /rest/api/latest/projects/{key}/repos/{slug}/compare/commits?from=&to=          the commits of from not in to, paged
//
// A request must carry a bearer token Authorize accepts (a refused one is answered 401 and
// counted). Listings page as Data Center documents: start and limit (25 by default, at most
// MaxLimit), each page saying isLastPage and, when it is not, nextPageStart. A pull request's
// changes are not paged: the server answers one page of at most the request's limit or its own
// maximum (MaxChanges, Data Center's page.max.changes), whichever is smaller, ignores start,
// and says isLastPage false when it cut the list. A comparison's changes are paged, but the
// server streams no more than page.max.changes (MaxChanges) of them: a page that reaches that
// cap, and every page past it (empty), says isLastPage false and names nextPageStart start +
// limit, beyond the cap, as Data Center answers a changes listing it cut (Atlassian's
// STASH-5329, "returns nextPageStart values beyond hard cap": size 1000, isLastPage false,
// nextPageStart 100000 for start 0, limit 100000; the Java API's ChangeSummary.isTruncated is
// "one or more changes were not streamed due to internal hard limits"). A compare whose to is
// omitted compares with the default branch. A comparison's changes are "the file changes
// available in the from commit but not in the to commit", as Data Center's REST reference gives
// them: the files whose content differs between the tree of the merge base of from and to and
// from's tree (git diff to...from), so a from that to contains (a branch forced back) has none.
// Its commits are from's that to has not (git log to..from).
//
// A build status is key (at most 255 characters), state (SUCCESSFUL, FAILED, INPROGRESS,
// CANCELLED, UNKNOWN), url (not blank, at most 450 characters), name and description; the
// server keeps one status per key and commit (a POST for a key that has one replaces it). A
// commit the repository does not hold is refused 400, as Data Center refuses an invalid commit
// hash. Anything the description or these rules refuse is a violation, answered as Data Center
// would (400, 404) and recorded.
package bitbucketdctest

import (
	"encoding/json"
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
	repoOps            = "/api/latest/projects/{projectKey}/repos/{repositorySlug}"
	OpAddBuild         = "POST " + repoOps + "/commits/{commitId}/builds"
	OpGetBuild         = "GET " + repoOps + "/commits/{commitId}/builds"
	OpDefaultBranch    = "GET " + repoOps + "/default-branch"
	OpGetPull          = "GET " + repoOps + "/pull-requests/{pullRequestId}"
	OpPullChanges      = "GET " + repoOps + "/pull-requests/{pullRequestId}/changes"
	OpPullCommits      = "GET " + repoOps + "/pull-requests/{pullRequestId}/commits"
	OpCompareChanges   = "GET " + repoOps + "/compare/changes"
	OpCompareCommits   = "GET " + repoOps + "/compare/commits"
	defaultLimit       = 25
	DefaultMaxLimit    = 1000
	DefaultMaxChanges  = 1000
	maxBuildKey        = 255
	maxBuildURL        = 450
	shortCommitID      = 11
	minPartialCommitID = 4
)

// Status is one build status the fake holds.
type Status struct {
	Repository, Commit                 string
	Key, State, Name, URL, Description string
	Updates                            int
	At                                 time.Time
}

// Commit is one commit a repository holds: its parents (the first parent first), its message
// and the files it changes.
type Commit struct {
	ID      string
	Parents []string
	Message string
	Changes []Change
}

// Change is a file a commit changes: Type is ADD, MODIFY, DELETE, MOVE or COPY; SrcPath is a
// moved or copied file's old path.
type Change struct {
	Path, SrcPath, Type string
}

// Pull is a pull request: its source branch and head commit, and its target branch and the
// commit that branch is at.
type Pull struct {
	ID                   int
	Title                string
	FromBranch, ToBranch string
	FromCommit, ToCommit string
}

// BitbucketDC fakes one Bitbucket Data Center server.
type BitbucketDC struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Post decides how the n-th valid build status POST (from 1) is answered; nil: applied at
	// once.
	Post func(n int, s Status) providerapitest.Behavior
	// Answer decides the status of the n-th valid request (from 1) of a read operation (one of
	// the Op constants but OpAddBuild): 0 serves it, any other status answers it with Data
	// Center's error body.
	Answer func(op string, n int) int
	// ContextPath is the path the server is served under ("" for the root, "/bitbucket").
	ContextPath string
	// MaxLimit is the largest page a listing serves (0: DefaultMaxLimit); MaxChanges the most
	// changes a pull request's changes answer, or a comparison's changes, list (0:
	// DefaultMaxChanges): page.max.changes.
	MaxLimit, MaxChanges int

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
func New(authorize func(string) bool) *BitbucketDC {
	if err := bitbucketspec.DataCenter.Load(); err != nil {
		panic(err)
	}
	return &BitbucketDC{Authorize: authorize, statuses: providerapitest.NewStatuses(func(s Status) (string, string, string) {
		return s.Repository, s.Commit, s.Key
	}), history: providerapitest.NewHistory(func(c Commit) string { return c.ID },
		func(c Commit) []string { return c.Parents })}
}

// AddCommit adds c to repo (PROJECT/slug); commits added later are newer.
func (b *BitbucketDC) AddCommit(repo string, c Commit) { b.history.Add(repo, c) }

// AddPull adds (or replaces) pull request p of repo.
func (b *BitbucketDC) AddPull(repo string, p Pull) { b.pulls.Put(repo, p.ID, p) }

// SetBranch points repo's branch name (like main) at the commit head.
func (b *BitbucketDC) SetBranch(repo, name, head string) { b.history.SetBranch(repo, name, head) }

// SetDefaultBranch makes the branch name repo's default branch (main unless set).
func (b *BitbucketDC) SetDefaultBranch(repo, name string) { b.history.SetDefaultBranch(repo, name) }

// Posts counts the valid build status POSTs.
func (b *BitbucketDC) Posts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posts
}

// Status returns the build status of key on a commit.
func (b *BitbucketDC) Status(repo, commit, key string) (Status, bool) {
	return b.statuses.Latest(repo, commit, key)
}

// Statuses lists the build statuses of a commit, in the order their keys were first posted.
func (b *BitbucketDC) Statuses(repo, commit string) []Status { return b.statuses.Current(repo, commit) }

// Put sets the build status of s's key on its commit (as if posted), and returns it.
func (b *BitbucketDC) Put(s Status) Status {
	return b.statuses.Add(s, func(s Status, _, updates int) Status {
		s.At, s.Updates = time.Now(), updates
		return s
	})
}

func (b *BitbucketDC) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, time.Now())
}

// refuse answers code with Data Center's error body.
func (b *BitbucketDC) refuse(w http.ResponseWriter, code int, message string) {
	b.answer(w, code, map[string]any{"errors": []map[string]any{{"context": nil, "message": message, "exceptionName": nil}}})
}

func (b *BitbucketDC) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := b.Violate(format, a...)
	b.refuse(w, code, msg)
}

// ServeHTTP implements http.Handler.
func (b *BitbucketDC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, err := bitbucketspec.DataCenter.Check(r, b.ContextPath+"/rest")
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
		b.refuse(w, http.StatusUnauthorized, "Authentication failed. Please check your credentials and try again.")
		return
	}
	parts := strings.Split(strings.TrimPrefix(strings.TrimPrefix(r.URL.EscapedPath(), b.ContextPath+"/rest"), "/"), "/")
	for i := range parts {
		parts[i], _ = url.PathUnescape(parts[i])
	}
	repo := parts[3] + "/" + parts[5] // api latest projects {key} repos {slug} ...
	if op == OpAddBuild {
		b.addBuild(w, r, body, repo, parts[7])
		return
	}
	if code := providerapitest.Refusal(b.Answer, op, b.Tally(op)); code != 0 {
		msg := http.StatusText(code)
		if code == http.StatusUnauthorized {
			msg = "You are not permitted to access this resource"
		}
		b.refuse(w, code, msg)
		return
	}
	b.read(w, r, op, repo, parts)
}

// addBuild stores a build status.
func (b *BitbucketDC) addBuild(w http.ResponseWriter, r *http.Request, body []byte, repo, commit string) {
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		b.violate(w, http.StatusBadRequest, "the body is not an object: %v", err)
		return
	}
	text := func(k string) string { s, _ := in[k].(string); return s }
	s := Status{Repository: repo, Key: text("key"), State: text("state"), Name: text("name"), URL: text("url"), Description: text("description")}
	switch {
	case s.Key == "" || utf8.RuneCountInString(s.Key) > maxBuildKey:
		b.violate(w, http.StatusBadRequest, "build key %q was blank or longer than %d characters", s.Key, maxBuildKey)
		return
	case s.URL == "" || utf8.RuneCountInString(s.URL) > maxBuildURL:
		b.violate(w, http.StatusBadRequest, "build status url was blank or longer than %d characters", maxBuildURL)
		return
	}
	b.mu.Lock()
	id, known := b.resolve(repo, commit)
	if !known {
		b.mu.Unlock()
		b.refuse(w, http.StatusBadRequest, "an invalid commit hash was provided: "+commit)
		return
	}
	s.Commit = id
	b.posts++
	n := b.posts
	b.mu.Unlock()
	be := providerapitest.Behavior{}
	if b.Post != nil {
		be = b.Post(n, s)
	}
	providerapitest.Write(w, http.StatusNoContent, be, func() any { b.Put(s); return nil },
		func(w http.ResponseWriter, code int, _ any) { w.WriteHeader(code) },
		func(w http.ResponseWriter, code int) { b.refuse(w, code, http.StatusText(code)) })
}

// resolve is the full id of a commit named by its id or a prefix of it. b.mu is held.
func (b *BitbucketDC) resolve(repo, id string) (string, bool) {
	if len(id) < minPartialCommitID {
		return "", false
	}
	full := b.history.Expand(repo, id)
	return full, full != ""
}

// ref resolves a branch (by its name, or refs/heads/ and its name) to its head, or else a
// commit id or a prefix of one. b.mu is held.
func (b *BitbucketDC) ref(repo, name string) (string, bool) {
	if head, ok := b.history.Branch(repo, strings.TrimPrefix(name, "refs/heads/")); ok {
		return head, true
	}
	return b.resolve(repo, name)
}

func (b *BitbucketDC) read(w http.ResponseWriter, r *http.Request, op, repo string, parts []string) {
	q := r.URL.Query()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.history.Known(repo) && !b.pulls.Has(repo) {
		b.refuse(w, http.StatusNotFound, "Repository "+repo+" does not exist.")
		return
	}
	start, limit, ok := b.page(w, q)
	if !ok {
		return
	}
	switch op {
	case OpGetBuild:
		id, known := b.resolve(repo, parts[7])
		s, found := b.statuses.Latest(repo, id, q.Get("key"))
		if !known || !found {
			b.refuse(w, http.StatusNotFound, "No build status with key "+q.Get("key"))
			return
		}
		b.answer(w, http.StatusOK, map[string]any{"key": s.Key, "state": s.State, "name": s.Name, "url": s.URL,
			"description": s.Description, "createdDate": s.At.UnixMilli(), "updatedDate": s.At.UnixMilli(), "ref": nil})
	case OpDefaultBranch:
		if _, ok := b.history.Branch(repo, b.history.DefaultBranch(repo)); !ok {
			b.refuse(w, http.StatusNotFound, "Repository "+repo+" has no default branch.")
			return
		}
		b.answer(w, http.StatusOK, map[string]any{"id": "refs/heads/" + b.history.DefaultBranch(repo), "displayId": b.history.DefaultBranch(repo),
			"type": "BRANCH", "isDefault": true})
	case OpGetPull, OpPullChanges, OpPullCommits:
		id, err := strconv.Atoi(parts[7])
		p, found := b.pulls.Get(repo, id)
		if err != nil || !found {
			b.refuse(w, http.StatusNotFound, "Pull request "+parts[7]+" does not exist in "+repo+".")
			return
		}
		commits := b.history.Between(repo, p.FromCommit, p.ToCommit)
		switch op {
		case OpGetPull:
			ref := func(branch, commit string) map[string]any {
				key, slug, _ := strings.Cut(repo, "/")
				return map[string]any{"id": "refs/heads/" + branch, "displayId": branch, "latestCommit": commit,
					"repository": map[string]any{"slug": slug, "project": map[string]any{"key": key}}}
			}
			b.answer(w, http.StatusOK, map[string]any{"id": p.ID, "version": 0, "title": p.Title, "state": "OPEN", "open": true,
				"closed": false, "fromRef": ref(p.FromBranch, p.FromCommit), "toRef": ref(p.ToBranch, p.ToCommit)})
		case OpPullChanges:
			changes := changesOf(commits)
			n := min(limit, b.maxChanges())
			listed := changes[:min(n, len(changes))]
			page := map[string]any{"fromHash": p.FromCommit, "toHash": p.ToCommit, "properties": map[string]any{"changeScope": "ALL"},
				"values": changesJSON(listed), "size": len(listed), "isLastPage": len(changes) <= n, "start": 0, "limit": n}
			if len(changes) > n {
				page["nextPageStart"] = n // as a page says; the server ignores start all the same
			}
			b.answer(w, http.StatusOK, page)
		case OpPullCommits:
			b.answer(w, http.StatusOK, pageOf(commitsJSON(commits), start, limit))
		}
	case OpCompareChanges, OpCompareCommits:
		from, ok := b.ref(repo, q.Get("from"))
		if !ok {
			b.refuse(w, http.StatusNotFound, "Commit '"+q.Get("from")+"' does not exist in repository '"+repo+"'.")
			return
		}
		to := q.Get("to")
		if to == "" {
			to = b.history.DefaultBranch(repo)
		}
		toID, ok := b.ref(repo, to)
		if !ok {
			b.refuse(w, http.StatusNotFound, "Commit '"+to+"' does not exist in repository '"+repo+"'.")
			return
		}
		commits := b.history.Between(repo, from, toID)
		if op == OpCompareChanges {
			base := b.history.MergeBase(repo, from, toID)
			if base == "" {
				b.refuse(w, http.StatusNotFound, "Commits '"+from+"' and '"+toID+"' have no common ancestor in repository '"+repo+"'.")
				return
			}
			changes := b.diff(repo, base, from)
			streamed := changes[:min(len(changes), b.maxChanges())]
			page := pageOf(changesJSON(streamed), start, limit)
			if len(streamed) < len(changes) && page["isLastPage"] == true { // cut: never the last page
				page["isLastPage"], page["nextPageStart"] = false, start+limit
			}
			b.answer(w, http.StatusOK, page)
			return
		}
		b.answer(w, http.StatusOK, pageOf(commitsJSON(commits), start, limit))
	}
}

func (b *BitbucketDC) maxChanges() int {
	if b.MaxChanges > 0 {
		return b.MaxChanges
	}
	return DefaultMaxChanges
}

// page reads start and limit (the description has checked they are numbers). b.mu is held.
func (b *BitbucketDC) page(w http.ResponseWriter, q map[string][]string) (start, limit int, ok bool) {
	start, limit = 0, defaultLimit
	if v := first(q["start"]); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			start = n
		} else {
			b.Violate("start %s", v)
			b.refuse(w, http.StatusBadRequest, "start "+v)
			return 0, 0, false
		}
	}
	if v := first(q["limit"]); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Violate("limit %s", v)
			b.refuse(w, http.StatusBadRequest, "limit "+v)
			return 0, 0, false
		}
		limit = n
	}
	maxLimit := b.MaxLimit
	if maxLimit <= 0 {
		maxLimit = DefaultMaxLimit
	}
	return start, min(limit, maxLimit), true
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// diff is the files whose content differs between base's tree and head's, each with the type
// the last of head's commits since base changing it gives it, in the order they change them;
// then those none of them changes (a merge's side taken whole), by path. b.mu is held.
func (b *BitbucketDC) diff(repo, base, head string) []Change {
	return providerapitest.TreeDiff(b.tree(repo, base), b.tree(repo, head), changesOf(b.history.Between(repo, head, base)),
		func(c Change) (string, string) { return c.Path, c.SrcPath },
		func(path string, added, removed bool) Change {
			return Change{Path: path, Type: providerapitest.Status(added, removed, "ADD", "DELETE", "MODIFY")}
		})
}

// tree is commit id's tree (providerapitest.History.Tree): a MOVE takes a file from its
// source path.
func (b *BitbucketDC) tree(repo, id string) map[string]string {
	return b.history.Tree(repo, id, func(c Commit) []providerapitest.FileChange {
		out := make([]providerapitest.FileChange, len(c.Changes))
		for i, ch := range c.Changes {
			out[i] = providerapitest.FileChange{Path: ch.Path, Removed: ch.Type == "DELETE"}
			if ch.Type == "MOVE" {
				out[i].From = ch.SrcPath
			}
		}
		return out
	})
}

func changesOf(commits []Commit) []Change {
	return providerapitest.Changed(providerapitest.Reversed(commits), func(c Commit) []Change { return c.Changes },
		func(c Change) string { return c.Path })
}

func pathJSON(p string) map[string]any {
	components := strings.Split(p, "/")
	name := components[len(components)-1]
	out := map[string]any{"components": components, "parent": strings.Join(components[:len(components)-1], "/"), "name": name,
		"toString": p}
	if _, ext, ok := strings.Cut(name, "."); ok {
		out["extension"] = ext
	}
	return out
}

func changesJSON(changes []Change) []map[string]any {
	out := make([]map[string]any, 0, len(changes))
	for _, c := range changes {
		e := map[string]any{"contentId": "abcdef0123abcdef4567abcdef8987abcdef6543", "fromContentId": "bcdef0123abcdef4567abcdef8987abcdef6543a",
			"path": pathJSON(c.Path), "executable": false, "percentUnchanged": -1, "type": c.Type, "nodeType": "FILE",
			"srcExecutable": false, "links": map[string]any{"self": []any{nil}}, "properties": map[string]any{"gitChangeType": c.Type}}
		if c.SrcPath != "" {
			e["srcPath"] = pathJSON(c.SrcPath)
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
			parents = append(parents, map[string]any{"id": p, "displayId": p[:min(len(p), shortCommitID)]})
		}
		person := map[string]any{"name": "Charlie", "emailAddress": "charlie@example.com"}
		out = append(out, map[string]any{"id": c.ID, "displayId": c.ID[:min(len(c.ID), shortCommitID)], "author": person,
			"authorTimestamp": 1548720847608, "committer": person, "committerTimestamp": 1548720847608, "message": c.Message,
			"parents": parents})
	}
	return out
}

// pageOf is the page of values from start, at most limit long, as Data Center writes one.
func pageOf(values []map[string]any, start, limit int) map[string]any {
	from := min(start, len(values))
	to := min(from+limit, len(values))
	page := map[string]any{"size": to - from, "limit": limit, "start": start, "isLastPage": to >= len(values), "values": values[from:to]}
	if to < len(values) {
		page["nextPageStart"] = to
	}
	return page
}
