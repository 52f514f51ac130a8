package publishtest

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/amiss-ci/amiss/internal/githubspec"
)

// The operations History serves, by their operationId in GitHub's OpenAPI description.
const (
	OpGetPull         = "pulls/get"
	OpListPullFiles   = "pulls/list-files"
	OpListPullCommits = "pulls/list-commits"
	OpCompareCommits  = "repos/compare-commits"
	OpGetCommit       = "repos/get-commit"
)

// HistoryCommit is one commit History holds: its parent (none for a root) and the files it
// changes.
type HistoryCommit struct {
	SHA, Parent, Message string
	Files                []ChangedFile
}

// ChangedFile is a file a commit changes (a diff-entry): Status is added, removed, modified,
// renamed, copied, changed or unchanged; PreviousFilename is a renamed file's old path.
type ChangedFile struct {
	Filename, Status, PreviousFilename string
}

// HistoryPull is one pull request History holds: its commits are those from BaseSHA
// (excluded) to HeadSHA along first parents.
type HistoryPull struct {
	Number            int
	Title, Base, Head string
	BaseSHA, HeadSHA  string
	State             string // "open" unless set
}

// History fakes GitHub's reads of a repository's pull requests and commits as its OpenAPI
// description (api.github.com, 2022-11-28) gives them, each request checked against the
// description itself (internal/githubspec):
//
//	pulls/get              GET /repos/{owner}/{repo}/pulls/{pull_number}
//	pulls/list-files       GET /repos/{owner}/{repo}/pulls/{pull_number}/files      per_page, page
//	pulls/list-commits     GET /repos/{owner}/{repo}/pulls/{pull_number}/commits    per_page, page
//	repos/compare-commits  GET /repos/{owner}/{repo}/compare/{basehead}             per_page, page
//	repos/get-commit       GET /repos/{owner}/{repo}/commits/{ref}                  per_page, page
//
// with GitHub's documented limits: a pull request's files are listed up to 3000, its commits
// up to 250; a comparison gives at most 300 files, on its first page; a commit's files are
// paginated up to 3000. per_page is 1 to 100 (default 30), page from 1. Each request must be
// a GET with a bearer token (Authorize decides which are valid: a refused one is answered 401)
// accepting application/vnd.github+json, with no other query parameter; anything else is a
// violation, answered as GitHub would (404, 415, 422) and recorded (Violations). Answers
// carry every property the description requires of the fields read, patches included (so
// that a client reading a page of files reads what GitHub sends).
type History struct {
	// Authorize says whether a bearer token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Answer, when it returns a status code, answers the n-th valid request (from 1) of the
	// operation op with it instead (403: "Resource not accessible by integration", the
	// answer to a token whose App lacks the permission).
	Answer func(op string, n int) int

	mu         sync.Mutex
	commits    map[string]map[string]HistoryCommit
	pulls      map[string]map[int]HistoryPull
	requests   map[string]int
	violations []string
}

// NewHistory returns an empty History accepting the tokens authorize accepts (nil: any).
func NewHistory(authorize func(token string) bool) *History {
	githubspec.Load() // its error is every request's (described)
	return &History{Authorize: authorize, commits: map[string]map[string]HistoryCommit{},
		pulls: map[string]map[int]HistoryPull{}, requests: map[string]int{}}
}

// AddCommit adds c to repo.
func (h *History) AddCommit(repo string, c HistoryCommit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.commits[repo] == nil {
		h.commits[repo] = map[string]HistoryCommit{}
	}
	h.commits[repo][c.SHA] = c
}

// AddPull adds (or replaces) pull request p of repo.
func (h *History) AddPull(repo string, p HistoryPull) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pulls[repo] == nil {
		h.pulls[repo] = map[int]HistoryPull{}
	}
	if p.State == "" {
		p.State = "open"
	}
	h.pulls[repo][p.Number] = p
}

// Requests returns how many valid requests of operation op were made.
func (h *History) Requests(op string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests[op]
}

// Violations returns the requests that broke the description.
func (h *History) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.violations...)
}

func (h *History) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	h.mu.Lock()
	h.violations = append(h.violations, msg)
	h.mu.Unlock()
	writeJSON(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

// ServeHTTP implements http.Handler.
func (h *History) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts, ok := appRequest(w, r, h.Authorize, h.violate, nil)
	if !ok {
		return
	}
	if r.Method != http.MethodGet || len(parts) < 4 || parts[0] != "repos" {
		h.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
		return
	}
	repo := parts[1] + "/" + parts[2]
	var op string
	switch {
	case parts[3] == "pulls" && len(parts) == 5:
		op = OpGetPull
	case parts[3] == "pulls" && len(parts) == 6 && parts[5] == "files":
		op = OpListPullFiles
	case parts[3] == "pulls" && len(parts) == 6 && parts[5] == "commits":
		op = OpListPullCommits
	case parts[3] == "compare" && len(parts) == 5:
		op = OpCompareCommits
	case parts[3] == "commits" && len(parts) == 5:
		op = OpGetCommit
	default:
		h.violate(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
		return
	}
	page, perPage, ok := h.paging(w, r.URL.Query(), op != OpGetPull)
	if !ok {
		return
	}
	h.mu.Lock()
	h.requests[op]++
	n := h.requests[op]
	h.mu.Unlock()
	if h.Answer != nil {
		if code := h.Answer(op, n); code != 0 {
			msg := http.StatusText(code)
			if code == http.StatusForbidden {
				msg = "Resource not accessible by integration"
			}
			writeJSON(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch op {
	case OpGetPull, OpListPullFiles, OpListPullCommits:
		number, err := strconv.Atoi(parts[4])
		p, found := h.pulls[repo][number]
		if err != nil || !found {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
			return
		}
		commits, _ := h.chain(repo, p.BaseSHA, p.HeadSHA)
		files := changedFiles(commits)
		switch op {
		case OpGetPull:
			writeJSON(w, http.StatusOK, map[string]any{"number": p.Number, "state": p.State, "title": p.Title,
				"head": map[string]any{"ref": p.Head, "sha": p.HeadSHA}, "base": map[string]any{"ref": p.Base, "sha": p.BaseSHA},
				"commits": len(commits), "changed_files": len(files)})
		case OpListPullFiles:
			writeJSON(w, http.StatusOK, filesJSON(pageOf(files[:min(len(files), 3000)], page, perPage)))
		case OpListPullCommits:
			writeJSON(w, http.StatusOK, commitsJSON(pageOf(commits[:min(len(commits), 250)], page, perPage)))
		}
	case OpCompareCommits:
		base, head, ok := strings.Cut(parts[4], "...")
		commits, found := h.chain(repo, base, head)
		if !ok || !found {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
			return
		}
		files := changedFiles(commits)
		answer := map[string]any{"status": "ahead", "ahead_by": len(commits), "behind_by": 0, "total_commits": len(commits),
			"commits": commitsJSON(pageOf(commits, page, perPage)), "files": []any{}}
		if page == 1 {
			answer["files"] = filesJSON(files[:min(len(files), 300)])
		}
		writeJSON(w, http.StatusOK, answer)
	case OpGetCommit:
		c, found := h.commits[repo][parts[4]]
		if !found {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "No commit found for SHA: " + parts[4]})
			return
		}
		answer := commitsJSON([]HistoryCommit{c})[0]
		answer["files"] = filesJSON(pageOf(c.Files[:min(len(c.Files), 3000)], page, perPage))
		writeJSON(w, http.StatusOK, answer)
	}
}

// paging reads per_page and page, the only query parameters of the listings (pulls/get takes
// none).
func (h *History) paging(w http.ResponseWriter, q url.Values, paged bool) (page, perPage int, ok bool) {
	page, perPage = 1, 30
	for name, vs := range q {
		if !paged || (name != "page" && name != "per_page") || len(vs) != 1 {
			h.violate(w, http.StatusUnprocessableEntity, "Invalid request: query parameter %q", name)
			return 0, 0, false
		}
		n, err := strconv.Atoi(vs[0])
		if err != nil || n < 1 || name == "per_page" && n > 100 {
			h.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s=%q", name, vs[0])
			return 0, 0, false
		}
		if name == "page" {
			page = n
		} else {
			perPage = n
		}
	}
	return page, perPage, true
}

// chain returns the commits from base (excluded) to head along parents, oldest first; found
// is false when head is not known or base is not reached.
func (h *History) chain(repo, base, head string) ([]HistoryCommit, bool) {
	var out []HistoryCommit
	for sha := head; sha != base; {
		c, ok := h.commits[repo][sha]
		if !ok {
			return nil, false
		}
		out = append([]HistoryCommit{c}, out...)
		sha = c.Parent
	}
	return out, true
}

// changedFiles is what commits change together: each path once, with its last status.
func changedFiles(commits []HistoryCommit) []ChangedFile {
	at := map[string]int{}
	var out []ChangedFile
	for _, c := range commits {
		for _, f := range c.Files {
			if i, ok := at[f.Filename]; ok {
				out[i] = f
				continue
			}
			at[f.Filename] = len(out)
			out = append(out, f)
		}
	}
	return out
}

func pageOf[T any](all []T, page, perPage int) []T {
	from := (page - 1) * perPage
	if from >= len(all) {
		return []T{}
	}
	return all[from:min(from+perPage, len(all))]
}

func filesJSON(files []ChangedFile) []map[string]any {
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		e := map[string]any{"sha": "1f0e2c3d4b5a69788796a5b4c3d2e1f0a9b8c7d6", "filename": f.Filename, "status": f.Status,
			"additions": 1, "deletions": 0, "changes": 1,
			"blob_url": "https://github.com/o/r/blob/sha/" + f.Filename, "raw_url": "https://github.com/o/r/raw/sha/" + f.Filename,
			"contents_url": "https://api.github.com/repos/o/r/contents/" + f.Filename,
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
		if c.Parent != "" {
			parents = append(parents, map[string]any{"sha": c.Parent})
		}
		out = append(out, map[string]any{"sha": c.SHA, "url": "https://api.github.com/repos/o/r/commits/" + c.SHA,
			"commit": map[string]any{"message": c.Message, "comment_count": 0}, "parents": parents})
	}
	return out
}
