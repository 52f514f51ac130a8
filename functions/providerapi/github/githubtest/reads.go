package githubtest

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// The reads the fake serves, by their operationId in GitHub's OpenAPI description.
const (
	OpGetPull         = "pulls/get"
	OpListPullFiles   = "pulls/list-files"
	OpListPullCommits = "pulls/list-commits"
	OpCompareCommits  = "repos/compare-commits"
	OpGetCommit       = "repos/get-commit"
	OpGetRepo         = "repos/get"
)

// HistoryCommit is one commit the fake holds: its parent (none for a root), the further
// parents of a merge (Merged), and the files it changes against its first parent (Parent), as
// GitHub lists a commit's files. A commit is added after its parents.
type HistoryCommit struct {
	SHA, Parent, Message string
	Merged               []string
	Files                []ChangedFile
}

// ChangedFile is a file a commit changes (a diff-entry): Status is added, removed, modified,
// renamed, copied, changed or unchanged; PreviousFilename is a renamed file's old path.
type ChangedFile struct {
	Filename, Status, PreviousFilename string
}

// HistoryPull is one pull request the fake holds: its commits are those from BaseSHA
// (excluded) to HeadSHA along first parents.
type HistoryPull struct {
	Number            int
	Title, Base, Head string
	BaseSHA, HeadSHA  string
	State             string // "open" unless set
}

// parentOf is c's parents, the first first, as History reads them.
func parentOf(c HistoryCommit) []string {
	if c.Parent == "" {
		return nil
	}
	return append([]string{c.Parent}, c.Merged...)
}

// AddCommit adds c to repo.
func (g *GitHub) AddCommit(repo string, c HistoryCommit) { g.history.Add(repo, c) }

// AddPull adds (or replaces) pull request p of repo.
func (g *GitHub) AddPull(repo string, p HistoryPull) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.State == "" {
		p.State = "open"
	}
	g.pulls.Put(repo, p.Number, p)
}

// SetBranch points repo's branch name at commit sha (a comparison names a branch or a commit).
func (g *GitHub) SetBranch(repo, name, sha string) { g.history.SetBranch(repo, name, sha) }

// SetDefaultBranch names repo's default branch ("main" unless set).
func (g *GitHub) SetDefaultBranch(repo, name string) { g.history.SetDefaultBranch(repo, name) }

// read answers a read op (pulls/get, pulls/list-files, pulls/list-commits,
// repos/compare-commits, repos/get-commit) with GitHub's documented limits: a pull request's
// files are listed up to 3000, its commits up to 250; a comparison gives at most 300 files,
// on its first page; a commit's files are paged up to 3000. Listings take per_page and page,
// and carry GitHub's Link header; answers carry every property the description requires of
// the fields read, patches included (so that a client reading a page of files reads what
// GitHub sends).
//
// The comparison and the commit, as GitHub's REST reference ("REST API endpoints for commits",
// API version 2022-11-28) words them:
//   - Compare two commits: "When using pagination: The list of changed files is only shown on
//     the first page of results, and it includes up to 300 changed files for the entire
//     comparison. The results are returned in chronological order". Its commits are those of
//     HEAD since its merge base with BASE (git log BASE..HEAD), total_commits their number.
//   - Get a commit: "If there are more than 300 files in the commit diff and the default JSON
//     media type is requested, the response will include pagination link headers for the
//     remaining files, up to a limit of 3000 files. Each page contains the static commit
//     information, and the only changes are to the file listing." Without per_page a page
//     holds 300 files; with it, per_page. A commit's files are what it changes against its
//     first parent (the fake's commits name their files, and have one parent).
func (g *GitHub) read(w http.ResponseWriter, r *http.Request, op, repo string, parts []string) {
	q := r.URL.Query()
	for name := range q {
		if op == OpGetPull || (name != "page" && name != "per_page") {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: query parameter %q", name)
			return
		}
	}
	page, perPage, ok := g.pageQuery(w, q)
	if !ok {
		return
	}
	if code := providerapitest.Refusal(g.Answer, op, g.Tally(op)); code != 0 {
		msg := http.StatusText(code)
		if code == http.StatusForbidden {
			msg = "Resource not accessible by integration"
		}
		g.refuse(w, code, msg)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch op {
	case OpGetPull, OpListPullFiles, OpListPullCommits:
		number, err := strconv.Atoi(parts[4])
		p, found := g.pulls.Get(repo, number)
		if err != nil || !found {
			g.refuse(w, http.StatusNotFound, "Not Found")
			return
		}
		commits, _ := g.history.Line(repo, p.BaseSHA, p.HeadSHA)
		files := changedFiles(commits)
		switch op {
		case OpGetPull:
			g.answer(w, http.StatusOK, map[string]any{"number": p.Number, "state": p.State, "title": p.Title,
				"head": map[string]any{"ref": p.Head, "sha": p.HeadSHA}, "base": map[string]any{"ref": p.Base, "sha": p.BaseSHA},
				"commits": len(commits), "changed_files": len(files)})
		case OpListPullFiles:
			listed := files[:min(len(files), 3000)]
			link(w, r, page, perPage, len(listed))
			g.answer(w, http.StatusOK, filesJSON(pageOf(listed, page, perPage), p.HeadSHA))
		case OpListPullCommits:
			listed := commits[:min(len(commits), 250)]
			link(w, r, page, perPage, len(listed))
			g.answer(w, http.StatusOK, commitsJSON(pageOf(listed, page, perPage)))
		}
	case OpGetRepo:
		g.answer(w, http.StatusOK, map[string]any{"id": 1, "name": parts[2], "full_name": repo, "default_branch": g.history.DefaultBranch(repo)})
	case OpCompareCommits:
		// BASE...HEAD: the commits of HEAD that BASE lacks (git log BASE..HEAD, each a branch
		// or a commit), and what HEAD changes since the merge base of the two.
		base, head, ok := strings.Cut(strings.Join(parts[4:], "/"), "...")
		cmp, found := g.compare(repo, g.history.Resolve(repo, base), g.history.Resolve(repo, head))
		if !ok || !found {
			g.refuse(w, http.StatusNotFound, "Not Found")
			return
		}
		status := "identical"
		switch {
		case len(cmp.commits) > 0 && cmp.behind > 0:
			status = "diverged"
		case len(cmp.commits) > 0:
			status = "ahead"
		case cmp.behind > 0:
			status = "behind"
		}
		answer := map[string]any{"status": status, "ahead_by": len(cmp.commits), "behind_by": cmp.behind, "total_commits": len(cmp.commits),
			"merge_base_commit": commitsJSON([]HistoryCommit{cmp.mergeBase})[0],
			"commits":           commitsJSON(pageOf(cmp.commits, page, perPage)), "files": []any{}}
		if page == 1 {
			answer["files"] = filesJSON(cmp.files[:min(len(cmp.files), 300)], g.history.Resolve(repo, head))
		}
		link(w, r, page, perPage, len(cmp.commits))
		g.answer(w, http.StatusOK, answer)
	case OpGetCommit:
		c, found := g.history.Commit(repo, parts[4])
		if !found {
			g.refuse(w, http.StatusNotFound, "No commit found for SHA: "+parts[4])
			return
		}
		answer := commitsJSON([]HistoryCommit{c})[0]
		if !q.Has("per_page") {
			perPage = 300 // the files of a page, by default
		}
		listed := c.Files[:min(len(c.Files), 3000)]
		answer["files"] = filesJSON(pageOf(listed, page, perPage), c.SHA)
		link(w, r, page, perPage, len(listed))
		g.answer(w, http.StatusOK, answer)
	}
}

// comparison is what the fake answers for base...head: head's commits that base lacks, oldest
// first; base's that head lacks, counted; the merge base; and the files that differ between the
// merge base's tree and head's.
type comparison struct {
	commits   []HistoryCommit
	behind    int
	mergeBase HistoryCommit
	files     []ChangedFile
}

// compare reads base...head from the history; found is false when head is unknown or the two
// share no commit (GitHub answers 404). The merge base is the newest commit both reach (a
// commit is added after its parents). The files are the paths whose content differs between
// the merge base's tree and head's, each with its status as the last of the commits changing
// it gives it (a renamed file's, when its new or its old path differs), in the order the
// commits change them; then those no commit of the comparison changes (a merge's side taken
// whole), by path.
func (g *GitHub) compare(repo, base, head string) (comparison, bool) {
	if base == head { // identical, whatever the fake holds (amiss check compares HEAD...HEAD)
		return comparison{mergeBase: HistoryCommit{SHA: head}}, true
	}
	if _, ok := g.history.Commit(repo, head); !ok {
		return comparison{}, false
	}
	commits := providerapitest.Reversed(g.history.Between(repo, head, base))
	behind := len(g.history.Between(repo, base, head))
	// The newest commit head reaches that base reaches too. A base the fake does not hold,
	// which one of head's commits names as its parent, stands for a root with no files (a
	// test's history begins after it).
	var mb HistoryCommit
	found := false
	for _, c := range g.history.Between(repo, head, "") { // newest first
		if len(g.history.Between(repo, c.SHA, base)) == 0 {
			mb, found = c, true
			break
		}
		if _, held := g.history.Commit(repo, base); !held && slices.Contains(parentOf(c), base) {
			mb, found = HistoryCommit{SHA: base}, true
			break
		}
	}
	if !found {
		return comparison{}, false
	}
	files := providerapitest.TreeDiff(g.tree(repo, mb.SHA), g.tree(repo, head), changedFiles(commits),
		func(f ChangedFile) (string, string) { return f.Filename, f.PreviousFilename },
		func(path string, added, removed bool) ChangedFile {
			return ChangedFile{Filename: path, Status: providerapitest.Status(added, removed, "added", "removed", "modified")}
		})
	return comparison{commits: commits, behind: behind, mergeBase: mb, files: files}, true
}

// tree is commit sha's tree (providerapitest.History.Tree).
func (g *GitHub) tree(repo, sha string) map[string]string {
	return g.history.Tree(repo, sha, func(c HistoryCommit) []providerapitest.FileChange {
		out := make([]providerapitest.FileChange, len(c.Files))
		for i, f := range c.Files {
			out[i] = providerapitest.FileChange{Path: f.Filename, From: f.PreviousFilename, Removed: f.Status == "removed"}
		}
		return out
	})
}

// changedFiles is what commits (oldest first) change together: each path once, with its last
// status.
func changedFiles(commits []HistoryCommit) []ChangedFile {
	return providerapitest.Changed(commits, func(c HistoryCommit) []ChangedFile { return c.Files },
		func(f ChangedFile) string { return f.Filename })
}

// filesJSON is a listing of files as GitHub answers it at commit ref: each file's links name
// the commit (blob and raw URLs in their path, the contents URL in its ref).
func filesJSON(files []ChangedFile, ref string) []map[string]any {
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		e := map[string]any{"sha": "1f0e2c3d4b5a69788796a5b4c3d2e1f0a9b8c7d6", "filename": f.Filename, "status": f.Status,
			"additions": 1, "deletions": 0, "changes": 1,
			"blob_url": "https://github.com/o/r/blob/" + ref + "/" + f.Filename, "raw_url": "https://github.com/o/r/raw/" + ref + "/" + f.Filename,
			"contents_url": "https://api.github.com/repos/o/r/contents/" + f.Filename + "?ref=" + ref,
			"patch":        "@@ -0,0 +1 @@\n+a line of " + f.Filename + ", as a patch GitHub sends with each file of a listing"}
		if f.PreviousFilename != "" {
			e["previous_filename"] = f.PreviousFilename
		}
		out = append(out, e)
	}
	return out
}

func commitsJSON(commits []HistoryCommit) []map[string]any {
	out := make([]map[string]any, 0, len(commits))
	for _, c := range commits {
		parents := []any{}
		for _, p := range parentOf(c) {
			parents = append(parents, map[string]any{"sha": p})
		}
		out = append(out, map[string]any{"sha": c.SHA, "url": "https://api.github.com/repos/o/r/commits/" + c.SHA,
			"commit": map[string]any{"message": c.Message, "comment_count": 0}, "parents": parents})
	}
	return out
}
