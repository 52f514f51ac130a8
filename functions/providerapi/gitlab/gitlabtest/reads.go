package gitlabtest

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// The operations the fake serves, by their operationId in GitLab's API description (the status
// POST, which the copied description leaves out, by the id GitLab's document gives it).
const (
	OpCreateStatus = "postApiV4ProjectsIdStatusesSha"
	OpListStatuses = "getApiV4ProjectsIdRepositoryCommitsShaStatuses"
	OpGetProject   = "getApiV4ProjectsId"
	OpGetMR        = "getApiV4ProjectsIdMergeRequestsMergeRequestIid"
	OpMRDiffs      = "getApiV4ProjectsIdMergeRequestsMergeRequestIidDiffs"
	OpMRCommits    = "getApiV4ProjectsIdMergeRequestsMergeRequestIidCommits"
	OpCompare      = "getApiV4ProjectsIdRepositoryCompare"
)

// DiffMaxFiles is GitLab's default limit on the files of a diff (the instance's "Maximum
// files in a diff", diff_max_files): a merge request's diff or a comparison past it overflows.
const DiffMaxFiles = 1000

// Commit is one commit the fake holds: its parent (none for a root), the further parents of a
// merge (Merged), its message and the files it changes against its first parent, as GitLab
// lists a commit's (a push webhook's added, modified and removed; a commit's diff). A commit is
// added after its parents.
type Commit struct {
	SHA, Parent, Message string
	Merged               []string
	Files                []File
}

// File is a file a commit changes: Status is added, modified, deleted or renamed (then
// OldPath is its old path).
type File struct {
	Path, Status, OldPath string
}

// MergeRequest is one merge request the fake holds: its commits are those from BaseSHA
// (excluded) to HeadSHA along first parents, Source and Target its branches.
type MergeRequest struct {
	IID                   int
	Title, Source, Target string
	BaseSHA, HeadSHA      string
	// Preparing: GitLab has not made the merge request's diff yet (a merge request just
	// opened): it has no diff_refs and no changes_count, and lists no diffs and no commits.
	Preparing bool
}

// parentOf is c's parents, the first first, as History reads them.
func parentOf(c Commit) []string {
	if c.Parent == "" {
		return nil
	}
	return append([]string{c.Parent}, c.Merged...)
}

// AddCommit adds c to project.
func (g *GitLab) AddCommit(project string, c Commit) { g.history.Add(project, c) }

// AddMergeRequest adds (or replaces) merge request m of project.
func (g *GitLab) AddMergeRequest(project string, m MergeRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mrs.Put(project, m.IID, m)
}

// SetBranch points branch of project at sha (a comparison may name a branch).
func (g *GitLab) SetBranch(project, branch, sha string) { g.history.SetBranch(project, branch, sha) }

// read answers a read (getApiV4ProjectsId, the merge request, its diffs and commits, a
// comparison) as GitLab's API does: a merge request's diffs are those of its latest version,
// at most maxFiles of them (past it the diff overflows: changes_count is "N+"), paged by page
// and per_page (at most 100) with GitLab's paging headers; its commits are newest first,
// paged likewise; a comparison (compare) lists every commit, oldest first, and the diff,
// overflowing past maxFiles (compare_timeout true, the files past it left out), unpaged.
func (g *GitLab) read(w http.ResponseWriter, r *http.Request, op, project string, parts []string, n int) {
	if code := providerapitest.Refusal(g.Answer, op, n); code != 0 {
		g.refuseRead(w, code)
		return
	}
	q := r.URL.Query()
	page, perPage := 1, 20
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		page = v
	}
	if v, err := strconv.Atoi(q.Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	maxFiles := DiffMaxFiles
	if g.DiffMaxFiles > 0 {
		maxFiles = g.DiffMaxFiles
	}
	switch op {
	case OpGetProject:
		if !g.history.HasCommits(project) {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		g.answer(w, http.StatusOK, map[string]any{"id": 42, "path_with_namespace": project, "default_branch": g.defaultBranch(),
			"visibility": "private", "web_url": "http://" + r.Host + "/" + project})
	case OpGetMR, OpMRDiffs, OpMRCommits:
		iid, _ := strconv.Atoi(parts[5])
		m, found := g.mrs.Get(project, iid)
		if !found {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		commits, _ := g.history.Line(project, m.BaseSHA, m.HeadSHA)
		if m.Preparing {
			commits = nil
		}
		files := changedFiles(commits)
		switch op {
		case OpGetMR:
			var count, refs any
			if !m.Preparing {
				n := strconv.Itoa(min(len(files), maxFiles))
				if len(files) > maxFiles {
					n += "+"
				}
				count, refs = n, map[string]any{"base_sha": m.BaseSHA, "head_sha": m.HeadSHA, "start_sha": m.BaseSHA}
			}
			g.answer(w, http.StatusOK, map[string]any{"id": 1000 + m.IID, "iid": m.IID, "project_id": 42, "title": m.Title, "state": "opened",
				"source_branch": m.Source, "target_branch": m.Target, "sha": m.HeadSHA, "changes_count": count, "diff_refs": refs})
		case OpMRDiffs:
			kept := files[:min(len(files), maxFiles)]
			out := []map[string]any{}
			for _, f := range providerapitest.PageOf(kept, page, perPage) {
				out = append(out, diffJSON(f))
			}
			pageHeaders(w, r, page, perPage, len(kept))
			g.answer(w, http.StatusOK, out)
		case OpMRCommits:
			newest := providerapitest.Reversed(commits)
			out := []map[string]any{}
			for _, c := range providerapitest.PageOf(newest, page, perPage) {
				out = append(out, commitJSON(c))
			}
			pageHeaders(w, r, page, perPage, len(newest))
			g.answer(w, http.StatusOK, out)
		}
	case OpCompare:
		from, to := g.history.Resolve(project, q.Get("from")), g.history.Resolve(project, q.Get("to"))
		commits, files, found := g.compare(project, from, to, q.Get("straight") == "true")
		if !found {
			g.answer(w, http.StatusNotFound, map[string]string{"message": "404 Ref Not Found"})
			return
		}
		out, diffs := []map[string]any{}, []map[string]any{}
		for _, c := range commits {
			out = append(out, commitJSON(c))
		}
		for _, f := range files[:min(len(files), maxFiles)] {
			diffs = append(diffs, diffJSON(f))
		}
		var head any
		if len(out) > 0 {
			head = out[len(out)-1]
		}
		g.answer(w, http.StatusOK, map[string]any{"commit": head, "commits": out, "diffs": diffs, "compare_timeout": len(files) > maxFiles,
			"compare_same_ref": from == to, "web_url": "http://" + r.Host + "/" + project + "/-/compare/" + q.Get("from") + "..." + q.Get("to")})
	}
}

// compare is GitLab's comparison of from with to (GET /projects/:id/repository/compare, as
// GitLab's API description gives its straight parameter: "true for direct comparison between
// from and to (from..to), false to compare using merge base (from...to)"; lib/gitlab/git/
// compare.rb): its commits are to's that from lacks (git log from..to, Commit.between, in
// either mode), oldest first; its diff is from's merge base's tree against to's (git diff
// from...to), or from's tree against to's with straight (git diff from to). found is false
// when either commit is unknown or the two share none (GitLab answers 404 Ref Not Found). A
// from the fake does not hold, which one of to's commits names as a parent, stands for a root
// with no files (a test's history begins after it). The files are those whose content differs
// between the two trees, each with the status the last commit of the comparison changing it
// gives it, in the order the commits change them; then those no commit of the comparison
// changes (a merge's side taken whole, a branch forced back), by path.
func (g *GitLab) compare(project, from, to string, straight bool) (commits []Commit, files []File, found bool) {
	if _, ok := g.history.Commit(project, to); !ok {
		return nil, nil, false
	}
	_, held := g.history.Commit(project, from)
	base, found := "", false
	for _, c := range g.history.Between(project, to, "") { // newest first
		if !held && slices.Contains(parentOf(c), from) {
			base, found = from, true
			break
		}
		if held && len(g.history.Between(project, c.SHA, from)) == 0 {
			base, found = c.SHA, true
			break
		}
	}
	if !found {
		return nil, nil, false
	}
	if straight {
		base = from
	}
	commits = providerapitest.Reversed(g.history.Between(project, to, from))
	files = providerapitest.TreeDiff(g.tree(project, base), g.tree(project, to), changedFiles(commits),
		func(f File) (string, string) { return f.Path, f.OldPath },
		func(path string, added, removed bool) File {
			return File{Path: path, Status: providerapitest.Status(added, removed, "added", "deleted", "modified")}
		})
	return commits, files, true
}

// tree is commit sha's tree (providerapitest.History.Tree; a commit not held: none).
func (g *GitLab) tree(project, sha string) map[string]string {
	return g.history.Tree(project, sha, func(c Commit) []providerapitest.FileChange {
		out := make([]providerapitest.FileChange, len(c.Files))
		for i, f := range c.Files {
			out[i] = providerapitest.FileChange{Path: f.Path, From: f.OldPath, Removed: f.Status == "deleted"}
		}
		return out
	})
}

// refuseRead answers a read with code as GitLab does: 401 for a token it does not take, 403
// for a token without the scope, 404 for what the token cannot see.
func (g *GitLab) refuseRead(w http.ResponseWriter, code int) {
	switch code {
	case http.StatusForbidden:
		g.answer(w, code, map[string]string{"error": "insufficient_scope",
			"error_description": "The request requires higher privileges than provided by the access token.", "scope": "api read_api"})
	case http.StatusNotFound:
		g.answer(w, code, map[string]string{"message": "404 Project Not Found"})
	default:
		g.refuse(w, code)
	}
}

func (g *GitLab) defaultBranch() string {
	if g.DefaultBranch != "" {
		return g.DefaultBranch
	}
	return "main"
}

// changedFiles is what commits (oldest first) change together: each path once, with its last
// status.
func changedFiles(commits []Commit) []File {
	return providerapitest.Changed(commits, func(c Commit) []File { return c.Files }, func(f File) string { return f.Path })
}

// diffJSON is a file's diff as GitLab's Entities::Diff writes it.
func diffJSON(f File) map[string]any {
	old := f.Path
	if f.OldPath != "" {
		old = f.OldPath
	}
	return map[string]any{"old_path": old, "new_path": f.Path, "a_mode": "100644", "b_mode": "100644",
		"new_file": f.Status == "added", "renamed_file": f.Status == "renamed", "deleted_file": f.Status == "deleted",
		"generated_file": false, "collapsed": false, "too_large": false,
		"diff": "@@ -0,0 +1 @@\n+a line of " + f.Path + ", as the diff GitLab sends with each file\n"}
}

// commitJSON is a commit as GitLab's Entities::Commit writes it.
func commitJSON(c Commit) map[string]any {
	parents := append([]string{}, parentOf(c)...)
	at := time.Unix(0, 0).UTC().Format(time.RFC3339)
	title := c.Message
	for i, r := range c.Message {
		if r == '\n' {
			title = c.Message[:i]
			break
		}
	}
	return map[string]any{"id": c.SHA, "short_id": c.SHA[:min(8, len(c.SHA))], "created_at": at, "parent_ids": parents, "title": title,
		"message": c.Message, "author_name": "A", "author_email": "a@example.com", "authored_date": at, "committer_name": "A",
		"committer_email": "a@example.com", "committed_date": at, "trailers": map[string]any{}, "extended_trailers": map[string]any{},
		"web_url": "https://gitlab.example.com/-/commit/" + c.SHA}
}

// pageHeaders sets GitLab's offset-pagination headers for page of a listing of total items,
// perPage a page: X-Page, X-Per-Page, X-Next-Page (empty on the last), X-Prev-Page, X-Total,
// X-Total-Pages and Link.
func pageHeaders(w http.ResponseWriter, r *http.Request, page, perPage, total int) {
	pages := max((total+perPage-1)/perPage, 1)
	next, prev := "", ""
	if page < pages {
		next = strconv.Itoa(page + 1)
	}
	if page > 1 {
		prev = strconv.Itoa(page - 1)
	}
	h := w.Header()
	h.Set("X-Page", strconv.Itoa(page))
	h.Set("X-Per-Page", strconv.Itoa(perPage))
	h.Set("X-Next-Page", next)
	h.Set("X-Prev-Page", prev)
	h.Set("X-Total", strconv.Itoa(total))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	providerapitest.Link(w, r, "page", page, perPage, total)
}
