package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Reads of what a webhook leaves out: a pull request, its files and commits, a comparison of
// two commits, a commit and its files. Each pages as GitHub documents it (per_page up to 100,
// the Link header's next page), within GitHub's own limits on the listing and a bound the
// caller gives, and reads at most maxListingBytes of an answer.
//
//	GET {base}/repos/{owner}/{repo}/pulls/{n}                      pulls/get              Pull requests: read
//	GET {base}/repos/{owner}/{repo}/pulls/{n}/files                pulls/list-files       Pull requests: read
//	GET {base}/repos/{owner}/{repo}/pulls/{n}/commits              pulls/list-commits     Pull requests: read
//	GET {base}/repos/{owner}/{repo}/compare/{before}...{sha}       repos/compare-commits  Contents: read
//	GET {base}/repos/{owner}/{repo}/commits/{sha}                  repos/get-commit       Contents: read
//	GET {base}/repos/{owner}/{repo}                                repos/get              Metadata: read

// GitHub's own bounds on the listings read, and the page size asked for.
const (
	PullFilesListed   = 3000 // pulls/list-files lists at most 3000 files
	PullCommitsListed = 250  // pulls/list-commits lists at most 250 commits
	CompareFilesGiven = 300  // repos/compare-commits gives at most 300 files
	CommitFilesListed = 3000 // repos/get-commit lists at most 3000 files
	perPage           = 100
	// maxListingBytes bounds one answer: a page of 100 files with their patches, or a compare
	// of 300 files, runs to megabytes. An answer cut by it is never taken as a partial
	// list: the input it was for is marked unread, naming the bound (asking again gets the same).
	maxListingBytes = 32 << 20
)

// The permissions each read needs, named in the reason a refused read gives.
const (
	PullsPermission    = "Pull requests: read"
	ContentsPermission = "Contents: read"
	MetadataPermission = "Metadata: read"
)

// Refused is a read GitHub refused for a permission the credential lacks (403 that is no rate
// limit, or 404, which GitHub answers for what a credential may not see): Permission names it.
type Refused struct {
	Permission string
	Err        error
}

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

// Repository splits owner/name.
func Repository(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("repository %q is not owner/name", repo)}
	}
	return owner, name, nil
}

// RepoPath is /repos/{owner}/{repo} of repo (owner/name), escaped.
func RepoPath(repo string) (string, error) {
	owner, name, err := Repository(repo)
	if err != nil {
		return "", err
	}
	return "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name), nil
}

// get reads one answer into v; permission names what a 403 or 404 lacks.
func (c *Client) get(ctx context.Context, installation int64, u, what, permission string, v any) (*providerapi.Answer, error) {
	a, err := c.Do(ctx, installation, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes})
	if err != nil {
		return nil, refusedFor(err, permission)
	}
	return a, a.Decode(what, v)
}

func refusedFor(err error, permission string) error {
	switch providerapi.StatusOf(err) {
	case http.StatusForbidden, http.StatusNotFound:
		if providerapi.ClassOf(err) != providerapi.Transient { // not a rate limit
			return &Refused{Permission: permission, Err: err}
		}
	}
	return err
}

// list reads a listing from u by its Link header into a slice, until no next page, a page
// short of perPage, or max entries; what names a page in errors.
func list[T any](ctx context.Context, c *Client, installation int64, u, what, permission string, max int) ([]T, error) {
	var all []T
	page := 0
	err := c.Pages(ctx, installation, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes}, (max+perPage-1)/perPage+1,
		func(a *providerapi.Answer) (bool, error) {
			page++
			var items []T
			if err := a.Decode(fmt.Sprintf("page %d of %s", page, what), &items); err != nil {
				return false, err
			}
			all = append(all, items...)
			return len(items) == perPage && len(all) < max, nil
		})
	if err != nil {
		return nil, refusedFor(err, permission)
	}
	return all, nil
}

// PullRequest is what pulls/get says of a pull request, as far as read.
type PullRequest struct {
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

// ChangedFile is an entry of a listing of changed files (diff-entry).
type ChangedFile struct {
	Filename         string `json:"filename"`
	Status           string `json:"status"`
	PreviousFilename string `json:"previous_filename"`
	// ContentsURL names the commit the file was listed at (its ref).
	ContentsURL string `json:"contents_url"`
}

// Commit is an entry of a listing of commits (schema commit), as far as read.
type Commit struct {
	SHA    string `json:"sha"`
	Commit struct {
		Message string `json:"message"`
	} `json:"commit"`
	// Parents are the commit's parents, the first first.
	Parents []struct {
		SHA string `json:"sha"`
	} `json:"parents"`
}

// Repo is what repos/get says of a repository, as far as read.
type Repo struct {
	DefaultBranch string `json:"default_branch"`
}

// GetRepository reads repo (owner/name).
func (c *Client) GetRepository(ctx context.Context, installation int64, repo string) (Repo, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return Repo{}, err
	}
	var r Repo
	_, err = c.get(ctx, installation, base, "the repository", MetadataPermission, &r)
	return r, err
}

// PullRequest reads pull request n of repo.
func (c *Client) PullRequest(ctx context.Context, installation int64, repo string, n int) (PullRequest, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return PullRequest{}, err
	}
	var pr PullRequest
	_, err = c.get(ctx, installation, fmt.Sprintf("%s/pulls/%d", base, n), "the pull request", PullsPermission, &pr)
	return pr, err
}

// PullFiles lists the files pull request n changes: at most max (GitHub lists 3000 at most).
func (c *Client) PullFiles(ctx context.Context, installation int64, repo string, n, max int) ([]ChangedFile, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return nil, err
	}
	return list[ChangedFile](ctx, c, installation, fmt.Sprintf("%s/pulls/%d/files?per_page=%d", base, n, perPage),
		"the pull request's files", PullsPermission, min(max, PullFilesListed))
}

// PullCommits lists pull request n's commits, oldest first (GitHub lists the first 250).
func (c *Client) PullCommits(ctx context.Context, installation int64, repo string, n int) ([]Commit, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return nil, err
	}
	return list[Commit](ctx, c, installation, fmt.Sprintf("%s/pulls/%d/commits?per_page=%d", base, n, perPage),
		"the pull request's commits", PullsPermission, PullCommitsListed)
}

// Comparison is what repos/compare-commits says of base...head, as far as read: its files
// are what head changes since the merge base of the two, its commits head's that base lacks.
type Comparison struct {
	TotalCommits int `json:"total_commits"`
	// BehindBy counts base's commits that head lacks.
	BehindBy int           `json:"behind_by"`
	Commits  []Commit      `json:"commits"`
	Files    []ChangedFile `json:"files"`
	// MergeBase is the merge base of base and head.
	MergeBase struct {
		SHA string `json:"sha"`
	} `json:"merge_base_commit"`
}

// Compare reads base...head: its files (GitHub gives them, at most 300, on the first page) and
// its commits, oldest first; when there are more than newest, only the newest (at least newest
// of them) are read, from the last pages. newest 0 reads the first page alone (its files, and
// its commits, the oldest 100).
func (c *Client) Compare(ctx context.Context, installation int64, repo, base, head string, newest int) (Comparison, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return Comparison{}, err
	}
	u := fmt.Sprintf("%s/compare/%s...%s", rp, url.PathEscape(base), url.PathEscape(head))
	var first Comparison
	if _, err := c.get(ctx, installation, fmt.Sprintf("%s?per_page=%d&page=1", u, perPage), "the comparison", ContentsPermission, &first); err != nil {
		return Comparison{}, err
	}
	last := (first.TotalCommits + perPage - 1) / perPage
	if last <= 1 || newest <= 0 {
		return first, nil
	}
	// The last page may be short: the newest commits span the last ceil(newest/perPage)+1.
	from := last - (newest+perPage-1)/perPage
	var commits []Commit
	for page := max(from, 2); page <= last; page++ {
		var more Comparison
		if _, err := c.get(ctx, installation, fmt.Sprintf("%s?per_page=%d&page=%d", u, perPage, page),
			fmt.Sprintf("page %d of the comparison", page), ContentsPermission, &more); err != nil {
			return Comparison{}, err
		}
		commits = append(commits, more.Commits...)
	}
	if from <= 1 {
		commits = append(first.Commits, commits...)
	}
	first.Commits = commits
	return first, nil
}

// CommitFiles reads commit sha: its message and its files (what it changes against its
// first parent), at least max of them when it has that many (GitHub lists 3000 at most), and
// how many pages that took. GitHub pages a commit's files by the Link header, every page with
// the commit's own fields; the listing is read until no page follows or max is reached,
// whatever the size of a page (GitHub's is 300 files when per_page is not given).
func (c *Client) CommitFiles(ctx context.Context, installation int64, repo, sha string, max int) (Commit, []ChangedFile, int, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return Commit{}, nil, 0, err
	}
	max = min(max, CommitFilesListed)
	var commit Commit
	var files []ChangedFile
	page := 0
	err = c.Pages(ctx, installation, providerapi.Request{Method: http.MethodGet, URL: fmt.Sprintf("%s/commits/%s?per_page=%d", rp,
		url.PathEscape(sha), perPage), MaxBytes: maxListingBytes}, (max+perPage-1)/perPage+1, func(a *providerapi.Answer) (bool, error) {
		page++
		var c struct {
			Commit
			Files []ChangedFile `json:"files"`
		}
		if err := a.Decode(fmt.Sprintf("page %d of commit %s", page, sha), &c); err != nil {
			return false, err
		}
		if page == 1 {
			commit = c.Commit
		}
		files = append(files, c.Files...)
		return len(files) < max, nil
	})
	if err != nil {
		return Commit{}, nil, page, refusedFor(err, ContentsPermission)
	}
	return commit, files, page, nil
}

// Read returns s with the inputs in need read from GitHub (the runner's InputReader): each
// one read whole is added to s.Whole; one GitHub's listing cuts is marked unread, naming the
// limit, and the rules that need it fail closed. Only what need names is read:
//
//   - a pull request (the webhook named one): its title and branches where need asks (those
//     the webhook carried stay: they are the event's); when its head is still
//     s's commit, its files and commits; when it has moved on (its files would describe
//     another commit), the comparison of its target branch with s's commit (what the pull
//     request changed at that commit, as its own event read it);
//   - a push: compare before...sha, or, when the webhook names no before (a new branch), the
//     comparison of the repository's default branch with the commit (what the branch brings);
//     the push that creates the default branch names nothing to compare with, and its commits
//     and paths are marked unread.
//
// A transient failure (GitHub's outage, a timeout, a rate limit) is returned as an error of
// class Transient: the attempt is retried. Any other failure (a permission the credential
// lacks: 403 or 404; a webhook without an installation) is not an error: the inputs in need
// are marked unread, naming what to grant.
func (c *Client) Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	return providerapi.ReadInputs(s, need, "GitHub", func(f *change.Change) (int, error) {
		if need.Has(change.PathsInput) {
			// A push webhook's lists (each commit's files against its first parent) name
			// paths its commits change, though not always all it changes: kept.
			providerapi.AddPaths(f, s.Paths...)
		}
		requests := 0
		if need.Has(change.PullInput) && f.Pull == nil {
			// A re-run whose webhook names no pull request (a fork's, or a whole check suite's)
			// and whose check run's delivery did not name one either: it may be a push's, or a
			// pull request's. It is a push's when its commit is on the branch its check suite
			// names, in this repository (a fork's pull request's commits are not, until merged).
			// Otherwise neither the rules that check a pull request nor those that check its
			// commits and paths (a pull request's are all of its own, a push's those since the
			// branch's last) can tell which. The push's are still read: a forbidden path among
			// them fails the rule all the same.
			pushed, err := c.onBranch(ctx, *f)
			requests++
			if err != nil {
				return requests, err
			}
			if !pushed {
				f.MarkUnread(need, "the Re-run's webhook names no pull request (a fork's pull request, "+
					"or Re-run all of a check suite) and the delivery its check run was published for is no longer kept: "+
					"press Re-run on the check run itself, or push again")
			}
		}
		n, err := c.fill(ctx, f, need)
		return requests + n, err
	}, refusalOf)
}

// onBranch reports whether s's commit is on the branch s names (s.Ref) in s's repository: the
// comparison of the branch with the commit finds nothing the branch lacks. It costs one request
// (a comparison of one commit a page); a branch that is not there, or any refusal, is false.
func (c *Client) onBranch(ctx context.Context, s change.Change) (bool, error) {
	branch, ok := strings.CutPrefix(s.Ref, "refs/heads/")
	if !ok || branch == "" || !isCommit(s.SHA) {
		return false, nil
	}
	rp, err := RepoPath(s.Repository)
	if err != nil {
		return false, nil
	}
	var cmp struct {
		AheadBy *int `json:"ahead_by"`
	}
	u := fmt.Sprintf("%s/compare/%s...%s?per_page=1&page=1", rp, url.PathEscape(branch), url.PathEscape(s.SHA))
	if _, err := c.get(ctx, s.Installation, u, "the comparison of the branch with the commit", ContentsPermission, &cmp); err != nil {
		if providerapi.ClassOf(err) == providerapi.Transient {
			return false, err
		}
		return false, nil
	}
	return cmp.AheadBy != nil && *cmp.AheadBy == 0, nil
}

// isCommit reports whether sha is a full commit id (40 or 64 hex digits).
func isCommit(sha string) bool {
	if len(sha) != 40 && len(sha) != 64 {
		return false
	}
	return strings.Trim(strings.ToLower(sha), "0123456789abcdef") == ""
}

// refusalOf says what an operator must do about a read the provider refused: what to grant;
// "" for any other failure, which ReadInputs words.
func refusalOf(err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return fmt.Sprintf("GitHub answered %d; grant the credential the %s permission (a GitHub App's, or a token's repo scope)",
			providerapi.StatusOf(err), r.Permission)
	}
	return ""
}

// cut marks in, read in part, as not held whole: GitHub's listing stops at limit.
func cut(s *change.Change, in change.Inputs, limit string) {
	s.MarkUnread(in, "GitHub lists "+limit)
}

// MaxReadCommits bounds the commits read of a comparison: more are not read (the commits are
// then not held whole, and a commit-message rule fails closed).
const MaxReadCommits = 1000

// A push whose comparison gives CompareFilesGiven files (GitHub's cut: it may change more) is
// read commit by commit instead: its paths are every path its commits change, each commit's
// files read with repos/get-commit, as a push webhook's added, removed and modified lists give
// them. The reads are bounded: at most MaxPushCommitsRead commits, and MaxPushFilesRead files
// in all (GitHub's own bound on one commit's listing), for the commits a forced push drops and
// those it brings together. Past either, the paths are not held whole and the path rule fails
// closed, naming the bound.
//
// The bounds come from the time an evaluation has and the requests it may make. Its reads are
// sent one after another within the runner's time: in Lambda the runner's 180 s timeout less
// its margins, about 170 s for the comparisons (two for a forced push), these reads and the
// evaluation. A route's
// timeout (30 s by default) bounds one request; GitHub ends any it takes more than 10 s to
// process, and answers a commit's page in well under a second as a rule. A commit costs one
// request, and one more a further page of 100 files: at most 50 + 3000/100 = 80 requests,
// which fit the evaluation's time up to about 2 s a request (a GitHub slower than that runs
// the evaluation out of time: it is retried, and ends in an error verdict, never a pass). 80
// requests are also a small share of an installation's 5,000 an hour, so that no push (a
// forced push of thousands of files is a few seconds' work for whoever may push) spends the
// budget that every other read and status of the installation needs. The comparison's commits,
// read up to MaxReadCommits, are all on its first page (100) at this bound.
const (
	MaxPushCommitsRead = 50
	MaxPushFilesRead   = 3000
)

func (c *Client) fill(ctx context.Context, s *change.Change, need change.Inputs) (requests int, err error) {
	if s.Pull != nil && s.Pull.Number > 0 {
		current, n, err := c.fillPull(ctx, s, need)
		requests += n
		if err != nil || current {
			return requests, err
		}
	}
	// What s's commit brings: a pull request's, since its target branch (what the pull
	// request changed at that commit, as its event read it then); a push's, since the commit
	// the branch was at before; a new branch's, since the repository's default branch.
	var base string
	push := true
	switch {
	case s.Pull != nil && s.Pull.TargetBranch != "":
		base, push = s.Pull.TargetBranch, false
	case s.Before != "" && strings.Trim(s.Before, "0") != "":
		base = s.Before
	case s.Ref == "":
		// A re-run naming neither a pull request, the push before it, nor a branch: it may
		// be of the push that created the default branch, which no comparison describes.
		s.MarkUnread(need&(change.CommitsInput|change.PathsInput),
			"the Re-run's webhook names neither the push's earlier commit nor its branch: push again")
		return requests, nil
	}
	err = providerapi.ReadRange(s, need, base, func() (string, string, error) {
		repo, err := c.GetRepository(ctx, s.Installation, s.Repository)
		requests++
		return "refs/heads/" + repo.DefaultBranch, repo.DefaultBranch, err
	}, "the push created the repository's default branch: no earlier commit names where its commits begin", func(base string) error {
		// The commits past the first page are read only when need asks for them: reading
		// commit by commit takes at most MaxPushCommitsRead, all on the first page.
		newest := 0
		if need.Has(change.CommitsInput) {
			newest = MaxReadCommits
		}
		cmp, err := c.Compare(ctx, s.Installation, s.Repository, base, s.SHA, newest)
		requests += 1 + max(0, (min(cmp.TotalCommits, newest)-1)/perPage)
		if err != nil {
			return err
		}
		addFiles(s, cmp.Files)
		if need.Has(change.CommitsInput) { // else they are the webhook's, held whole
			addCommits(s, cmp.Commits)
		}
		budget := &readBudget{commits: MaxPushCommitsRead, files: MaxPushFilesRead}
		switch {
		case len(cmp.Files) < CompareFilesGiven:
		case push && need.Has(change.PathsInput):
			n, err := c.addCommitsFiles(ctx, s, cmp, s.SHA, "the push's", budget)
			requests += n
			if err != nil {
				return err
			}
		default:
			// A pull request's paths are what it changes since its target branch, which
			// its commits' own files do not give.
			cut(s, change.PathsInput, "at most 300 files of a comparison")
		}
		if need.Has(change.CommitsInput) && cmp.TotalCommits > len(cmp.Commits) {
			cut(s, change.CommitsInput, fmt.Sprintf("%d commits of this comparison; amiss reads the newest %d", cmp.TotalCommits, MaxReadCommits))
		}
		if push && need.Has(change.PathsInput) && s.Before != "" && base == s.Before && cmp.BehindBy > 0 {
			n, err := c.addDropped(ctx, s, budget)
			requests += n
			return err
		}
		return nil
	})
	return requests, err
}

// readBudget is what is left of the commits and files a push's reads commit by commit may take
// (MaxPushCommitsRead, MaxPushFilesRead), for what it brings and what it drops together.
type readBudget struct{ commits, files int }

// addDropped adds to s the paths that the commits a push drops changed (a forced push: its
// comparison is behind its earlier commit): the push changes them back on its branch, and
// GitHub's comparison before...sha, what sha changes since the merge base, does not name
// them. They are what before changes since the same merge base, the comparison sha...before,
// read as a push's comparison is (commit by commit, within what is left of budget, when it
// gives 300 files); its commits are not the push's. It answers the requests it made.
func (c *Client) addDropped(ctx context.Context, s *change.Change, budget *readBudget) (requests int, err error) {
	back, err := c.Compare(ctx, s.Installation, s.Repository, s.SHA, s.Before, 0)
	if err != nil {
		return 1, err
	}
	addFiles(s, back.Files)
	if len(back.Files) < CompareFilesGiven || !s.Whole.Has(change.PathsInput) {
		return 1, nil
	}
	n, err := c.addCommitsFiles(ctx, s, back, s.Before, "the dropped", budget)
	return 1 + n, err
}

// addCommitsFiles adds to s the paths cmp's commits change, read commit by commit (the files
// of cmp itself, CompareFilesGiven of them, are GitHub's cut), within MaxPushCommitsRead
// commits and MaxPushFilesRead files (what budget has left of them); past either, or when cmp
// does not list each of its commits, the paths are marked unread, those read kept; whose names
// the commits in the reason. GitHub lists a commit's files against its first parent (a merge's
// too), so their union is what head (cmp's) changes since the merge base only when head leads
// back to it along first parents: otherwise (a merge of the
// branch into another line, which may take that line's tree back) the paths are marked unread,
// and no commit is read. It answers the requests it made.
func (c *Client) addCommitsFiles(ctx context.Context, s *change.Change, cmp Comparison, head, whose string, budget *readBudget) (requests int, err error) {
	switch {
	case cmp.TotalCommits > budget.commits:
		s.MarkUnread(change.PathsInput, fmt.Sprintf("%s %d commits change 300 files or more; amiss reads the files of at most %d commits",
			whose, cmp.TotalCommits, MaxPushCommitsRead))
		return 0, nil
	case len(cmp.Commits) == 0 || len(cmp.Commits) != cmp.TotalCommits:
		s.MarkUnread(change.PathsInput, fmt.Sprintf("GitHub's comparison gives 300 files, and %d of its %d commits", len(cmp.Commits), cmp.TotalCommits))
		return 0, nil
	case !firstParentsReach(cmp, head):
		s.MarkUnread(change.PathsInput, fmt.Sprintf("GitHub's comparison gives 300 files, and commit %.8s does not lead back to %.8s "+
			"along first parents (it merges the branch into another line): its commits' files, each against its first parent, "+
			"are not what it changes", head, cmp.MergeBase.SHA))
		return 0, nil
	}
	budget.commits -= len(cmp.Commits)
	for _, commit := range cmp.Commits {
		_, files, pages, err := c.CommitFiles(ctx, s.Installation, s.Repository, commit.SHA, budget.files)
		requests += pages
		if err != nil {
			return requests, err
		}
		addFiles(s, files)
		switch {
		case len(files) >= CommitFilesListed:
			s.MarkUnread(change.PathsInput, fmt.Sprintf("commit %.8s changes 3,000 files or more; GitHub lists at most 3,000 of a commit", commit.SHA))
			return requests, nil
		case len(files) >= budget.files:
			s.MarkUnread(change.PathsInput, "the push's commits change 3,000 files or more in all; amiss reads at most 3,000")
			return requests, nil
		}
		budget.files -= len(files)
	}
	return requests, nil
}

// firstParentsReach reports whether head leads to cmp's merge base along first parents through
// cmp's commits (which are every commit of head that the base lacks).
func firstParentsReach(cmp Comparison, head string) bool {
	byID := make(map[string]Commit, len(cmp.Commits))
	for _, c := range cmp.Commits {
		byID[c.SHA] = c
	}
	id := head
	for range len(cmp.Commits) + 1 {
		c, listed := byID[id]
		if !listed {
			return id != "" && id == cmp.MergeBase.SHA
		}
		if len(c.Parents) == 0 {
			return false // a root: no merge base on its line
		}
		id = c.Parents[0].SHA
	}
	return false // a cycle: no history GitHub gives
}

// fillPull reads the pull request: its title and branches as need asks, and, when its head is
// still s's commit (current), its files and commits as need asks. A listing that turns out to
// describe another head (the pull request moved on while it was read: a file's links name
// another commit, or the commits, listed whole, end with another) is dropped: current is
// false, and s is left as it was but for the title and branches read.
func (c *Client) fillPull(ctx context.Context, s *change.Change, need change.Inputs) (current bool, requests int, err error) {
	pr, err := c.PullRequest(ctx, s.Installation, s.Repository, s.Pull.Number)
	if err != nil {
		return false, 1, err
	}
	requests = 1
	s.ReadPull(need, pr.Title, pr.Base.Ref, pr.Head.Ref)
	if pr.Head.SHA != s.SHA {
		return false, requests, nil
	}
	var files []ChangedFile
	var commits []Commit
	if need.Has(change.PathsInput) {
		files, err = c.PullFiles(ctx, s.Installation, s.Repository, s.Pull.Number, PullFilesListed)
		requests += 1 + len(files)/perPage
		if err != nil {
			return false, requests, err
		}
		for _, f := range files {
			// A removed file's links may name the commit it was removed from.
			if ref := refOf(f.ContentsURL); ref != "" && ref != s.SHA && f.Status != "removed" {
				return false, requests, nil
			}
		}
	}
	if need.Has(change.CommitsInput) {
		commits, err = c.PullCommits(ctx, s.Installation, s.Repository, s.Pull.Number)
		requests += 1 + len(commits)/perPage
		if err != nil {
			return false, requests, err
		}
		// Listed oldest first: short of GitHub's cap, the list ends with the head.
		if len(commits) < PullCommitsListed && (len(commits) == 0 || commits[len(commits)-1].SHA != s.SHA) {
			return false, requests, nil
		}
	}
	if need.Has(change.PathsInput) {
		addFiles(s, files)
		if pr.ChangedFiles > len(files) {
			cut(s, change.PathsInput, "at most 3,000 files of a pull request")
		}
	}
	if need.Has(change.CommitsInput) {
		addCommits(s, commits)
		if pr.Commits > len(commits) {
			cut(s, change.CommitsInput, "at most 250 commits of a pull request")
		}
	}
	return true, requests, nil
}

// refOf is the commit a file's contents URL names (its ref), or "".
func refOf(contents string) string {
	u, err := url.Parse(contents)
	if err != nil {
		return ""
	}
	return u.Query().Get("ref")
}

// addFiles adds the paths files change: a renamed file changes its old path too, as a push's
// removed list would say.
func addFiles(s *change.Change, files []ChangedFile) {
	paths := make([]string, 0, 2*len(files))
	for _, f := range files {
		paths = append(paths, f.PreviousFilename, f.Filename)
	}
	providerapi.AddPaths(s, paths...)
}

func addCommits(s *change.Change, commits []Commit) {
	for _, c := range commits {
		s.Commits = append(s.Commits, change.Commit{ID: c.SHA, Message: c.Commit.Message})
	}
}
