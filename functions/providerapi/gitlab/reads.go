package gitlab

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

// Reads of what a webhook leaves out, as GitLab's API serves them:
//
//	GET {base}/api/v4/projects/{id}                                     the project (its default branch)
//	GET {base}/api/v4/projects/{id}/merge_requests/{iid}                the merge request        read_api
//	GET {base}/api/v4/projects/{id}/merge_requests/{iid}/diffs          its files, paged         read_api
//	GET {base}/api/v4/projects/{id}/merge_requests/{iid}/commits        its commits, paged       read_api
//	GET {base}/api/v4/projects/{id}/repository/compare?from=&to=        a comparison             read_api
//
// A token reads them with the scope read_api (or api, which a publisher's token has), as a
// member who can read the project's code (Reporter, on a private project).
//
// GitLab's own bounds: a merge request's diff, and a comparison's, hold at most the instance's
// "Maximum files in a diff" (diff_max_files, 1,000 by default) and lines; past them the diff
// overflows. A merge request says so in changes_count ("1000+"), a comparison in
// compare_timeout (GitLab names its overflow flag so). Every commit is listed. amiss reads at
// most MaxReadCommits commits of a merge request and answers of maxListingBytes; past any
// bound the input is marked unread, naming it, never taken as whole.
const (
	// perPage is the page size asked: GitLab's most.
	perPage = 100
	// MaxReadCommits bounds the commits read of a merge request; MaxReadFiles its files (a
	// diff holds fewer unless an instance raises its limit).
	MaxReadCommits = 1000
	MaxReadFiles   = 5000
	// maxListingBytes bounds one answer (a page of 100 diffs with their patches, or a
	// comparison with every commit and its whole diff).
	maxListingBytes = 32 << 20
)

// ReadScope is the token scope the reads need, named in the reason a refused read gives.
const ReadScope = "read_api"

// Refused is a read GitLab refused (401, 403, 404): the token is wrong, lacks the scope, or
// cannot see the project.
type Refused struct{ Err error }

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

// Gone is a comparison GitLab answered 404 Ref Not Found: the project is read (a project the
// token cannot see is 404 Project Not Found), but From or To is not in it, a commit a forced
// push left behind and GitLab has since pruned, or a branch deleted. No scope mends it.
type Gone struct {
	From, To string
	Err      error
}

func (g *Gone) Error() string { return g.Err.Error() }
func (g *Gone) Unwrap() error { return g.Err }

// refNotFound is GitLab's message when a comparison names a ref or commit the project lacks
// (the repositories API's not_found!("Ref")).
const refNotFound = "404 Ref Not Found"

// errMoved: a merge request's listing no longer describes the commit read for.
var errMoved = errors.New("the merge request moved on while it was read")

func refusedFor(err error) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		if providerapi.ClassOf(err) != providerapi.Transient {
			return &Refused{Err: err}
		}
	}
	return err
}

// get reads one answer into v.
func (c *Client) get(ctx context.Context, u, what string, v any) error {
	a, err := c.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes})
	if err != nil {
		return refusedFor(err)
	}
	return a.DecodeWithin(what, v)
}

// listing is what list read: the entries, the pages read, whether GitLab named a page after
// the last one read, and the count GitLab named (X-Total) when the pages held fewer (short).
type listing[T any] struct {
	items []T
	pages int
	more  bool
	short int
}

// list reads a listing from u (its query asking perPage a page), every page GitLab names, to at
// most max entries; what names a page in errors. A total (X-Total) that changes from one page
// to the next is errMoved.
func list[T any](ctx context.Context, c *Client, u, what string, max int) (listing[T], error) {
	var out listing[T]
	total := ""
	err := c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes}, max+1,
		func(a *providerapi.Answer) (bool, error) {
			out.pages++
			var items []T
			if err := a.DecodeWithin(fmt.Sprintf("page %d of %s", out.pages, what), &items); err != nil {
				return false, err
			}
			if t := a.Header.Get("X-Total"); t != "" {
				if total != "" && t != total {
					return false, errMoved
				}
				total = t
			}
			out.items = append(out.items, items...)
			if len(out.items) >= max {
				out.more = nextPage(a) != ""
				return false, nil
			}
			return len(items) > 0, nil
		})
	if err != nil {
		return out, refusedFor(err)
	}
	if n, err := strconv.Atoi(total); err == nil && !out.more && len(out.items) < n {
		out.short = n
	}
	return out, nil
}

// MergeRequest is what GitLab says of a merge request, as far as read. SHA is the head of its
// latest diff; ChangesCount a string, "1000+" when that diff overflowed GitLab's limits, and
// null, like DiffRefs, while GitLab has not made the diff yet.
type MergeRequest struct {
	Title        string  `json:"title"`
	SHA          string  `json:"sha"`
	SourceBranch string  `json:"source_branch"`
	TargetBranch string  `json:"target_branch"`
	ChangesCount *string `json:"changes_count"`
	DiffRefs     *struct {
		HeadSHA string `json:"head_sha"`
	} `json:"diff_refs"`
}

// Diff is an entry of a diff (Entities::Diff), as far as read.
type Diff struct {
	OldPath string `json:"old_path"`
	NewPath string `json:"new_path"`
}

// Commit is an entry of a listing of commits (Entities::Commit), as far as read.
type Commit struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

// Comparison is what GitLab says of a comparison: every commit, oldest first, and its diff,
// cut when CompareTimeout (GitLab's overflow flag) is set.
type Comparison struct {
	Commits        []Commit `json:"commits"`
	Diffs          []Diff   `json:"diffs"`
	CompareTimeout bool     `json:"compare_timeout"`
}

// Project is what GitLab says of a project, as far as read.
type Project struct {
	PathWithNamespace string `json:"path_with_namespace"`
	DefaultBranch     string `json:"default_branch"`
}

// GetProject reads project (its path).
func (c *Client) GetProject(ctx context.Context, project string) (Project, error) {
	var p Project
	return p, c.get(ctx, ProjectPath(project), "the project", &p)
}

// MergeRequest reads merge request iid of project.
func (c *Client) MergeRequest(ctx context.Context, project string, iid int) (MergeRequest, error) {
	var m MergeRequest
	return m, c.get(ctx, fmt.Sprintf("%s/merge_requests/%d", ProjectPath(project), iid), "the merge request", &m)
}

// Compare reads the comparison of from's merge base with to: to's commits that from lacks,
// and the diff of the merge base's tree with to's (git diff from...to).
func (c *Client) Compare(ctx context.Context, project, from, to string) (Comparison, error) {
	return c.compare(ctx, project, from, to, false)
}

// CompareStraight reads the comparison of from with to, straight: to's commits that from lacks,
// and the diff of from's tree with to's (git diff from to), whatever their merge base (GitLab's
// straight=true: "direct comparison between from and to (from..to)").
func (c *Client) CompareStraight(ctx context.Context, project, from, to string) (Comparison, error) {
	return c.compare(ctx, project, from, to, true)
}

func (c *Client) compare(ctx context.Context, project, from, to string, straight bool) (Comparison, error) {
	var cmp Comparison
	q := url.Values{"from": {from}, "to": {to}}
	if straight {
		q.Set("straight", "true")
	}
	err := c.get(ctx, ProjectPath(project)+"/repository/compare?"+q.Encode(), "the comparison", &cmp)
	if providerapi.StatusOf(err) == http.StatusNotFound && providerapi.StatusMessage(err) == refNotFound {
		return cmp, &Gone{From: from, To: to, Err: err}
	}
	return cmp, err
}

// CheckRead reads project as the reads do, posting nothing: the project (read_api), then the
// comparison of its default branch with itself (the code, which a Guest of a private project
// may not read). It returns nil when the token may read, the refusal otherwise (amiss check).
func (c *Client) CheckRead(ctx context.Context, project string) error {
	p, err := c.GetProject(ctx, project)
	if err != nil || p.DefaultBranch == "" {
		return err // a project without a branch has no code to read yet
	}
	_, err = c.Compare(ctx, project, p.DefaultBranch, p.DefaultBranch)
	return err
}

// Read returns s with the inputs in need read from GitLab (the runner's InputReader): each one
// read whole is added to s.Whole; one a bound cuts is marked unread, naming the bound, and the
// rules that need it fail closed. Only what need names is read:
//
//   - a merge request: the merge request itself when its title or files are needed (its head,
//     which tells whether its listings still describe s's commit, and whether its diff
//     overflowed); then, when its head is s's commit, its diffs and commits as need asks; when
//     it has moved on (a newer push: its head is another commit, or a listing's total changes
//     between pages, or its commits begin with another), the comparison of its target branch
//     with s's commit. A push landing while the diffs are read (a diff names no head) is seen
//     by the commits listed after them, which begin with the head, or, when no commits are
//     needed, by the merge request read again after the diffs;
//   - a push: the comparison of before with sha, straight (every commit of before..sha, and
//     the diff of before's tree with sha's: what the push changes on its branch, a merge
//     taking an older tree and a branch forced back included); for a new branch (no before),
//     the comparison of the project's default branch with the commit (from their merge base).
//     The paths the webhook listed (each commit's against its first parent) are kept beside
//     what is read; the comparison's commits are added only when need names them.
//
// A transient failure (an outage, a timeout, GitLab's rate limit) is returned as an error of
// class Transient: the attempt is retried. Any other failure (401, 403, 404: a token without
// the scope, or that cannot see the project) is not an error: the inputs in need are marked
// unread, naming what to grant; a comparison answered 404 Ref Not Found (a commit it names is
// gone: before, left behind by a forced push and since pruned) marks them unread saying so.
func (c *Client) Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	return providerapi.ReadInputs(s, need, "GitLab",
		func(f *change.Change) (int, error) {
			if need.Has(change.PathsInput) {
				// A push webhook's lists (each commit's files against its first parent) name
				// paths its commits change, though not always all it changes: kept.
				providerapi.AddPaths(f, s.Paths...)
			}
			return c.fill(ctx, f, need)
		}, refusalOf)
}

// refusalOf says what an operator must do about a read the provider refused: what to grant,
// or that a commit compared is gone (which no grant mends); "" for any other failure, which
// ReadInputs words.
func refusalOf(err error) string {
	var g *Gone
	if errors.As(err, &g) {
		return fmt.Sprintf("GitLab answered %s to the comparison of %s with %s: one of them is gone "+
			"(a commit a forced push left behind, since pruned, or a deleted branch), so what the change brings cannot be read", refNotFound, g.From, g.To)
	}
	var r *Refused
	if errors.As(err, &r) {
		return fmt.Sprintf("GitLab answered %d; grant the token the %s scope, as a member who can read the project's code (Reporter)",
			providerapi.StatusOf(err), ReadScope)
	}
	return ""
}

func (c *Client) fill(ctx context.Context, s *change.Change, need change.Inputs) (requests int, err error) {
	if s.Pull != nil && s.Pull.Number > 0 {
		current, n, err := c.fillMergeRequest(ctx, s, need)
		requests += n
		if err != nil || current {
			return requests, err
		}
	}
	from := s.Before
	if from == "" && s.Pull != nil {
		from = s.Pull.TargetBranch
	}
	err = providerapi.ReadRange(s, need, from, func() (string, string, error) {
		p, err := c.GetProject(ctx, s.Repository)
		requests++
		return "refs/heads/" + p.DefaultBranch, p.DefaultBranch, err
	}, createdDefault, func(from string) error {
		// From a push's before, straight: the tree before against the tree after. From a
		// branch (a new branch's default, a merge request's target), from their merge base.
		compare := c.Compare
		if from == s.Before {
			compare = c.CompareStraight
		}
		cmp, err := compare(ctx, s.Repository, from, s.SHA)
		requests++
		if err != nil {
			return err
		}
		if need.Has(change.CommitsInput) {
			for _, cm := range cmp.Commits {
				s.Commits = append(s.Commits, change.Commit{ID: cm.ID, Message: cm.Message})
			}
		}
		addDiffs(s, cmp.Diffs)
		if cmp.CompareTimeout {
			s.MarkUnread(need&change.PathsInput, fmt.Sprintf("GitLab's comparison overflowed its diff limits (the instance's maximum files or lines in a diff): it lists %d files", len(cmp.Diffs)))
		}
		return nil
	})
	return requests, err
}

// createdDefault is why the push that created the default branch is not read.
const createdDefault = "the push created the project's default branch: no earlier commit names where its commits begin"

// fillMergeRequest reads the merge request as need asks: when its head is still s's commit
// (current), its title and branches as need asks, its files and commits. A listing that turns out to describe
// another head (the merge request moved on while it was read) is dropped: current is false,
// and s is left as it was but for the title and branches.
func (c *Client) fillMergeRequest(ctx context.Context, s *change.Change, need change.Inputs) (current bool, requests int, err error) {
	overflow := ""
	if need&(change.TitleInput|change.PullInput|change.PathsInput) != 0 {
		mr, err := c.MergeRequest(ctx, s.Repository, s.Pull.Number)
		requests++
		if err != nil {
			return false, requests, err
		}
		s.ReadPull(need, mr.Title, mr.TargetBranch, mr.SourceBranch)
		if mr.SHA != s.SHA {
			return false, requests, nil
		}
		if need.Has(change.PathsInput) && (mr.DiffRefs == nil || mr.ChangesCount == nil) {
			// Its diff would list nothing yet: read again after the retry delay.
			return false, requests, &providerapi.Error{Class: providerapi.Transient,
				Err: fmt.Errorf("GitLab is still preparing merge request !%d's diff", s.Pull.Number)}
		}
		if mr.ChangesCount != nil && strings.HasSuffix(*mr.ChangesCount, "+") {
			overflow = *mr.ChangesCount
		}
	}
	base := ProjectPath(s.Repository) + fmt.Sprintf("/merge_requests/%d", s.Pull.Number)
	var paths []string
	var commits []change.Commit
	var cuts []change.Unread
	if need.Has(change.PathsInput) {
		diffs, err := list[Diff](ctx, c, fmt.Sprintf("%s/diffs?per_page=%d&page=1", base, perPage), "the merge request's diffs", MaxReadFiles)
		requests += diffs.pages
		switch {
		case errors.Is(err, errMoved):
			return false, requests, nil
		case err != nil:
			return false, requests, err
		}
		for _, d := range diffs.items {
			paths = append(paths, d.OldPath, d.NewPath)
		}
		switch {
		case overflow != "":
			cuts = append(cuts, change.Unread{Input: change.PathsInput, Reason: fmt.Sprintf(
				"GitLab keeps %s files of the merge request's diff (the instance's maximum files or lines in a diff)", overflow)})
		case diffs.more:
			cuts = append(cuts, change.Unread{Input: change.PathsInput, Reason: fmt.Sprintf("the merge request has more than %d files; amiss reads at most %d", MaxReadFiles, MaxReadFiles)})
		case diffs.short > 0:
			cuts = append(cuts, change.Unread{Input: change.PathsInput, Reason: fmt.Sprintf("GitLab listed %d of the merge request's %d files", len(diffs.items), diffs.short)})
		}
	}
	if need.Has(change.PathsInput) && !need.Has(change.CommitsInput) {
		// Diffs name no head, and no commits listed after them tell it: the merge request,
		// read again, says whether a push landed while they were read.
		again, err := c.MergeRequest(ctx, s.Repository, s.Pull.Number)
		requests++
		if err != nil {
			return false, requests, err
		}
		if again.SHA != s.SHA {
			return false, requests, nil
		}
	}
	if need.Has(change.CommitsInput) {
		listed, err := list[Commit](ctx, c, fmt.Sprintf("%s/commits?per_page=%d&page=1", base, perPage), "the merge request's commits", MaxReadCommits)
		requests += listed.pages
		switch {
		case errors.Is(err, errMoved):
			return false, requests, nil
		case err != nil:
			return false, requests, err
		}
		if len(listed.items) == 0 || listed.items[0].ID != s.SHA {
			return false, requests, nil // GitLab lists the newest first: the head is another commit
		}
		for i := len(listed.items) - 1; i >= 0; i-- {
			commits = append(commits, change.Commit{ID: listed.items[i].ID, Message: listed.items[i].Message})
		}
		switch {
		case listed.more:
			cuts = append(cuts, change.Unread{Input: change.CommitsInput, Reason: fmt.Sprintf("the merge request has more than %d commits; amiss reads at most %d", MaxReadCommits, MaxReadCommits)})
		case listed.short > 0:
			cuts = append(cuts, change.Unread{Input: change.CommitsInput, Reason: fmt.Sprintf("GitLab listed %d of the merge request's %d commits", len(listed.items), listed.short)})
		}
	}
	providerapi.AddPaths(s, paths...)
	s.Commits = append(s.Commits, commits...)
	for _, u := range cuts {
		s.MarkUnread(u.Input, u.Reason)
	}
	return true, requests, nil
}

func addDiffs(s *change.Change, diffs []Diff) {
	var ps []string
	for _, d := range diffs {
		ps = append(ps, d.OldPath, d.NewPath)
	}
	providerapi.AddPaths(s, ps...)
}
