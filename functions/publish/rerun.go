package publish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/amiss-ci/amiss/functions/subject"
)

// GitHubRerun reads from GitHub's API what a re-run's webhook lacks (the pull request title,
// the commits and their messages, the changed paths), with the installation token of the
// re-run's webhook, so that a Re-run evaluates the commit with the inputs its first run had:
//
//	GET {base}/repos/{owner}/{repo}/pulls/{n}                      pulls/get            Pull requests: read
//	GET {base}/repos/{owner}/{repo}/pulls/{n}/files                pulls/list-files     Pull requests: read
//	GET {base}/repos/{owner}/{repo}/pulls/{n}/commits              pulls/list-commits   Pull requests: read
//	GET {base}/repos/{owner}/{repo}/compare/{before}...{sha}       repos/compare-commits  Contents: read
//	GET {base}/repos/{owner}/{repo}/commits/{sha}                  repos/get-commit     Contents: read
//
// A commit that heads a pull request (the webhook named one, and the pull request's head is
// still the re-run's commit) is read as that pull request: its title, branches, files and
// commits. Otherwise (a push, or a pull request that has moved on to another head, whose
// files describe a different commit) it is read as the push that made the check suite:
// compare before...sha, or, when the suite names no before (a new branch), the commit alone.
//
// It lives in this package to share the publishers' GitHub client: the installation token
// and its one retry after a 401, the quick retries of a GET, and the classification of
// GitHub's answers (a rate limit is transient, with GitHub's wait).
type GitHubRerun struct {
	api
	auth githubAuth
}

// NewGitHubRerun returns a reader of re-runs' inputs authenticating as a GitHub App with
// tokens (the publisher's tokens, so they are cached once for both).
func NewGitHubRerun(baseURL string, tokens InstallationTokens, hc *http.Client) *GitHubRerun {
	a := newAPI(baseURL, "", hc, classifyGitHub)
	a.maxBody = maxListingBytes
	return &GitHubRerun{api: a, auth: githubAuth{tokens: tokens}}
}

// GitHub's own bounds on the listings read, and the page size asked for.
const (
	pullFilesListed   = 3000 // pulls/list-files lists at most 3000 files
	pullCommitsListed = 250  // pulls/list-commits lists at most 250 commits
	compareFilesGiven = 300  // repos/compare-commits gives at most 300 files
	inputsPerPage     = 100
	// maxListingBytes bounds one answer: a page of 100 files with their patches, or a compare
	// of 300 files, runs to megabytes. An answer cut by it does not decode, and the attempt
	// is retried, then ends in an error verdict: never evaluated on a partial list.
	maxListingBytes = 32 << 20
)

// The permissions each read needs, named in the reason a refused read gives.
const (
	pullsPermission    = "Pull requests: read"
	contentsPermission = "Contents: read"
)

// Read returns s with the inputs in need read from GitHub: each one read whole is added to
// s.Whole; one GitHub's listings cut is left out of it, with the reason in s.Unread. A pull
// request whose head is still s's commit is read as that pull request (its title, branches,
// files and commits); otherwise the push: compare Before...SHA, or the commit alone. A
// transient failure (GitHub's outage, a timeout, a rate limit) is returned as an *Error of
// class Transient: the attempt is retried. Any other failure (a permission the App lacks: 403
// or 404; a webhook without an installation) is not an error: the inputs in need are marked
// unread, naming what to grant, and the rules that need them fail closed.
func (g *GitHubRerun) Read(ctx context.Context, s subject.Subject, need subject.Inputs) (subject.Subject, error) {
	if need == 0 {
		return s, nil
	}
	f := s
	f.Commits, f.Paths, f.Unread = nil, nil, nil
	if f.Pull != nil {
		p := *f.Pull
		f.Pull = &p
	}
	f.Whole |= need
	err := g.fill(ctx, &f)
	if err == nil {
		f.Read = append(f.Read, fmt.Sprintf("github: %d commits, %d changed paths", len(f.Commits), len(f.Paths)))
		return f, nil
	}
	if ClassOf(err) == Transient {
		return s, fmt.Errorf("reading the inputs from GitHub: %w", err)
	}
	s.MarkUnread(need, reasonOf(err))
	return s, nil
}

// cutBy marks in as not held whole, GitHub's listing having cut it (what names the limit).
func cutBy(s *subject.Subject, in subject.Inputs, what string) {
	s.MarkUnread(in, "GitHub lists "+what)
}

// refused is a read GitHub refused for a permission (403, 404): the reason names it.
type refused struct {
	permission string
	err        error
}

func (r *refused) Error() string { return r.err.Error() }
func (r *refused) Unwrap() error { return r.err }

// reasonOf says what an operator must do about a read that failed for good.
func reasonOf(err error) string {
	var r *refused
	if errors.As(err, &r) {
		return fmt.Sprintf("GitHub answered %d; grant the GitHub App the %s permission", StatusOf(err), r.permission)
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (g *GitHubRerun) fill(ctx context.Context, s *subject.Subject) error {
	owner, repo, err := splitRepo(s.Repository)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("%s/repos/%s/%s", g.BaseURL, url.PathEscape(owner), url.PathEscape(repo))
	if s.Pull != nil && s.Pull.Number > 0 {
		current, err := g.pull(ctx, base, s)
		if err != nil || current {
			return err
		}
	}
	if b := s.Before; b != "" && strings.Trim(b, "0") != "" {
		return g.compare(ctx, base, s)
	}
	return g.commit(ctx, base, s)
}

// get reads one answer of GitHub's into v; permission names what a 403 or 404 lacks.
func (g *GitHubRerun) get(ctx context.Context, installation int64, u, what, permission string, v any) error {
	_, body, err := g.auth.send(ctx, &g.client, installation, http.MethodGet, u, nil)
	if err != nil {
		switch StatusOf(err) {
		case http.StatusForbidden, http.StatusNotFound:
			if ClassOf(err) != Transient { // not a rate limit
				return &refused{permission: permission, err: err}
			}
		}
		return err
	}
	return decodeAnswer(what, body, v)
}

// ghFile is an entry of a listing of changed files (diff-entry): a renamed file changes its
// old path too, as a push's removed list would say.
type ghFile struct {
	Filename         string `json:"filename"`
	Status           string `json:"status"`
	PreviousFilename string `json:"previous_filename"`
}

// ghListedCommit is an entry of a listing of commits (commit).
type ghListedCommit struct {
	SHA    string `json:"sha"`
	Commit struct {
		Message string `json:"message"`
	} `json:"commit"`
}

func addFiles(s *subject.Subject, files []ghFile) {
	seen := make(map[string]bool, len(s.Paths))
	for _, p := range s.Paths {
		seen[p] = true
	}
	for _, f := range files {
		for _, p := range []string{f.PreviousFilename, f.Filename} {
			if p != "" && !seen[p] {
				seen[p] = true
				s.Paths = append(s.Paths, p)
			}
		}
	}
}

func addCommits(s *subject.Subject, commits []ghListedCommit) {
	for _, c := range commits {
		s.Commits = append(s.Commits, subject.Commit{ID: c.SHA, Message: c.Commit.Message})
	}
}

// pull reads the pull request: its title and branches always, and, when its head is still
// the re-run's commit (current), its files and commits.
func (g *GitHubRerun) pull(ctx context.Context, base string, s *subject.Subject) (current bool, err error) {
	var pr struct {
		Title string `json:"title"`
		Head  struct {
			Ref string `json:"ref"`
			SHA string `json:"sha"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
		Commits      int `json:"commits"`
		ChangedFiles int `json:"changed_files"`
	}
	u := fmt.Sprintf("%s/pulls/%d", base, s.Pull.Number)
	if err := g.get(ctx, s.Installation, u, "the pull request", pullsPermission, &pr); err != nil {
		return false, err
	}
	s.Pull.Title, s.Pull.TargetBranch, s.Pull.SourceBranch = pr.Title, pr.Base.Ref, pr.Head.Ref
	if pr.Head.SHA != s.SHA {
		return false, nil
	}
	// Files: pages until one is short, or until the subject's bound is passed (what is beyond
	// it would be cut anyway), within what GitHub lists.
	var files []ghFile
	for page := 1; page <= pullFilesListed/inputsPerPage; page++ {
		var list []ghFile
		if err := g.get(ctx, s.Installation, fmt.Sprintf("%s/files?per_page=%d&page=%d", u, inputsPerPage, page),
			fmt.Sprintf("page %d of the pull request's files", page), pullsPermission, &list); err != nil {
			return false, err
		}
		files = append(files, list...)
		if len(list) < inputsPerPage {
			break
		}
	}
	addFiles(s, files)
	if pr.ChangedFiles > len(files) {
		cutBy(s, subject.PathsInput, "at most 3,000 files of a pull request")
	}
	var commits []ghListedCommit
	for page := 1; page <= (pullCommitsListed+inputsPerPage-1)/inputsPerPage; page++ {
		var list []ghListedCommit
		if err := g.get(ctx, s.Installation, fmt.Sprintf("%s/commits?per_page=%d&page=%d", u, inputsPerPage, page),
			fmt.Sprintf("page %d of the pull request's commits", page), pullsPermission, &list); err != nil {
			return false, err
		}
		commits = append(commits, list...)
		if len(list) < inputsPerPage {
			break
		}
	}
	addCommits(s, commits)
	if pr.Commits > len(commits) {
		cutBy(s, subject.CommitsInput, "at most 250 commits of a pull request")
	}
	return true, nil
}

// compare reads the push from Before to the commit: its commits (the newest MaxCommits of
// them) and its files (the 300 GitHub gives at most: more is Truncated).
func (g *GitHubRerun) compare(ctx context.Context, base string, s *subject.Subject) error {
	type comparison struct {
		TotalCommits int              `json:"total_commits"`
		Commits      []ghListedCommit `json:"commits"`
		Files        []ghFile         `json:"files"`
	}
	u := fmt.Sprintf("%s/compare/%s...%s", base, url.PathEscape(s.Before), url.PathEscape(s.SHA))
	var first comparison
	if err := g.get(ctx, s.Installation, fmt.Sprintf("%s?per_page=%d&page=1", u, inputsPerPage),
		"the comparison of the push", contentsPermission, &first); err != nil {
		return err
	}
	addFiles(s, first.Files)
	if len(first.Files) >= compareFilesGiven {
		cutBy(s, subject.PathsInput, "at most 300 files of a comparison")
	}
	commits := first.Commits
	if last := (first.TotalCommits + inputsPerPage - 1) / inputsPerPage; last > 1 {
		// The newest commits are on the last pages (the comparison lists oldest first).
		commits = nil
		for page := max(last-1, 2); page <= last; page++ {
			var more comparison
			if err := g.get(ctx, s.Installation, fmt.Sprintf("%s?per_page=%d&page=%d", u, inputsPerPage, page),
				fmt.Sprintf("page %d of the comparison of the push", page), contentsPermission, &more); err != nil {
				return err
			}
			commits = append(commits, more.Commits...)
		}
		if last == 2 {
			commits = append(first.Commits, commits...)
		}
		cutBy(s, subject.CommitsInput, "the newest commits of a long comparison only")
	}
	addCommits(s, commits)
	return nil
}

// commit reads the commit alone: its message and its files (paginated, within what GitHub
// lists and the subject's bound).
func (g *GitHubRerun) commit(ctx context.Context, base string, s *subject.Subject) error {
	u := fmt.Sprintf("%s/commits/%s", base, url.PathEscape(s.SHA))
	for page := 1; page <= pullFilesListed/inputsPerPage; page++ {
		var c struct {
			ghListedCommit
			Files []ghFile `json:"files"`
		}
		if err := g.get(ctx, s.Installation, fmt.Sprintf("%s?per_page=%d&page=%d", u, inputsPerPage, page),
			fmt.Sprintf("page %d of the commit", page), contentsPermission, &c); err != nil {
			return err
		}
		if page == 1 {
			addCommits(s, []ghListedCommit{c.ghListedCommit})
		}
		addFiles(s, c.Files)
		if len(c.Files) < inputsPerPage {
			return nil
		}
	}
	cutBy(s, subject.PathsInput, "at most 3,000 files of a commit")
	return nil
}
