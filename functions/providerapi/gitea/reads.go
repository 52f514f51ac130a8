package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Reads of what a webhook leaves out, as Gitea's API serves them (Forgejo's is the same):
//
//	GET {base}/api/v1/repos/{owner}/{repo}                          repoGet
//	GET {base}/api/v1/repos/{owner}/{repo}/pulls/{index}            repoGetPullRequest
//	GET {base}/api/v1/repos/{owner}/{repo}/pulls/{index}/files      repoGetPullRequestFiles    paged
//	GET {base}/api/v1/repos/{owner}/{repo}/pulls/{index}/commits    repoGetPullRequestCommits  paged
//	GET {base}/api/v1/repos/{owner}/{repo}/compare/{base}...{head}  repoCompareDiff
//
// A token reads them with the scope read:repository (Gitea 1.19 and later, Forgejo: scoped
// tokens), and a user who can read the repository's code and pull requests.
//
// Gitea's own bounds: a listing serves at most [api] MAX_RESPONSE_ITEMS a page (50 by default),
// whatever limit asks, and names the whole count in X-Total-Count; a pull request's files are
// every file of its diff (its handler asks the diff for all of them), its commits every commit;
// a comparison is one answer listing every commit of base...head with the files each changes,
// unpaged. So amiss bounds what it reads itself: MaxReadFiles files and MaxReadCommits commits
// of a pull request, and an answer of at most maxListingBytes; past any of them the input is
// marked unread, naming the bound, never taken as whole.
const (
	// pageLimit is the page size asked: Gitea's default MAX_RESPONSE_ITEMS. A server that
	// serves fewer a page still names the next page and the count.
	pageLimit = 50
	// MaxReadFiles and MaxReadCommits bound the files and commits read of a pull request.
	MaxReadFiles   = 3000
	MaxReadCommits = 1000
	// maxListingBytes bounds one answer (a comparison lists every commit with its files).
	maxListingBytes = 32 << 20
)

// ReadScope is the token scope the reads need, named in the reason a refused read gives.
const ReadScope = "read:repository"

// Refused is a read Gitea refused (401, 403, 404): the token is wrong, lacks the scope, or
// cannot see the repository.
type Refused struct{ Err error }

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

// get reads one answer into v.
func (c *Client) get(ctx context.Context, u, what string, v any) error {
	a, err := c.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes})
	if err != nil {
		return refusedFor(err)
	}
	return a.DecodeWithin(what, v)
}

func refusedFor(err error) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		if providerapi.ClassOf(err) != providerapi.Transient { // not a rate limit
			return &Refused{Err: err}
		}
	}
	return err
}

// listing is what list read: the entries, the count Gitea named (X-Total-Count; -1 when it
// named none), the pages read, and whether it was read to max with no count to say it ended
// there (bounded).
type listing[T any] struct {
	items        []T
	total, pages int
	bounded      bool
}

// list reads a listing from u (its query asking pageLimit a page), every page Gitea names, to
// at most max entries; what names a page in errors. A count that changes from one page to the
// next is errMoved: the listing describes something else than when it began.
func list[T any](ctx context.Context, c *Client, u, what string, max int) (listing[T], error) {
	var all []T
	total, page := -1, 0
	err := c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes}, max+1,
		func(a *providerapi.Answer) (bool, error) {
			page++
			var items []T
			if err := a.DecodeWithin(fmt.Sprintf("page %d of %s", page, what), &items); err != nil {
				return false, err
			}
			if n, err := strconv.Atoi(a.Header.Get("X-Total-Count")); err == nil && n >= 0 {
				if total >= 0 && n != total {
					// The listing changed between pages: the pull request moved on.
					return false, errMoved
				}
				total = n
			}
			all = append(all, items...)
			return len(items) > 0 && len(all) < max, nil
		})
	if err != nil {
		return listing[T]{pages: page}, refusedFor(err)
	}
	return listing[T]{items: all, total: total, pages: page, bounded: total < 0 && len(all) >= max}, nil
}

// errMoved: a pull request's listing no longer describes the commit read for.
var errMoved = errors.New("the pull request moved on while it was read")

// PullRequest is what repoGetPullRequest says of a pull request, as far as read.
type PullRequest struct {
	Title string `json:"title"`
	Head  struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

// ChangedFile is an entry of a pull request's files (ChangedFile): its links name the commit
// the diff was made at.
type ChangedFile struct {
	Filename         string `json:"filename"`
	PreviousFilename string `json:"previous_filename"`
	Status           string `json:"status"`
	ContentsURL      string `json:"contents_url"`
}

// Commit is an entry of a listing of commits (Commit), as far as read: Files is nil when the
// answer lists none.
type Commit struct {
	SHA    string `json:"sha"`
	Commit struct {
		Message string `json:"message"`
	} `json:"commit"`
	// Parents are the commit's parents, the first first.
	Parents []struct {
		SHA string `json:"sha"`
	} `json:"parents"`
	Files *[]struct {
		Filename string `json:"filename"`
	} `json:"files"`
}

// Comparison is what repoCompareDiff says of base...head: every commit, newest first.
type Comparison struct {
	TotalCommits int      `json:"total_commits"`
	Commits      []Commit `json:"commits"`
}

// Repository is what repoGet says of a repository, as far as read.
type Repository struct {
	FullName      string `json:"full_name"`
	DefaultBranch string `json:"default_branch"`
}

// GetRepository reads repo (owner/name).
func (c *Client) GetRepository(ctx context.Context, repo string) (Repository, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return Repository{}, err
	}
	var r Repository
	return r, c.get(ctx, base, "the repository", &r)
}

// PullRequest reads pull request n of repo.
func (c *Client) PullRequest(ctx context.Context, repo string, n int) (PullRequest, error) {
	base, err := RepoPath(repo)
	if err != nil {
		return PullRequest{}, err
	}
	var pr PullRequest
	return pr, c.get(ctx, fmt.Sprintf("%s/pulls/%d", base, n), "the pull request", &pr)
}

// pullFiles lists the files pull request n changes, to at most max.
func (c *Client) pullFiles(ctx context.Context, repo string, n, max int) (listing[ChangedFile], error) {
	base, err := RepoPath(repo)
	if err != nil {
		return listing[ChangedFile]{}, err
	}
	return list[ChangedFile](ctx, c, fmt.Sprintf("%s/pulls/%d/files?limit=%d&page=1", base, n, pageLimit), "the pull request's files", max)
}

// pullCommits lists pull request n's commits, newest first, without their files, to at most
// max.
func (c *Client) pullCommits(ctx context.Context, repo string, n, max int) (listing[Commit], error) {
	base, err := RepoPath(repo)
	if err != nil {
		return listing[Commit]{}, err
	}
	return list[Commit](ctx, c, fmt.Sprintf("%s/pulls/%d/commits?files=false&verification=false&limit=%d&page=1", base, n, pageLimit),
		"the pull request's commits", max)
}

// Compare reads base...head: every commit, newest first, each with the files it changes.
func (c *Client) Compare(ctx context.Context, repo, base, head string) (Comparison, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return Comparison{}, err
	}
	var cmp Comparison
	return cmp, c.get(ctx, fmt.Sprintf("%s/compare/%s...%s", rp, refPath(base), refPath(head)), "the comparison", &cmp)
}

// refPath escapes a ref for Gitea's compare route, which takes the rest of the path: a branch
// name's slashes stay slashes (release/1), as Gitea's own links write them.
func refPath(ref string) string {
	parts := strings.Split(ref, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// CheckRead reads repo as the reads do, posting nothing: nil when the token may read it, the
// refusal otherwise (amiss check).
func (c *Client) CheckRead(ctx context.Context, repo string) error {
	_, err := c.GetRepository(ctx, repo)
	return err
}

// Read returns s with the inputs in need read from Gitea or Forgejo (the runner's InputReader):
// each one read whole is added to s.Whole; one a bound cuts is marked unread, naming the bound,
// and the rules that need it fail closed. Only what need names is read:
//
//   - a pull request: the pull request itself (its title and branches where need asks: those
//     the webhook carried stay, they are the event's; and its head, which tells whether its
//     listings still describe s's commit); then, when its head is s's commit,
//     its files and commits as need asks; when it has moved on (a newer push: its head is
//     another commit, also one landing while its listings are read, which Gitea's files name
//     in their links and its commits begin with), the comparison of its target branch with
//     s's commit;
//   - a push: the comparison before...sha, which lists every commit of the push with the files
//     each changes; for a new branch (no before), the comparison of the repository's default
//     branch with the commit.
//
// A transient failure (an outage, a timeout, a rate limit) is returned as an error of class
// Transient: the attempt is retried. Any other failure (401, 403, 404: a token without the
// scope, or that cannot see the repository) is not an error: the inputs in need are marked
// unread, naming what to grant.
func (c *Client) Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	name := displayName(s.Provider)
	return providerapi.ReadInputs(s, need, name,
		func(f *change.Change) (int, error) {
			if need.Has(change.PathsInput) {
				// A push webhook's lists (each commit's files against its first parent) name
				// paths its commits change, though not always all it changes: kept.
				providerapi.AddPaths(f, s.Paths...)
			}
			return c.fill(ctx, f, need)
		},
		func(err error) string { return refusalOf(name, err) })
}

// displayName is the provider as a verdict names it.
func displayName(provider string) string {
	if provider == "forgejo" {
		return "Forgejo"
	}
	return "Gitea"
}

// refusalOf says what an operator must do about a read the provider refused: what to grant;
// "" for any other failure, which ReadInputs words.
func refusalOf(name string, err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return fmt.Sprintf("%s answered %d; grant the token the %s scope, as a user who can read the repository",
			name, providerapi.StatusOf(err), ReadScope)
	}
	return ""
}

func (c *Client) fill(ctx context.Context, s *change.Change, need change.Inputs) (requests int, err error) {
	if s.Pull != nil && s.Pull.Number > 0 {
		current, n, err := c.fillPull(ctx, s, need)
		requests += n
		if err != nil || current {
			return requests, err
		}
	}
	base := s.Before
	if base == "" && s.Pull != nil {
		base = s.Pull.TargetBranch
	}
	err = providerapi.ReadRange(s, need, base, func() (string, string, error) {
		repo, err := c.GetRepository(ctx, s.Repository)
		requests++
		return "refs/heads/" + repo.DefaultBranch, repo.DefaultBranch, err
	}, createdDefault, func(base string) error {
		cmp, err := c.Compare(ctx, s.Repository, base, s.SHA)
		requests++
		if err != nil {
			return err
		}
		addComparison(s, need, cmp)
		if !need.Has(change.PathsInput) || !s.Whole.Has(change.PathsInput) {
			return nil
		}
		n, err := c.checkFirstParents(ctx, s, base, cmp)
		requests += n
		return err
	})
	return requests, err
}

// checkFirstParents makes sure the paths a comparison's commits change are what s's commit
// changes since base, adding those a push changes back, or marks them unread. Gitea lists a
// commit's files against its first parent (a merge's too), so their union is what the commit
// changes only along its first parents, from where that line leaves the comparison:
//
//   - a push whose head leads back to before along first parents: nothing else to read;
//   - otherwise, a push forced (it drops before's commits) or one merging its branch into
//     another line: the comparison sha...before lists the commits it drops, which it changes
//     back, read with their files when before's first-parent line leaves them where the
//     head's leaves the push's (both lines meet there, and the two comparisons' files together
//     are all it changes); a merge that does not (taking another line's tree, which may restore
//     what the branch removed) leaves the paths unread;
//   - a comparison from a branch (a new branch's from the default branch, a pull request's that
//     moved on, from its target): its line meets the branch at the merge base when no commit
//     of it is a merge; one that merges leaves the paths unread.
//
// It answers the requests it made.
func (c *Client) checkFirstParents(ctx context.Context, s *change.Change, base string, cmp Comparison) (int, error) {
	exit := firstParentExit(cmp.Commits, s.SHA)
	switch {
	case s.Before == "" || base != s.Before:
		for _, c := range cmp.Commits {
			if len(c.Parents) > 1 {
				s.MarkUnread(change.PathsInput, fmt.Sprintf("commit %.8s merges: Gitea lists a commit's files against its first parent, "+
					"which does not give what a merge changes since %s", c.SHA, base))
				break
			}
		}
		return 0, nil
	case exit == s.Before:
		return 0, nil
	}
	back, err := c.Compare(ctx, s.Repository, s.SHA, s.Before)
	if err != nil {
		return 1, err
	}
	if exit == "" || firstParentExit(back.Commits, s.Before) != exit {
		s.MarkUnread(change.PathsInput, fmt.Sprintf("commit %.8s does not lead back to %.8s along first parents, nor meet its line "+
			"(a merge of the branch into another line): Gitea lists a commit's files against its first parent, "+
			"which does not give what the push changes", s.SHA, s.Before))
		return 1, nil
	}
	// The dropped commits' paths: the push changes them back. Their commits are not its own.
	addComparisonPaths(s, change.PathsInput, back)
	return 1, nil
}

// firstParentExit is the first commit of head's first-parent line that commits do not list
// (head itself when they do not list it), or "" when the line ends at a root within them.
func firstParentExit(commits []Commit, head string) string {
	byID := make(map[string]Commit, len(commits))
	for _, c := range commits {
		byID[c.SHA] = c
	}
	id := head
	for range len(commits) + 1 {
		c, listed := byID[id]
		if !listed {
			return id
		}
		if len(c.Parents) == 0 {
			return ""
		}
		id = c.Parents[0].SHA
	}
	return "" // a cycle: no history Gitea lists
}

// createdDefault is why the push that created the default branch is not read.
const createdDefault = "the push created the repository's default branch: no earlier commit names where its commits begin"

// addComparison adds a comparison's commits (oldest first) as need asks, and the files they
// change.
func addComparison(s *change.Change, need change.Inputs, cmp Comparison) {
	for i := len(cmp.Commits) - 1; i >= 0; i-- {
		c := cmp.Commits[i]
		if need.Has(change.CommitsInput) { // else they are the webhook's, held whole
			s.Commits = append(s.Commits, change.Commit{ID: c.SHA, Message: c.Commit.Message})
		}
	}
	if cmp.TotalCommits > len(cmp.Commits) {
		s.MarkUnread(need&change.CommitsInput, fmt.Sprintf("Gitea's comparison lists %d of its %d commits", len(cmp.Commits), cmp.TotalCommits))
	}
	addComparisonPaths(s, need, cmp)
}

// addComparisonPaths adds the files a comparison's commits change, oldest first, and marks
// the paths unread (as need asks) when it does not list every commit with its files.
func addComparisonPaths(s *change.Change, need change.Inputs, cmp Comparison) {
	withoutFiles := false
	var paths []string
	for i := len(cmp.Commits) - 1; i >= 0; i-- {
		c := cmp.Commits[i]
		if c.Files == nil {
			withoutFiles = true
			continue
		}
		for _, f := range *c.Files {
			paths = append(paths, f.Filename)
		}
	}
	providerapi.AddPaths(s, paths...)
	if withoutFiles || cmp.TotalCommits > len(cmp.Commits) {
		s.MarkUnread(need&change.PathsInput, "Gitea's comparison does not list the files of every commit (an older Gitea lists none)")
	}
}

// fillPull reads the pull request: its title and branches as need asks, and, when its head is
// still s's commit (current), its files and commits as need asks. A listing that turns out to
// describe another head (the pull request moved on while it was read) is dropped: current is
// false, and s is left as it was but for the title and branches read.
func (c *Client) fillPull(ctx context.Context, s *change.Change, need change.Inputs) (current bool, requests int, err error) {
	pr, err := c.PullRequest(ctx, s.Repository, s.Pull.Number)
	if err != nil {
		return false, 1, err
	}
	requests = 1
	s.ReadPull(need, pr.Title, pr.Base.Ref, pr.Head.Ref)
	if pr.Head.SHA != s.SHA {
		return false, requests, nil
	}
	var paths []string
	var commits []change.Commit
	var cuts []change.Unread
	if need.Has(change.PathsInput) {
		files, err := c.pullFiles(ctx, s.Repository, s.Pull.Number, MaxReadFiles)
		requests += files.pages
		switch {
		case errors.Is(err, errMoved):
			return false, requests, nil
		case err != nil:
			return false, requests, err
		}
		for _, f := range files.items {
			if ref := refOf(f.ContentsURL); ref != "" && ref != s.SHA {
				return false, requests, nil // the diff was made at another head
			}
			paths = append(paths, f.PreviousFilename, f.Filename)
		}
		if files.total > len(files.items) || files.bounded {
			cuts = append(cuts, change.Unread{Input: change.PathsInput, Reason: listedOf("files", len(files.items), files.total, MaxReadFiles)})
		}
	}
	if need.Has(change.CommitsInput) {
		listed, err := c.pullCommits(ctx, s.Repository, s.Pull.Number, MaxReadCommits)
		requests += listed.pages
		list := listed.items
		switch {
		case errors.Is(err, errMoved):
			return false, requests, nil
		case err != nil:
			return false, requests, err
		}
		// Gitea lists the newest first (git log's order): a list beginning with another commit
		// is another head's (and a Gitea listing them otherwise is read as the comparison).
		if len(list) == 0 || list[0].SHA != s.SHA {
			return false, requests, nil
		}
		for i := len(list) - 1; i >= 0; i-- {
			commits = append(commits, change.Commit{ID: list[i].SHA, Message: list[i].Commit.Message})
		}
		if listed.total > len(list) || listed.bounded {
			cuts = append(cuts, change.Unread{Input: change.CommitsInput, Reason: listedOf("commits", len(list), listed.total, MaxReadCommits)})
		}
	}
	providerapi.AddPaths(s, paths...)
	s.Commits = append(s.Commits, commits...)
	for _, u := range cuts {
		s.MarkUnread(u.Input, u.Reason)
	}
	return true, requests, nil
}

// listedOf says why a pull request's listing was read in part: amiss's own bound, or a count
// Gitea named beyond what its pages held.
func listedOf(what string, read, total, max int) string {
	if read >= max && total < 0 {
		return fmt.Sprintf("the pull request has more than %d %s; amiss reads at most %d", max, what, max)
	}
	if read >= max {
		return fmt.Sprintf("the pull request has %d %s; amiss reads at most %d", total, what, max)
	}
	return fmt.Sprintf("Gitea listed %d of the pull request's %d %s", read, total, what)
}

// refOf is the commit a changed file's contents_url names (its ref), or "".
func refOf(contents string) string {
	u, err := url.Parse(contents)
	if err != nil {
		return ""
	}
	return u.Query().Get("ref")
}
