package bitbucket

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Reads of what Bitbucket Cloud's webhooks leave out: a pull request, its changed paths (its
// diffstat) and its commits; a range's changed paths and commits; a repository's main branch.
// Each listing pages by its "next", pagelen 100, and asks only for the fields it reads
// (Bitbucket's partial responses), within amiss's bounds (MaxReadPaths, MaxReadCommits); an
// answer is read up to maxListingBytes.
//
//	GET {base}/2.0/repositories/{workspace}/{slug}                                   a new branch's main branch    repository
//	GET {base}/2.0/repositories/{workspace}/{slug}/pullrequests/{id}                 its head and destination      pullrequest
//	GET {base}/2.0/repositories/{workspace}/{slug}/pullrequests/{id}/diffstat        (a redirect to the diffstat)  pullrequest
//	GET {base}/2.0/repositories/{workspace}/{slug}/pullrequests/{id}/commits                                       pullrequest
//	GET {base}/2.0/repositories/{workspace}/{slug}/diffstat/{sha}..{base}?topic=        (false from a push's before)  repository
//	GET {base}/2.0/repositories/{workspace}/{slug}/commits/{sha}?exclude={base}                                    repository

// amiss's bounds on what it reads, and the page length asked for.
const (
	// MaxReadPaths bounds the changed paths read: more are not read (the paths are then not
	// held whole, and a forbidden-paths rule fails closed).
	MaxReadPaths = 3000
	// MaxReadCommits bounds the commits read (the newest): more are not read.
	MaxReadCommits = 1000
	pageLength     = 100
	// maxListingBytes bounds one answer. An answer cut by it is never taken as a partial
	// list: the input it was for is marked unread, naming the bound (asking again gets the same).
	maxListingBytes = 32 << 20
)

// The scopes each read needs (Bitbucket Cloud's OAuth scopes, as an access token's
// permissions name them), named in the reason a refused read gives.
const (
	PullRequestScope = "pullrequest (Pull requests: Read)"
	RepositoryScope  = "repository (Repositories: Read)"
)

// Refused is a read Bitbucket Cloud refused (401, 403, or 404, which it answers for what the
// token may not see): Scope names what the token needs.
type Refused struct {
	Scope string
	What  string
	Err   error
}

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

func refusedFor(err error, what, scope string) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return &Refused{Scope: scope, What: what, Err: err}
	}
	return err
}

// get reads one answer into v.
func (c *Client) get(ctx context.Context, u, what, scope string, v any) error {
	a, err := c.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes})
	if err != nil {
		return refusedFor(err, what, scope)
	}
	return a.Decode(what, v)
}

// list reads a listing from u by its pages' next into a slice, at most max entries (cut
// reports that there were more), and where its first page was answered from (at: a redirect's
// target); it counts the requests made into *requests, a redirect followed to the first page
// included.
func list[T any](ctx context.Context, c *Client, u, what, scope string, max int, requests *int) (all []T, cut bool, at *url.URL, err error) {
	page := 0
	asked, _ := c.URL(u)
	err = c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: u, MaxBytes: maxListingBytes}, max/pageLength+2,
		func(a *providerapi.Answer) (bool, error) {
			page++
			*requests++
			if page == 1 {
				at = a.URL
				if asked != nil && a.URL.EscapedPath() != asked.EscapedPath() {
					*requests++ // the redirect's
				}
			}
			var items []T
			if err := Values(a, fmt.Sprintf("page %d of %s", page, what), &items); err != nil {
				return false, err
			}
			all = append(all, items...)
			if len(all) >= max {
				var p struct {
					Next string `json:"next"`
				}
				cut = len(all) > max || a.Decode(what, &p) == nil && p.Next != ""
				all = all[:min(len(all), max)]
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return nil, false, nil, refusedFor(err, what, scope)
	}
	return all, cut, at, nil
}

// PullRequest is what Bitbucket Cloud says of a pull request, as far as read. Its commit
// hashes are abbreviated, as in its webhooks.
type PullRequest struct {
	Title  string `json:"title"`
	Source struct {
		Branch struct {
			Name string `json:"name"`
		} `json:"branch"`
		Commit struct {
			Hash string `json:"hash"`
		} `json:"commit"`
	} `json:"source"`
	Destination struct {
		Branch struct {
			Name string `json:"name"`
		} `json:"branch"`
		Commit struct {
			Hash string `json:"hash"`
		} `json:"commit"`
	} `json:"destination"`
}

// DiffStat is an entry of a diffstat: a changed file's old and new path (old absent for an
// added file, new for a removed one).
type DiffStat struct {
	Status string `json:"status"`
	Old    *struct {
		Path string `json:"path"`
	} `json:"old"`
	New *struct {
		Path string `json:"path"`
	} `json:"new"`
}

// Commit is an entry of a listing of commits, as far as read.
type Commit struct {
	Hash    string `json:"hash"`
	Message string `json:"message"`
}

// The fields each read asks for.
const (
	pullFields     = "title,source.branch.name,source.commit.hash,destination.branch.name,destination.commit.hash"
	diffStatFields = "next,values.status,values.old.path,values.new.path"
	commitFields   = "next,values.hash,values.message"
)

// PullRequest reads pull request n of repo.
func (c *Client) PullRequest(ctx context.Context, repo string, n int) (PullRequest, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return PullRequest{}, err
	}
	var pr PullRequest
	err = c.get(ctx, fmt.Sprintf("%s/pullrequests/%d?fields=%s", rp, n, url.QueryEscape(pullFields)), "the pull request", PullRequestScope, &pr)
	return pr, err
}

// MainBranch reads repo's main branch (its name).
func (c *Client) MainBranch(ctx context.Context, repo string) (string, error) {
	rp, err := RepoPath(repo)
	if err != nil {
		return "", err
	}
	var r struct {
		MainBranch *struct {
			Name string `json:"name"`
		} `json:"mainbranch"`
	}
	if err := c.get(ctx, rp+"?fields=mainbranch.name", "the repository", RepositoryScope, &r); err != nil {
		return "", err
	}
	if r.MainBranch == nil || r.MainBranch.Name == "" {
		return "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("the repository %s names no main branch", repo)}
	}
	return r.MainBranch.Name, nil
}

// read is one Read in progress: the change being completed and the requests made.
type read struct {
	c        *Client
	s        *change.Change
	need     change.Inputs
	repo     string
	requests int
}

// Read returns s with the inputs in need read from Bitbucket Cloud (the runner's
// InputReader): each one read whole is added to s.Whole; one amiss's bounds cut is marked
// unread, naming the bound, and the rules that need it fail closed. Only what need names is
// read:
//
//   - a pull request: its title and branches where need asks (those the webhook carried
//     stay: they are the event's); when its head is still s's commit, its diffstat
//     and its commits; when it has moved on (they would describe another commit), the range
//     from s's commit to its destination's commit (what the pull request changed at s's
//     commit);
//   - a push: the range from s's commit to the commit the branch was at before (Before); for a
//     new branch, to the repository's main branch (what the branch brings to it). The first
//     push of the main branch itself names nothing to compare with: its inputs are marked
//     unread.
//
// A push's paths are the two-dot diffstat of s's commit and before (topic=false: before's
// tree against the commit's, which names what a merge taking an older tree restores and what a
// push forced back changes back); a new branch's and a moved pull request's the three-dot
// diffstat (topic=true: from the merge base). A range's commits are those of s's commit its
// base does not have (exclude). A change from a Bitbucket Data
// Center server is not read: its inputs are marked unread, naming the configuration to fix.
//
// A transient failure (Bitbucket's outage, a timeout, a rate limit) is returned as an error of
// class Transient: the attempt is retried. Any other failure (a scope the token lacks: 401,
// 403 or 404) is not an error: the inputs in need are marked unread, naming what to grant.
func (c *Client) Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	if need == 0 {
		return s, nil
	}
	if s.API != "" && s.API != change.BitbucketCloud {
		s.MarkUnread(need, "this delivery came from a Bitbucket Data Center server, and the route reads Bitbucket Cloud's API: "+
			"publish with publish.provider bitbucket-datacenter (or read with read.provider bitbucket-datacenter) at the server's base URL")
		return s, nil
	}
	return providerapi.ReadInputs(s, need, "Bitbucket Cloud", func(f *change.Change) (int, error) {
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
		msg := providerapi.StatusMessage(err)
		return fmt.Sprintf("grant the token the %s scope (Bitbucket Cloud answered %d for %s: %s)",
			r.Scope, providerapi.StatusOf(err), r.What, msg)
	}
	return ""
}

// errNoBase is a push that names no commit to compare with: the first push of the main branch.
var errNoBase = errors.New("the first push of the repository's main branch names no commit it started from, so what it brings cannot be read")

func (rd *read) fill(ctx context.Context) error {
	s := rd.s
	base := s.Before
	if s.Pull != nil && s.Pull.Number > 0 {
		current, destination, err := rd.pull(ctx)
		if err != nil || current {
			return err
		}
		base = destination
	}
	return providerapi.ReadRange(s, rd.need, base, func() (string, string, error) {
		main, err := rd.c.MainBranch(ctx, rd.repo)
		rd.requests++
		return "refs/heads/" + main, main, err
	}, errNoBase.Error(), func(base string) error { return rd.rangeOf(ctx, base) })
}

// rangeOf reads the range from s's commit to base: its paths and commits as need asks.
func (rd *read) rangeOf(ctx context.Context, base string) error {
	s := rd.s
	rp, err := RepoPath(rd.repo)
	if err != nil {
		return err
	}
	if rd.need.Has(change.PathsInput) {
		// From a push's before, two-dot (topic=false): before's tree against the commit's,
		// what the push changes on its branch whatever the two's merge base (a push forced
		// back has the commit itself as its merge base: from it, three-dot names nothing).
		// From a branch (a new branch's main branch, a pull request's destination),
		// three-dot: what the commit brings since the merge base.
		topic := base != s.Before
		what := fmt.Sprintf("the diffstat of %s..%s", s.SHA, base)
		u := fmt.Sprintf("%s/diffstat/%s?topic=%t&pagelen=%d&fields=%s", rp, url.PathEscape(s.SHA+".."+base), topic, pageLength,
			url.QueryEscape(diffStatFields))
		if err := rd.paths(ctx, u, what, RepositoryScope); err != nil {
			return err
		}
	}
	if rd.need.Has(change.CommitsInput) {
		what := fmt.Sprintf("the commits of %s not on %s", s.SHA, base)
		u := fmt.Sprintf("%s/commits/%s?exclude=%s&pagelen=%d&fields=%s", rp, url.PathEscape(s.SHA), url.QueryEscape(base), pageLength,
			url.QueryEscape(commitFields))
		if err := rd.commits(ctx, u, what, RepositoryScope); err != nil {
			return err
		}
	}
	return nil
}

// pull reads the pull request: its title and branches as need asks, and, when its head is still
// s's commit (current), its diffstat and commits as need asks; otherwise its destination's
// commit, which the range is read against. Listings that turn out to describe another head (a
// push landing while they are read: the diffstat's redirect names the head it is of, and the
// commits begin with it) are dropped, and the range read instead.
func (rd *read) pull(ctx context.Context) (current bool, destination string, err error) {
	s := rd.s
	pr, err := rd.c.PullRequest(ctx, rd.repo, s.Pull.Number)
	rd.requests++
	if err != nil {
		return false, "", err
	}
	s.ReadPull(rd.need, pr.Title, pr.Destination.Branch.Name, pr.Source.Branch.Name)
	moved := func() (bool, string, error) {
		if pr.Destination.Commit.Hash == "" {
			return false, "", &providerapi.Error{Class: providerapi.Permanent, Err: errors.New("the pull request names no destination commit")}
		}
		return false, pr.Destination.Commit.Hash, nil
	}
	if !sameCommit(pr.Source.Commit.Hash, s.SHA) {
		return moved()
	}
	rp, err := RepoPath(rd.repo)
	if err != nil {
		return false, "", err
	}
	prp := fmt.Sprintf("%s/pullrequests/%d", rp, s.Pull.Number)
	var stats []DiffStat
	var commits []Commit
	var pathsCut, commitsCut bool
	if rd.need.Has(change.PathsInput) {
		u := fmt.Sprintf("%s/diffstat?pagelen=%d&fields=%s", prp, pageLength, url.QueryEscape(diffStatFields))
		var at *url.URL
		stats, pathsCut, at, err = list[DiffStat](ctx, rd.c, u, "the pull request's diffstat", PullRequestScope, MaxReadPaths, &rd.requests)
		if err != nil {
			return false, "", err
		}
		if at != nil && namesOtherCommit(at, s.SHA) {
			return moved()
		}
	}
	if rd.need.Has(change.CommitsInput) {
		u := fmt.Sprintf("%s/commits?pagelen=%d&fields=%s", prp, pageLength, url.QueryEscape(commitFields))
		commits, commitsCut, _, err = list[Commit](ctx, rd.c, u, "the pull request's commits", PullRequestScope, MaxReadCommits, &rd.requests)
		if err != nil {
			return false, "", err
		}
		if len(commits) == 0 || !sameCommit(commits[0].Hash, s.SHA) { // newest first: the head
			return moved()
		}
	}
	if rd.need.Has(change.PathsInput) {
		rd.addPaths(stats, pathsCut, "the pull request's diffstat")
	}
	if rd.need.Has(change.CommitsInput) {
		rd.addCommits(commits, commitsCut, "the pull request's commits")
	}
	return true, "", nil
}

// namesOtherCommit reports whether a pull request's diffstat was answered from the diffstat of
// a revision spec (Bitbucket redirects to one naming the pull request's source and destination
// commits) that does not name commit. A spec naming no commit tells nothing.
func namesOtherCommit(at *url.URL, commit string) bool {
	_, spec, ok := strings.Cut(at.Path, "/diffstat/")
	if !ok {
		return false
	}
	named := false
	for _, run := range strings.FieldsFunc(spec, func(r rune) bool { return !strings.ContainsRune("0123456789abcdefABCDEF", r) }) {
		if len(run) < change.MinAbbreviatedSHA {
			continue
		}
		if sameCommit(run, commit) {
			return false
		}
		named = true
	}
	return named
}

// paths reads a diffstat into the change's paths.
func (rd *read) paths(ctx context.Context, u, what, scope string) error {
	entries, cut, _, err := list[DiffStat](ctx, rd.c, u, what, scope, MaxReadPaths, &rd.requests)
	if err != nil {
		return err
	}
	rd.addPaths(entries, cut, what)
	return nil
}

// addPaths adds a diffstat's paths to the change's: a renamed file's old path too.
func (rd *read) addPaths(entries []DiffStat, cut bool, what string) {
	paths := make([]string, 0, 2*len(entries))
	for _, e := range entries {
		for _, side := range []*struct {
			Path string `json:"path"`
		}{e.Old, e.New} {
			if side != nil {
				paths = append(paths, side.Path)
			}
		}
	}
	providerapi.AddPaths(rd.s, paths...)
	if cut {
		rd.s.MarkUnread(change.PathsInput, fmt.Sprintf("%s lists more than %d files; amiss reads the first %d", what, MaxReadPaths, MaxReadPaths))
	}
}

// commits reads a listing of commits (newest first, as Bitbucket lists them) into the
// change's commits, oldest first.
func (rd *read) commits(ctx context.Context, u, what, scope string) error {
	commits, cut, _, err := list[Commit](ctx, rd.c, u, what, scope, MaxReadCommits, &rd.requests)
	if err != nil {
		return err
	}
	rd.addCommits(commits, cut, what)
	return nil
}

// addCommits adds commits, listed newest first, to the change's, oldest first.
func (rd *read) addCommits(commits []Commit, cut bool, what string) {
	for _, c := range slices.Backward(commits) {
		rd.s.Commits = append(rd.s.Commits, change.Commit{ID: c.Hash, Message: c.Message})
	}
	if cut {
		rd.s.MarkUnread(change.CommitsInput, fmt.Sprintf("%s are more than %d; amiss reads the newest %d", what, MaxReadCommits, MaxReadCommits))
	}
}

// sameCommit reports whether two hashes, either abbreviated, name one commit.
func sameCommit(a, b string) bool {
	if len(a) < change.MinAbbreviatedSHA || len(b) < change.MinAbbreviatedSHA {
		return false
	}
	a, b = strings.ToLower(a), strings.ToLower(b)
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}
