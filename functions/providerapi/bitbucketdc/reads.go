package bitbucketdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Reads of what Bitbucket Data Center's webhooks leave out: a pull request, its changes and
// its commits; a range's changes and commits; a repository's default branch. Each listing
// pages by start and limit as Data Center documents, within amiss's bounds (MaxReadPaths,
// MaxReadCommits); an answer is read up to maxListingBytes. Every read needs the repository
// permission REPO_READ.
//
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/default-branch                          a new branch's base
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}                      its head and target
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}/changes              one page, never more
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/pull-requests/{id}/commits
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/compare/changes?from={sha}&to={base}
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/compare/changes?from={before}&to={sha}    a push's
//	GET {base}/rest/api/latest/projects/{key}/repos/{slug}/compare/commits?from={sha}&to={base}

// amiss's bounds on what it reads, and the page sizes asked for.
const (
	// MaxReadPaths bounds the changed paths read: more are not read (the paths are then not
	// held whole, and a forbidden-paths rule fails closed).
	MaxReadPaths = 3000
	// MaxReadCommits bounds the commits read (the newest): more are not read.
	MaxReadCommits = 1000
	changesLimit   = 1000
	commitsLimit   = 100
	// maxListingBytes bounds one answer. An answer cut by it is never taken as a partial
	// list: the input it was for is marked unread, naming the bound (asking again gets the same).
	maxListingBytes = 32 << 20
)

// Permission is the repository permission every read needs (an HTTP access token's
// Repository read), named in the reason a refused read gives.
const Permission = "REPO_READ (an HTTP access token's Repository read permission)"

// Refused is a read Data Center refused (401, 403, or 404, which it answers for what the
// token may not see); What names the read.
type Refused struct {
	What string
	Err  error
}

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

func refusedFor(err error, what string) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return &Refused{What: what, Err: err}
	}
	return err
}

// get reads one answer into v.
func (c *Client) get(ctx context.Context, u, what string, v any) error {
	a, err := c.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes})
	if err != nil {
		return refusedFor(err, what)
	}
	return a.Decode(what, v)
}

// list reads a listing from u (which names its limit) by its pages into a slice, at most max
// entries (cut reports that there were more, cutByServer that the server stopped listing);
// it counts the requests made into *requests. A page that holds nothing and says it is not the
// last is the server's cut: Data Center answers so, past an internal limit on what it streams
// (page.max.changes of a comparison's changes), each page after naming a start further on.
func list[T any](ctx context.Context, c *Client, u, what string, max, limit int, requests *int) (all []T, cut, cutByServer bool, err error) {
	page := 0
	err = c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes}, max/limit+2,
		func(values json.RawMessage, last bool) (bool, error) {
			page++
			*requests++
			var items []T
			if err := json.Unmarshal(values, &items); err != nil {
				return false, &providerapi.Error{Class: providerapi.Transient, Err: fmt.Errorf("page %d of %s: values do not decode: %v", page, what, err)}
			}
			if len(items) == 0 && !last {
				cutByServer = true
				return false, nil
			}
			all = append(all, items...)
			if len(all) > max {
				all, cut = all[:max], true
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return nil, false, false, refusedFor(err, what)
	}
	return all, cut, cutByServer, nil
}

// Ref is one side of a pull request: its branch, its latest commit and its repository.
type Ref struct {
	ID           string `json:"id"`
	DisplayID    string `json:"displayId"`
	LatestCommit string `json:"latestCommit"`
	Repository   struct {
		Slug    string `json:"slug"`
		Project struct {
			Key string `json:"key"`
		} `json:"project"`
	} `json:"repository"`
}

// repository is the ref's repository as PROJECT/slug.
func (r Ref) repository() string { return r.Repository.Project.Key + "/" + r.Repository.Slug }

// PullRequest is what Data Center says of a pull request, as far as read.
type PullRequest struct {
	Title   string `json:"title"`
	FromRef Ref    `json:"fromRef"`
	ToRef   Ref    `json:"toRef"`
}

// Path is a changed file's path, as Data Center gives it.
type Path struct {
	Components []string `json:"components"`
	String     string   `json:"toString"`
}

func (p *Path) path() string {
	if p == nil {
		return ""
	}
	if len(p.Components) > 0 {
		return strings.Join(p.Components, "/")
	}
	return p.String
}

// Change is an entry of a listing of changes: the file's path, and a moved or copied file's
// old one.
type Change struct {
	Type    string `json:"type"`
	Path    *Path  `json:"path"`
	SrcPath *Path  `json:"srcPath"`
}

// Commit is an entry of a listing of commits, as far as read.
type Commit struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

// PullRequest reads pull request n of repo.
func (c *Client) PullRequest(ctx context.Context, repo string, n int) (PullRequest, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return PullRequest{}, err
	}
	var pr PullRequest
	err = c.get(ctx, fmt.Sprintf("%s/pull-requests/%d", rp, n), "the pull request", &pr)
	return pr, err
}

// DefaultBranch reads repo's default branch (refs/heads/ and its name).
func (c *Client) DefaultBranch(ctx context.Context, repo string) (string, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return "", err
	}
	var b struct {
		ID string `json:"id"`
	}
	if err := c.get(ctx, rp+"/default-branch", "the repository's default branch", &b); err != nil {
		return "", err
	}
	if b.ID == "" {
		return "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("the repository %s names no default branch", repo)}
	}
	return b.ID, nil
}

// read is one Read in progress: the change being completed and the requests made.
type read struct {
	c        *Client
	s        *change.Change
	need     change.Inputs
	repo     string
	requests int
}

// Read returns s with the inputs in need read from the Data Center server (the runner's
// InputReader): each one read whole is added to s.Whole; one the server or amiss's bounds cut
// is marked unread, naming the bound, and the rules that need it fail closed. Only what need
// names is read:
//
//   - a pull request: its title and branches where need asks (those the webhook carried
//     stay: they are the event's); when its head is still s's commit, its changes
//     (Data Center lists them on one page, never more: a list the server cut is marked unread)
//     and its commits; when it has moved on, the range from s's commit to its target's latest
//     commit (from the source repository, for a fork's pull request);
//   - a push: the range from s's commit to the commit the branch was at before; for a new
//     branch, to the repository's default branch (what the branch brings to it). The first
//     push of the default branch itself names nothing to compare with: its inputs are marked
//     unread.
//
// A range's changes and commits are those of s's commit its base does not have (compare: the
// changes from the two's merge base). A push's paths add those of before that s's commit does
// not have (compare the other way): a push forced back past a commit changes back what the
// commit changed, and every path whose content differs between before's tree and the commit's
// differs between one of them and their merge base, so the two comparisons name it (and may
// name more: a path both sides changed alike). A change from Bitbucket Cloud is not read: its inputs are marked unread, naming the
// configuration to fix.
//
// A transient failure (the server's outage, a timeout, a rate limit) is returned as an error
// of class Transient: the attempt is retried. Any other failure (a permission the token lacks:
// 401, 403 or 404) is not an error: the inputs in need are marked unread, naming what to grant.
func (c *Client) Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	if need == 0 {
		return s, nil
	}
	if s.API != "" && s.API != change.BitbucketDataCenter {
		s.MarkUnread(need, "this delivery came from Bitbucket Cloud, and the route reads a Bitbucket Data Center server's API: "+
			"publish with publish.provider bitbucket (or read with read.provider bitbucket) at https://api.bitbucket.org")
		return s, nil
	}
	return providerapi.ReadInputs(s, need, "Bitbucket Data Center", func(f *change.Change) (int, error) {
		rd := &read{c: c, s: f, need: need, repo: s.Repository}
		err := rd.fill(ctx)
		return rd.requests, err
	}, refusalOf)
}

// refusalOf says what an operator must do about a read the provider refused: what to grant
// first, since a status's description may be cut; "" for any other failure, which ReadInputs
// words.
func refusalOf(err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return fmt.Sprintf("grant the token %s on the repository (Bitbucket Data Center answered %d for %s: %s)",
			Permission, providerapi.StatusOf(err), r.What, providerapi.StatusMessage(err))
	}
	return ""
}

// errNoBase is a push that names no commit to compare with: the first push of the default
// branch.
var errNoBase = errors.New("the first push of the repository's default branch names no commit it started from, so what it brings cannot be read")

func (rd *read) fill(ctx context.Context) error {
	s := rd.s
	base, fromRepo := s.Before, ""
	if s.Pull != nil && s.Pull.Number > 0 {
		pr, current, err := rd.pull(ctx)
		if err != nil || current {
			return err
		}
		base = pr.ToRef.LatestCommit
		if from := pr.FromRef.repository(); from != "/" && from != pr.ToRef.repository() {
			fromRepo = from
		}
		if base == "" {
			return &providerapi.Error{Class: providerapi.Permanent, Err: errors.New("the pull request names no latest commit of its target")}
		}
	}
	return providerapi.ReadRange(s, rd.need, base, func() (string, string, error) {
		branch, err := rd.c.DefaultBranch(ctx, rd.repo)
		rd.requests++
		return branch, branch, err
	}, errNoBase.Error(), func(base string) error { return rd.rangeOf(ctx, base, fromRepo) })
}

// rangeOf reads the range from s's commit to base (in fromRepo, a fork, when it is not ""):
// its changes and commits as need asks.
func (rd *read) rangeOf(ctx context.Context, base, fromRepo string) error {
	s := rd.s
	rp, err := RepoPath(rd.repo)
	if err != nil {
		return err
	}
	q := url.Values{"from": {s.SHA}, "to": {base}}
	if fromRepo != "" {
		q.Set("fromRepo", fromRepo)
	}
	if rd.need.Has(change.PathsInput) {
		q.Set("limit", fmt.Sprint(changesLimit))
		if err := rd.changes(ctx, rp+"/compare/changes?"+q.Encode(), fmt.Sprintf("the changes of %s not in %s", s.SHA, base)); err != nil {
			return err
		}
		if base == s.Before && fromRepo == "" {
			// What before has that s's commit has not: the changes of the commits a forced
			// push drops, which it changes back. The comparison above is from the two's
			// merge base, which for a push forced back is the commit itself, and names none.
			back := url.Values{"from": {base}, "to": {s.SHA}, "limit": {fmt.Sprint(changesLimit)}}
			if err := rd.changes(ctx, rp+"/compare/changes?"+back.Encode(), fmt.Sprintf("the changes of %s not in %s", base, s.SHA)); err != nil {
				return err
			}
		}
	}
	if rd.need.Has(change.CommitsInput) {
		q.Set("limit", fmt.Sprint(commitsLimit))
		if err := rd.commits(ctx, rp+"/compare/commits?"+q.Encode(), fmt.Sprintf("the commits of %s not in %s", s.SHA, base)); err != nil {
			return err
		}
	}
	return nil
}

// pull reads the pull request: its title and branches as need asks, and, when its head is still
// s's commit (current), its changes and commits as need asks. Listings that turn out to
// describe another head (a push landing while they are read: the changes name the commit they
// are from, and the commits begin with the head) are dropped: current is false, and the range
// is read instead.
func (rd *read) pull(ctx context.Context) (pr PullRequest, current bool, err error) {
	s := rd.s
	pr, err = rd.c.PullRequest(ctx, rd.repo, s.Pull.Number)
	rd.requests++
	if err != nil {
		return pr, false, err
	}
	s.ReadPull(rd.need, pr.Title, pr.ToRef.DisplayID, pr.FromRef.DisplayID)
	if pr.FromRef.LatestCommit != s.SHA {
		return pr, false, nil
	}
	rp, err := RepoPath(rd.repo)
	if err != nil {
		return pr, false, err
	}
	prp := fmt.Sprintf("%s/pull-requests/%d", rp, s.Pull.Number)
	var changes changePage
	var commits []Commit
	var commitsCut bool
	if rd.need.Has(change.PathsInput) {
		if changes, err = rd.pullChanges(ctx, prp); err != nil {
			return pr, false, err
		}
		if changes.FromHash != "" && changes.FromHash != s.SHA {
			return pr, false, nil
		}
	}
	if rd.need.Has(change.CommitsInput) {
		var serverCut bool
		commits, commitsCut, serverCut, err = list[Commit](ctx, rd.c, fmt.Sprintf("%s/commits?limit=%d", prp, commitsLimit), "the pull request's commits",
			MaxReadCommits, commitsLimit, &rd.requests)
		if err != nil {
			return pr, false, err
		}
		commitsCut = commitsCut || serverCut
		if len(commits) == 0 || commits[0].ID != s.SHA { // newest first: the head
			return pr, false, nil
		}
	}
	if rd.need.Has(change.PathsInput) {
		rd.addChanges(changes.Values)
		if !changes.IsLastPage {
			rd.s.MarkUnread(change.PathsInput, fmt.Sprintf("Bitbucket Data Center lists at most %d changes of a pull request "+
				"(amiss asks for %d; the server's page.max.changes may be lower), and this one has more", len(changes.Values), MaxReadPaths))
		}
	}
	if rd.need.Has(change.CommitsInput) {
		rd.addCommits(commits, commitsCut, "the pull request's commits")
	}
	return pr, true, nil
}

// changePage is a pull request's changes, as Data Center answers them: one page, and the
// commit they are from (the pull request's head when they were listed).
type changePage struct {
	FromHash   string   `json:"fromHash"`
	IsLastPage bool     `json:"isLastPage"`
	Values     []Change `json:"values"`
}

// pullChanges reads a pull request's changes: Data Center answers one page of at most the
// limit asked for or its own maximum (page.max.changes), whichever is smaller, and ignores
// start; a page that is not the last is a list it cut.
func (rd *read) pullChanges(ctx context.Context, prp string) (changePage, error) {
	var page changePage
	err := rd.c.get(ctx, fmt.Sprintf("%s/changes?withComments=false&limit=%d", prp, MaxReadPaths), "the pull request's changes", &page)
	rd.requests++
	return page, err
}

// changes reads a paged listing of changes into the change's paths.
func (rd *read) changes(ctx context.Context, u, what string) error {
	changes, cut, serverCut, err := list[Change](ctx, rd.c, u, what, MaxReadPaths, changesLimit, &rd.requests)
	if err != nil {
		return err
	}
	rd.addChanges(changes)
	switch {
	case serverCut:
		rd.s.MarkUnread(change.PathsInput, fmt.Sprintf("Bitbucket Data Center stopped listing %s after %d files (the server's page.max.changes)",
			what, len(changes)))
	case cut:
		rd.s.MarkUnread(change.PathsInput, fmt.Sprintf("%s are more than %d files; amiss reads the first %d", what, MaxReadPaths, MaxReadPaths))
	}
	return nil
}

// addChanges adds the paths changes name: a moved or copied file's old path too.
func (rd *read) addChanges(changes []Change) {
	paths := make([]string, 0, 2*len(changes))
	for _, c := range changes {
		paths = append(paths, c.SrcPath.path(), c.Path.path())
	}
	providerapi.AddPaths(rd.s, paths...)
}

// commits reads a listing of commits (newest first, as Data Center lists them) into the
// change's commits, oldest first.
func (rd *read) commits(ctx context.Context, u, what string) error {
	commits, cut, serverCut, err := list[Commit](ctx, rd.c, u, what, MaxReadCommits, commitsLimit, &rd.requests)
	if err != nil {
		return err
	}
	rd.addCommits(commits, cut || serverCut, what)
	return nil
}

// addCommits adds commits, listed newest first, to the change's, oldest first.
func (rd *read) addCommits(commits []Commit, cut bool, what string) {
	for _, c := range slices.Backward(commits) {
		rd.s.Commits = append(rd.s.Commits, change.Commit{ID: c.ID, Message: c.Message})
	}
	if cut {
		rd.s.MarkUnread(change.CommitsInput, fmt.Sprintf("%s are more than %d; amiss reads the newest %d", what, MaxReadCommits, MaxReadCommits))
	}
}
