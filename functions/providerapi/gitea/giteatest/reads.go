package giteatest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// The operations the fake serves, by their operationId in Gitea's API description.
const (
	OpCreateStatus   = "repoCreateStatus"
	OpCombinedStatus = "repoGetCombinedStatusByRef"
	OpGetRepo        = "repoGet"
	OpGetPull        = "repoGetPullRequest"
	OpPullFiles      = "repoGetPullRequestFiles"
	OpPullCommits    = "repoGetPullRequestCommits"
	OpCompare        = "repoCompareDiff"
)

// Gitea's own page sizes: a listing without limit serves DefaultPagingNum, and none serves
// more than MaxResponseItems ([api] DEFAULT_PAGING_NUM and MAX_RESPONSE_ITEMS, 30 and 50 by
// default).
const (
	DefaultPagingNum = 30
	MaxResponseItems = 50
)

// Commit is one commit the fake holds: its parent (none for a root), the further parents of a
// merge (Merged), its message and the files it changes against its first parent, as Gitea
// lists a commit's (git log --name-status -m --first-parent; older Gitea lists none of a
// merge's). A commit is added after its parents.
type Commit struct {
	SHA, Parent, Message string
	Merged               []string
	Files                []File
}

// File is a file a commit changes: Status is added, modified, deleted or renamed (then
// PreviousFilename is its old path).
type File struct {
	Filename, Status, PreviousFilename string
}

// Pull is one pull request the fake holds: its commits are those from BaseSHA (excluded) to
// HeadSHA along first parents, Base and Head its branches.
type Pull struct {
	Number            int
	Title, Base, Head string
	BaseSHA, HeadSHA  string
}

// parentOf is c's parents, the first first, as History reads them.
func parentOf(c Commit) []string {
	if c.Parent == "" {
		return nil
	}
	return append([]string{c.Parent}, c.Merged...)
}

// AddCommit adds c to repo.
func (g *Gitea) AddCommit(repo string, c Commit) { g.history.Add(repo, c) }

// AddPull adds (or replaces) pull request p of repo.
func (g *Gitea) AddPull(repo string, p Pull) { g.pulls.Put(repo, p.Number, p) }

// SetBranch points branch of repo at sha (a comparison may name a branch).
func (g *Gitea) SetBranch(repo, branch, sha string) { g.history.SetBranch(repo, branch, sha) }

// read answers a read (repoGet, repoGetPullRequest, repoGetPullRequestFiles,
// repoGetPullRequestCommits, repoCompareDiff) as Gitea's handlers do: a pull request's files
// are the diff from its base to its head, every file, paged by page and limit (at most
// MaxResponseItems) with the Link header, X-Total-Count and Gitea's X-Page, X-PerPage,
// X-PageCount and X-HasMore; its commits likewise, newest first, each with its files unless
// files=false; a comparison lists every commit of base...head, newest first, each with its
// files (none when CompareWithoutFiles), unpaged.
func (g *Gitea) read(w http.ResponseWriter, r *http.Request, op, repo string, parts []string, n int) {
	if code := providerapitest.Refusal(g.Answer, op, n); code != 0 {
		g.refuseRead(w, code)
		return
	}
	q := r.URL.Query()
	page, limit := 1, DefaultPagingNum
	for name, v := range map[string]*int{"page": &page, "limit": &limit} {
		if s := q.Get(name); s != "" {
			// The description types them as integers; Gitea takes anything below 1 as 1.
			n, _ := strconv.Atoi(s)
			*v = max(n, 1)
		}
	}
	limit = min(limit, MaxResponseItems)
	if g.MaxItems > 0 {
		limit = min(limit, g.MaxItems)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch op {
	case OpGetRepo:
		if !g.history.Has(repo) {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		g.answer(w, http.StatusOK, map[string]any{"id": 1, "full_name": repo, "name": parts[4], "owner": map[string]any{"login": parts[3]},
			"default_branch": g.defaultBranch(repo), "private": true, "permissions": map[string]any{"admin": false, "push": true, "pull": true}})
	case OpGetPull, OpPullFiles, OpPullCommits:
		number, _ := strconv.Atoi(parts[6])
		p, found := g.pulls.Get(repo, number)
		if !found {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		commits, _ := g.history.Line(repo, p.BaseSHA, p.HeadSHA)
		switch op {
		case OpGetPull:
			g.answer(w, http.StatusOK, map[string]any{"id": 1000 + p.Number, "number": p.Number, "title": p.Title, "state": "open",
				"head": map[string]any{"label": p.Head, "ref": p.Head, "sha": p.HeadSHA}, "base": map[string]any{"label": p.Base, "ref": p.Base, "sha": p.BaseSHA},
				"merge_base": p.BaseSHA, "mergeable": true, "merged": false})
		case OpPullFiles:
			files := changedFiles(commits)
			out := []map[string]any{}
			for _, f := range providerapitest.PageOf(files, page, limit) {
				out = append(out, g.changedFileJSON(r, repo, f, p.HeadSHA))
			}
			pageHeaders(w, r, page, limit, len(files))
			g.answer(w, http.StatusOK, out)
		case OpPullCommits:
			newest := providerapitest.Reversed(commits)
			out := []map[string]any{}
			for _, c := range providerapitest.PageOf(newest, page, limit) {
				out = append(out, commitJSON(r, repo, c, q.Get("files") != "false"))
			}
			pageHeaders(w, r, page, limit, len(newest))
			g.answer(w, http.StatusOK, out)
		}
	case OpCompare:
		basehead, err := url.PathUnescape(parts[6])
		base, head, ok := strings.Cut(basehead, "...")
		if err != nil || !ok {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		commits, found := g.compare(repo, g.history.Resolve(repo, base), g.history.Resolve(repo, head))
		if !found {
			g.refuseRead(w, http.StatusNotFound)
			return
		}
		out := []map[string]any{}
		for _, c := range commits {
			out = append(out, commitJSON(r, repo, c, !g.CompareWithoutFiles))
		}
		g.answer(w, http.StatusOK, map[string]any{"total_commits": len(out), "commits": out})
	}
}

// compare is what Gitea's comparison base...head lists: head's commits since its merge base
// with base (git log merge-base..head, through every parent), newest first; found is false
// when head is unknown or the two share no commit. A base the fake does not hold, which one of
// head's commits names as its parent, stands for a root (a test's history begins after it).
// head an ancestor of base lists nothing.
func (g *Gitea) compare(repo, base, head string) (commits []Commit, found bool) {
	if _, ok := g.history.Commit(repo, head); !ok {
		return nil, false
	}
	all := g.history.Between(repo, head, "")
	_, held := g.history.Commit(repo, base)
	for _, c := range all {
		if held && len(g.history.Between(repo, c.SHA, base)) == 0 || !held && slices.Contains(parentOf(c), base) {
			return g.history.Between(repo, head, base), true
		}
	}
	return nil, false
}

// refuseRead answers a read with code as Gitea does: 403 for a token without the scope, 404
// for what the token cannot see.
func (g *Gitea) refuseRead(w http.ResponseWriter, code int) {
	msg := http.StatusText(code)
	switch code {
	case http.StatusForbidden:
		msg = "token does not have at least one of required scope(s), required=[read:repository], token scope=write:issue"
	case http.StatusNotFound:
		msg = "The target couldn't be found."
	}
	g.answer(w, code, map[string]any{"message": msg, "url": "https://gitea.example.com/api/swagger", "errors": []string{}})
}

// defaultBranch is the repository's default branch: DefaultBranch, or main.
func (g *Gitea) defaultBranch(string) string {
	if g.DefaultBranch != "" {
		return g.DefaultBranch
	}
	return "main"
}

// changedFiles is what commits (oldest first) change together: each path once, with its last
// status.
func changedFiles(commits []Commit) []File {
	return providerapitest.Changed(commits, func(c Commit) []File { return c.Files }, func(f File) string { return f.Filename })
}

// changedFileJSON is a pull request's changed file as Gitea's convert.ToChangedFile writes it:
// its links name the head commit the diff was made at.
func (g *Gitea) changedFileJSON(r *http.Request, repo string, f File, head string) map[string]any {
	status := f.Status
	if status == "modified" {
		status = "changed" // Gitea's word
	}
	web := "http://" + r.Host + "/" + repo
	e := map[string]any{"filename": f.Filename, "status": status, "additions": 1, "deletions": 0, "changes": 1,
		"html_url":     web + "/src/commit/" + head + "/" + f.Filename,
		"contents_url": "http://" + r.Host + "/api/v1/repos/" + repo + "/contents/" + f.Filename + "?ref=" + head,
		"raw_url":      web + "/raw/commit/" + head + "/" + f.Filename}
	if f.PreviousFilename != "" {
		e["previous_filename"] = f.PreviousFilename
	}
	return e
}

// commitJSON is a commit as Gitea's convert.ToCommit writes it; its files are each path it
// adds, removes or modifies (a rename is a removal and an addition: Gitea lists files without
// renames).
func commitJSON(r *http.Request, repo string, c Commit, files bool) map[string]any {
	api := "http://" + r.Host + "/api/v1/repos/" + repo
	parents := []any{}
	for _, p := range parentOf(c) {
		parents = append(parents, map[string]any{"url": api + "/git/commits/" + p, "sha": p})
	}
	out := map[string]any{"url": api + "/git/commits/" + c.SHA, "sha": c.SHA, "html_url": "http://" + r.Host + "/" + repo + "/commit/" + c.SHA,
		"commit": map[string]any{"url": api + "/git/commits/" + c.SHA, "message": c.Message,
			"author":    map[string]any{"name": "A", "email": "a@example.com", "date": time.Unix(0, 0).UTC().Format(time.RFC3339)},
			"committer": map[string]any{"name": "A", "email": "a@example.com", "date": time.Unix(0, 0).UTC().Format(time.RFC3339)},
			"tree":      map[string]any{"sha": c.SHA}},
		"parents": parents, "stats": map[string]any{"total": len(c.Files), "additions": len(c.Files), "deletions": 0}}
	if files {
		list := []map[string]any{}
		for _, f := range c.Files {
			switch f.Status {
			case "renamed":
				list = append(list, map[string]any{"filename": f.PreviousFilename, "status": "removed"},
					map[string]any{"filename": f.Filename, "status": "added"})
			case "deleted":
				list = append(list, map[string]any{"filename": f.Filename, "status": "removed"})
			default:
				list = append(list, map[string]any{"filename": f.Filename, "status": f.Status})
			}
		}
		out["files"] = list
	}
	return out
}

// pageHeaders sets Gitea's paging headers for page of a listing of total items, limit a page:
// Link (next, last; prev, first past the first page), X-Total-Count, and X-Page, X-PerPage,
// X-PageCount and X-HasMore.
func pageHeaders(w http.ResponseWriter, r *http.Request, page, limit, total int) {
	pages := (total + limit - 1) / limit
	var links []string
	if page < pages {
		links = append(links, fmt.Sprintf(`<%s>; rel="next"`, providerapitest.PageURL(r, "page", page+1)),
			fmt.Sprintf(`<%s>; rel="last"`, providerapitest.PageURL(r, "page", pages)))
	}
	if page > 1 {
		links = append(links, fmt.Sprintf(`<%s>; rel="first"`, providerapitest.PageURL(r, "page", 1)),
			fmt.Sprintf(`<%s>; rel="prev"`, providerapitest.PageURL(r, "page", page-1)))
	}
	h := w.Header()
	if len(links) > 0 {
		h.Set("Link", strings.Join(links, ","))
	}
	h.Set("X-Total-Count", strconv.Itoa(total))
	h.Set("X-Page", strconv.Itoa(page))
	h.Set("X-PerPage", strconv.Itoa(limit))
	h.Set("X-PageCount", strconv.Itoa(pages))
	h.Set("X-HasMore", strconv.FormatBool(page < pages))
}
