package change

import (
	"fmt"
	"strings"
)

// GitHub and the Gitea family share their payload shapes.
type ghRepo struct {
	FullName string `json:"full_name"`
}

// ghInstallation is the GitHub App installation a webhook was sent for (absent from a
// repository's own webhooks and from Gitea's).
type ghInstallation struct {
	Installation struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

type ghCommit struct {
	ID       string   `json:"id"`
	Message  string   `json:"message"`
	Added    []string `json:"added"`
	Removed  []string `json:"removed"`
	Modified []string `json:"modified"`
}

type ghPush struct {
	Ref     string `json:"ref"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Deleted bool   `json:"deleted"`
	// Created and Forced are GitHub's: the push created its ref, or was forced.
	Created    bool       `json:"created"`
	Forced     bool       `json:"forced"`
	Repository ghRepo     `json:"repository"`
	Commits    []ghCommit `json:"commits"`
	// TotalCommits is Gitea's and Forgejo's count of the push's commits, of which the payload
	// lists the newest few (setting.UI.FeedMaxCommitNum, 5 by default); GitHub sends none.
	TotalCommits *int `json:"total_commits"`
}

// githubPushCommits is the most commits a GitHub push webhook lists; a push of more lists
// that many, and the rest are read from the API.
const githubPushCommits = 2048

// A Gitea or Forgejo push's listing is never taken for its paths (each commit's files are what
// it changes against its first parent, as on GitHub: see listsItsCommits), and for its commits
// only when it lists the push's head: their webhook
// for a new tag lists no commit and counts none (total_commits 0; services/repository/push.go
// notifies a tag with an empty PushCommits, its head commit alone set), and so does their
// webhook for a branch forced back to an older commit (before..after holds none).

// giteaNewBranchCommits is the most commits Gitea's and Forgejo's webhook counts for a push
// creating a branch: the newest of the head's history, whatever the branch brings to the
// repository (services/repository/push.go: CommitsBeforeLimit(10) for a new ref, and
// total_commits is their number). A count below it is the head's whole history, every commit
// the branch may bring; a count of it says nothing of the commits before them.
const giteaNewBranchCommits = 10

// listsItsCommits reports whether a GitHub push's payload lists the commits it brings to its
// branch, as far as the payload can show. GitHub lists the commits of before...after only
// when the push brings one new to the repository (those pushed before are then listed with
// distinct false): a branch fast-forwarded to a commit pushed before lists none, and so does a
// branch created at one (GitHub's own Slack app skips such "pushes with no new commits"). A
// push creating its branch lists only the commits new to the repository, not those it brings
// that another branch had, and a forced push lists none of them at times, its head new or
// not. So the listing is taken for the push's commits only when the push neither creates its
// branch nor is forced, and lists its head commit.
//
// It is never taken for the push's paths. Each commit's added, removed and modified lists are
// what the commit changes against its first parent, as GitHub shows a commit (a merge's
// too), and a push whose merge does not have the branch's earlier commit as its first parent
// changes paths on the branch that none of its commits changes so: a merge of the branch made
// with "git merge -s ours" on an older commit, fast-forwarded onto the branch, takes the older
// tree back (a file the branch removed since, restored) and lists nothing. The payload names
// no commit's parents, so no listing shows that none is such a merge.
func (p *ghPush) listsItsCommits() bool {
	return !p.Created && !p.Forced && !zeroSHA(p.Before) && p.lists(p.After)
}

// lists reports whether the payload lists commit id.
func (p *ghPush) lists(id string) bool {
	for _, c := range p.Commits {
		if c.ID == id {
			return true
		}
	}
	return false
}

// pushWhole is what a push's payload holds whole when it lists listed of total commits (total
// < 0: the payload gives no count, and lists every commit up to max): the commits, and the
// paths their added, modified and removed lists name, when none were left out.
func pushWhole(listed, total, max int) Inputs {
	whole := TitleInput | PullInput // a push has no pull request
	if total < 0 && listed < max || total >= 0 && listed >= total {
		whole |= CommitsInput | PathsInput
	}
	return whole
}

// before is a push's before commit, or "" for a new branch.
func before(sha string) string {
	if zeroSHA(sha) || !isSHA(sha) {
		return ""
	}
	return sha
}

type ghPull struct {
	Action     string `json:"action"`
	Number     int    `json:"number"`
	Repository ghRepo `json:"repository"`
	// Changes is an edit's: what it changed, from what.
	Changes struct {
		Title *struct {
			From string `json:"from"`
		} `json:"title"`
		Base *struct {
			Ref *struct {
				From string `json:"from"`
			} `json:"ref"`
		} `json:"base"`
		// Ref is Gitea's and Forgejo's changed target branch (GitHub's is Base.Ref).
		Ref *struct {
			From string `json:"from"`
		} `json:"ref"`
	} `json:"changes"`
	PullRequest struct {
		Title string `json:"title"`
		Head  struct {
			SHA string `json:"sha"`
			Ref string `json:"ref"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	} `json:"pull_request"`
}

// addCommits records a push's commits and the paths they added, modified or removed.
func (s *Change) addCommits(commits []ghCommit) {
	var lists [][]string
	for _, c := range commits {
		s.Commits = append(s.Commits, Commit{ID: c.ID, Message: c.Message})
		lists = append(lists, c.Added, c.Modified, c.Removed)
	}
	s.Paths = paths(lists...)
}

// pullWhole is what a pull request's webhook holds whole, on every provider: the pull request
// and its title, never its commits or changed paths.
const pullWhole = TitleInput | PullInput

// evaluatedPullActions are the pull request actions that can change a verdict.
var evaluatedPullActions = map[string]bool{"opened": true, "reopened": true, "synchronize": true, "synchronized": true,
	"edited": true, "ready_for_review": true}

func fromGitHubFamily(provider, event string, body []byte) (Change, error) {
	s, err := fromGitHubEvent(provider, event, body)
	if err != nil {
		return Change{}, err
	}
	var in ghInstallation
	if err := decode(body, &in); err != nil {
		return Change{}, err
	}
	if in.Installation.ID < 0 {
		return Change{}, fmt.Errorf("%w: installation id %d", ErrMalformed, in.Installation.ID)
	}
	s.Installation = in.Installation.ID
	return s, nil
}

func fromGitHubEvent(provider, event string, body []byte) (Change, error) {
	switch event {
	case "push":
		var p ghPush
		if err := decode(body, &p); err != nil {
			return Change{}, err
		}
		if p.Deleted || zeroSHA(p.After) {
			return Change{}, fmt.Errorf("%w: %s deleted", ErrIgnored, p.Ref)
		}
		s := Change{Event: Push, Repository: p.Repository.FullName, SHA: p.After, Ref: p.Ref, Before: before(p.Before)}
		s.addCommits(p.Commits)
		total := -1 // GitHub lists every commit, up to githubPushCommits
		if provider != "github" {
			// Gitea and Forgejo list the newest few: whole only when the count says so.
			total = len(p.Commits) + 1
			if p.TotalCommits != nil {
				total = *p.TotalCommits
			}
		}
		s.Whole = pushWhole(len(p.Commits), total, githubPushCommits)
		switch {
		case provider == "github":
			// The paths are read from GitHub's comparison: the listing's are its commits'
			// against their first parents, not what the push changes on its branch.
			s.Whole &^= PathsInput
			if !p.listsItsCommits() {
				s.Whole &^= CommitsInput // read from GitHub's comparison too
			}
		default:
			// Gitea and Forgejo list each commit's files against its first parent too, and name
			// no commit's parents: the paths are read from the comparison.
			s.Whole &^= PathsInput
			switch {
			case s.Before == "" && total >= giteaNewBranchCommits:
				s.Whole &^= CommitsInput // the head's history may hold more the branch brings
			case !p.lists(p.After):
				// A new tag (Gitea lists no commit and counts none) or a branch forced back
				// (none in before..after): 0 of 0 is not what the push brings.
				s.Whole &^= CommitsInput
			}
		}
		return s, nil
	case "pull_request":
		var p ghPull
		if err := decode(body, &p); err != nil {
			return Change{}, err
		}
		if !evaluatedPullActions[p.Action] {
			return Change{}, fmt.Errorf("%w: pull request %s", ErrIgnored, p.Action)
		}
		s := Change{Event: PullRequest, Repository: p.Repository.FullName, SHA: p.PullRequest.Head.SHA,
			Ref: "refs/heads/" + p.PullRequest.Head.Ref, Whole: pullWhole,
			Pull: &Pull{Number: p.Number, Title: p.PullRequest.Title, TargetBranch: p.PullRequest.Base.Ref,
				SourceBranch: p.PullRequest.Head.Ref}}
		s.Pull.Starts = p.Action == "opened" || p.Action == "synchronize" || p.Action == "synchronized"
		if p.Action == "edited" {
			was := PullState{Title: p.PullRequest.Title, TargetBranch: p.PullRequest.Base.Ref}
			if c := p.Changes.Title; c != nil {
				was.Title = c.From
			}
			if c := p.Changes.Base; c != nil && c.Ref != nil {
				was.TargetBranch = c.Ref.From
			}
			if c := p.Changes.Ref; c != nil && provider != "github" {
				was.TargetBranch = c.From
			}
			s.Pull.Was = &was
		}
		return s, nil
	case "check_run", "check_suite":
		return fromRerun(event, body)
	case "":
		return Change{}, fmt.Errorf("%w: %s event header missing", ErrMalformed, provider)
	}
	return Change{}, fmt.Errorf("%w: %s event %q", ErrIgnored, provider, event)
}

// ghCheck is the check run or check suite of a check_run or check_suite webhook: the commit,
// the branch (a check suite's) and the pull requests whose head it is.
type ghCheck struct {
	HeadSHA    string `json:"head_sha"`
	HeadBranch string `json:"head_branch"`
	// Before and After are a check suite's: the push that made it moved the branch from
	// Before to After (the head commit).
	Before string `json:"before"`
	After  string `json:"after"`
	// ExternalID is a check run's: the ledger key of the delivery amiss published it for.
	ExternalID string `json:"external_id"`
	// CheckSuite is a check run's suite: its branch, and the push that made it.
	CheckSuite *struct {
		HeadBranch string `json:"head_branch"`
		Before     string `json:"before"`
		After      string `json:"after"`
	} `json:"check_suite"`
	PullRequests []struct {
		Number int `json:"number"`
		Head   struct {
			Ref string `json:"ref"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
			// Repo is the repository the pull request is based in, whose number it has.
			Repo *ghRerunRepo `json:"repo"`
		} `json:"base"`
	} `json:"pull_requests"`
}

// ghRerunRepo is a repository as a check run's or check suite's webhook names it: its own,
// and each pull request's base.
type ghRerunRepo struct {
	ID       int64  `json:"id"`
	FullName string `json:"full_name"`
	URL      string `json:"url"`
}

// isRepo reports whether r, named by a pull request of a webhook for repo, is repo: by id
// when both name one, else by its API URL (which ends in /repos/{owner}/{name}). A pull
// request that names neither is taken as based in repo, as GitHub lists them for it.
func (r *ghRerunRepo) isRepo(repo ghRerunRepo) bool {
	switch {
	case r == nil:
		return true
	case r.ID != 0 && repo.ID != 0:
		return r.ID == repo.ID
	case r.URL != "":
		return strings.HasSuffix(strings.ToLower(r.URL), "/repos/"+strings.ToLower(repo.FullName))
	}
	return true
}

type ghRerun struct {
	Action     string      `json:"action"`
	Repository ghRerunRepo `json:"repository"`
	CheckRun   *ghCheck    `json:"check_run"`
	CheckSuite *ghCheck    `json:"check_suite"`
}

// fromRerun reads a check_run or check_suite webhook. Only "rerequested" (a user pressed
// Re-run) is evaluated: the other actions (created, completed, requested, requested_action)
// report what GitHub or an App did, and are ignored. The change is the head commit; it holds no
// commits, changed paths or title whole (the body carries none), and its pull request only
// when the body names one. RerunOf is the check run's external_id when it is a ledger key (a
// check run amiss published). A check suite's branch is its head_branch (a check run's, its
// suite's); the first pull request the commit heads gives the pull request's number and
// branches (never its title, which the body does not carry). Only the pull requests based in
// the webhook's repository count: GitHub lists too those of other repositories whose head is
// the commit's branch (a fork's pull request merging this repository's branch), whose numbers
// name no pull request here. For a check run amiss published
// that pull request is not held whole: the commit may head several (all are Listed), or the
// check run may be a push's, and the delivery it was published for (RerunOf) says which; the
// first listed stands in when that delivery is no longer kept, or was for a pull request the
// commit no longer heads. Before is the check suite's (a check run's own
// suite's), when the suite's after is the head commit: the commit the branch was at before
// the push, from which a re-run of a push reads the commits and paths it lacks.
func fromRerun(event string, body []byte) (Change, error) {
	var p ghRerun
	if err := decode(body, &p); err != nil {
		return Change{}, err
	}
	if p.Action != "rerequested" {
		return Change{}, fmt.Errorf("%w: %s %s", ErrIgnored, event, p.Action)
	}
	c := p.CheckRun
	if event == "check_suite" {
		c = p.CheckSuite
	}
	if c == nil {
		return Change{}, fmt.Errorf("%w: %s payload without its %s", ErrMalformed, event, event)
	}
	s := Change{Event: Rerun, Repository: p.Repository.FullName, SHA: c.HeadSHA}
	if event == "check_run" && isSHA(c.ExternalID) && len(c.ExternalID) == 64 {
		s.RerunOf = c.ExternalID
	}
	before, after, branch := c.Before, c.After, c.HeadBranch
	if c.CheckSuite != nil {
		before, after, branch = c.CheckSuite.Before, c.CheckSuite.After, c.CheckSuite.HeadBranch
	}
	if after == c.HeadSHA && isSHA(before) {
		s.Before = before
	}
	if branch != "" {
		s.Ref = "refs/heads/" + branch
	}
	pulls := c.PullRequests[:0:0]
	for _, pr := range c.PullRequests {
		if pr.Base.Repo.isRepo(p.Repository) {
			pulls = append(pulls, pr)
		}
	}
	if len(pulls) > 0 {
		pr := pulls[0]
		s.Pull = &Pull{Number: pr.Number, TargetBranch: pr.Base.Ref, SourceBranch: pr.Head.Ref}
		if s.RerunOf == "" {
			s.Whole = PullInput
		} else { // the check run's own delivery says which it was for (the runner looks)
			for _, p := range pulls {
				s.Listed = append(s.Listed, p.Number)
			}
		}
		if s.Ref == "" && pr.Head.Ref != "" {
			s.Ref = "refs/heads/" + pr.Head.Ref
		}
	}
	return s, nil
}

type glPayload struct {
	ObjectKind string `json:"object_kind"`
	Ref        string `json:"ref"`
	Before     string `json:"before"`
	After      string `json:"after"`
	// TotalCommits counts the push's commits, of which the payload lists the newest 20.
	TotalCommits *int   `json:"total_commits_count"`
	Checkout     string `json:"checkout_sha"`
	Project      struct {
		Path string `json:"path_with_namespace"`
	} `json:"project"`
	Commits []ghCommit `json:"commits"`
	Attrs   struct {
		IID          int    `json:"iid"`
		Title        string `json:"title"`
		Action       string `json:"action"`
		TargetBranch string `json:"target_branch"`
		SourceBranch string `json:"source_branch"`
		LastCommit   struct {
			ID string `json:"id"`
		} `json:"last_commit"`
		// Oldrev is set on an update that a push made: the commit the request was at before.
		Oldrev string `json:"oldrev"`
	} `json:"object_attributes"`
	// Changes is an update's: what it changed, from what.
	Changes struct {
		Title *struct {
			Previous string `json:"previous"`
		} `json:"title"`
		TargetBranch *struct {
			Previous string `json:"previous"`
		} `json:"target_branch"`
	} `json:"changes"`
}

var evaluatedMergeActions = map[string]bool{"open": true, "reopen": true, "update": true}

func fromGitLab(body []byte) (Change, error) {
	var p glPayload
	if err := decode(body, &p); err != nil {
		return Change{}, err
	}
	switch p.ObjectKind {
	case "push":
		if zeroSHA(p.After) {
			return Change{}, fmt.Errorf("%w: %s deleted", ErrIgnored, p.Ref)
		}
		sha := p.After
		if p.Checkout != "" {
			sha = p.Checkout
		}
		s := Change{Event: Push, Repository: p.Project.Path, SHA: sha, Ref: p.Ref, Before: before(p.Before)}
		s.addCommits(p.Commits)
		total := len(p.Commits) + 1 // no count: not known to be whole
		if p.TotalCommits != nil {
			total = *p.TotalCommits
		}
		// The paths are read from GitLab's comparison of before with after: the listing's are
		// each commit's against its first parent (a merge taking an older tree lists nothing
		// it restores), and a push forced back lists no commit at all.
		s.Whole = pushWhole(len(p.Commits), total, 0) &^ PathsInput
		return s, nil
	case "merge_request":
		if !evaluatedMergeActions[p.Attrs.Action] {
			return Change{}, fmt.Errorf("%w: merge request %s", ErrIgnored, p.Attrs.Action)
		}
		s := Change{Event: PullRequest, Repository: p.Project.Path, SHA: p.Attrs.LastCommit.ID,
			Ref: "refs/heads/" + p.Attrs.SourceBranch, Whole: pullWhole,
			Pull: &Pull{Number: p.Attrs.IID, Title: p.Attrs.Title, TargetBranch: p.Attrs.TargetBranch,
				SourceBranch: p.Attrs.SourceBranch}}
		s.Pull.Starts = p.Attrs.Action == "open" || (p.Attrs.Action == "update" && p.Attrs.Oldrev != "")
		if p.Attrs.Action == "update" && p.Attrs.Oldrev == "" { // a push's update is the new commit's first
			was := PullState{Title: p.Attrs.Title, TargetBranch: p.Attrs.TargetBranch}
			if c := p.Changes.Title; c != nil {
				was.Title = c.Previous
			}
			if c := p.Changes.TargetBranch; c != nil {
				was.TargetBranch = c.Previous
			}
			s.Pull.Was = &was
		}
		return s, nil
	case "":
		return Change{}, fmt.Errorf("%w: gitlab payload without object_kind", ErrMalformed)
	}
	return Change{}, fmt.Errorf("%w: gitlab %s", ErrIgnored, p.ObjectKind)
}

// Bitbucket Cloud.
type bbcPush struct {
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Push struct {
		Changes []struct {
			Old *struct {
				Target struct {
					Hash string `json:"hash"`
				} `json:"target"`
			} `json:"old"`
			New *struct {
				Type   string `json:"type"`
				Name   string `json:"name"`
				Target struct {
					Hash string `json:"hash"`
				} `json:"target"`
			} `json:"new"`
			Commits []struct {
				Hash    string `json:"hash"`
				Message string `json:"message"`
			} `json:"commits"`
			// Truncated: the change has more commits than the 5 it lists.
			Truncated bool `json:"truncated"`
		} `json:"changes"`
	} `json:"push"`
}

type bbcPull struct {
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	PullRequest struct {
		ID     int    `json:"id"`
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
		} `json:"destination"`
	} `json:"pullrequest"`
}

// Bitbucket Data Center.
type bbdRepo struct {
	Slug    string `json:"slug"`
	Project struct {
		Key string `json:"key"`
	} `json:"project"`
}

type bbdPush struct {
	Repository bbdRepo `json:"repository"`
	Changes    []struct {
		Ref struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"ref"`
		FromHash string `json:"fromHash"`
		ToHash   string `json:"toHash"`
		Type     string `json:"type"`
	} `json:"changes"`
}

type bbdPull struct {
	PullRequest struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		FromRef struct {
			ID           string  `json:"id"`
			DisplayID    string  `json:"displayId"`
			LatestCommit string  `json:"latestCommit"`
			Repository   bbdRepo `json:"repository"`
		} `json:"fromRef"`
		ToRef struct {
			DisplayID  string  `json:"displayId"`
			Repository bbdRepo `json:"repository"`
		} `json:"toRef"`
	} `json:"pullRequest"`
	// A pr:modified's: the title and target before the modification.
	PreviousTitle  *string `json:"previousTitle"`
	PreviousTarget *struct {
		DisplayID string `json:"displayId"`
	} `json:"previousTarget"`
}

// name is the repository as Data Center's API addresses it: its project's key (as the server
// spells it: the key is what the REST paths name) and its slug.
func (r bbdRepo) name() string {
	if r.Project.Key == "" || r.Slug == "" {
		return ""
	}
	return r.Project.Key + "/" + r.Slug
}

// fromBitbucket reads a Bitbucket Cloud or Data Center webhook, told apart by its event key, and
// names the API it came from.
func fromBitbucket(event string, body []byte) ([]Change, error) {
	cs, err := fromBitbucketEvent(event, body)
	for i := range cs {
		cs[i].API = BitbucketCloud
		if dataCenterEvents[event] {
			cs[i].API = BitbucketDataCenter
		}
	}
	return cs, err
}

// dataCenterEvents are the event keys of Bitbucket Data Center's webhooks amiss evaluates
// (Bitbucket Cloud's are repo:push and pullrequest:*).
var dataCenterEvents = map[string]bool{"repo:refs_changed": true, "pr:opened": true, "pr:from_ref_updated": true, "pr:modified": true}

// fromBitbucketEvent reads a Bitbucket webhook: a push gives a change for each branch it
// updated (created or moved; deletions and tags are not evaluated), anything else one change.
func fromBitbucketEvent(event string, body []byte) ([]Change, error) {
	switch event {
	case "repo:push": // Cloud
		var p bbcPush
		if err := decode(body, &p); err != nil {
			return nil, err
		}
		var out []Change
		for _, c := range p.Push.Changes {
			if c.New == nil || c.New.Type != "branch" {
				continue // a deletion, or a tag
			}
			s := Change{Event: Push, Repository: p.Repository.FullName, SHA: c.New.Target.Hash, Ref: "refs/heads/" + c.New.Name,
				Whole: TitleInput | PullInput} // Bitbucket Cloud lists no changed paths
			if c.Old != nil {
				s.Before = before(c.Old.Target.Hash)
			}
			for i := len(c.Commits) - 1; i >= 0; i-- { // Bitbucket lists newest first
				s.Commits = append(s.Commits, Commit{ID: c.Commits[i].Hash, Message: c.Commits[i].Message})
			}
			if !c.Truncated {
				s.Whole |= CommitsInput
			}
			out = append(out, s)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: push without a branch update", ErrIgnored)
		}
		return out, nil
	case "pullrequest:created", "pullrequest:updated":
		var p bbcPull
		if err := decode(body, &p); err != nil {
			return nil, err
		}
		pr := p.PullRequest
		return []Change{{Event: PullRequest, Repository: p.Repository.FullName, SHA: pr.Source.Commit.Hash,
			Ref: "refs/heads/" + pr.Source.Branch.Name, Whole: pullWhole,
			Pull: &Pull{Number: pr.ID, Title: pr.Title, TargetBranch: pr.Destination.Branch.Name, SourceBranch: pr.Source.Branch.Name}}}, nil
	case "repo:refs_changed": // Data Center
		var p bbdPush
		if err := decode(body, &p); err != nil {
			return nil, err
		}
		var out []Change
		for _, c := range p.Changes {
			if c.Ref.Type != "BRANCH" || c.Type == "DELETE" || zeroSHA(c.ToHash) {
				continue
			}
			// Data Center lists neither commits nor changed paths.
			out = append(out, Change{Event: Push, Repository: p.Repository.name(), SHA: c.ToHash, Ref: c.Ref.ID,
				Before: before(c.FromHash), Whole: TitleInput | PullInput})
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: refs changed without a branch update", ErrIgnored)
		}
		return out, nil
	case "pr:opened", "pr:from_ref_updated", "pr:modified":
		var p bbdPull
		if err := decode(body, &p); err != nil {
			return nil, err
		}
		pr := p.PullRequest
		s := Change{Event: PullRequest, Repository: pr.ToRef.Repository.name(), SHA: pr.FromRef.LatestCommit,
			Ref: pr.FromRef.ID, Whole: pullWhole,
			Pull: &Pull{Number: pr.ID, Title: pr.Title, TargetBranch: pr.ToRef.DisplayID, SourceBranch: pr.FromRef.DisplayID}}
		s.Pull.Starts = event == "pr:opened" || event == "pr:from_ref_updated"
		if event == "pr:modified" {
			was := PullState{Title: pr.Title, TargetBranch: pr.ToRef.DisplayID}
			if p.PreviousTitle != nil {
				was.Title = *p.PreviousTitle
			}
			if p.PreviousTarget != nil {
				was.TargetBranch = p.PreviousTarget.DisplayID
			}
			s.Pull.Was = &was
		}
		return []Change{s}, nil
	case "diagnostics:ping":
		return nil, fmt.Errorf("%w: ping", ErrIgnored)
	case "":
		return nil, fmt.Errorf("%w: bitbucket X-Event-Key header missing", ErrMalformed)
	}
	return nil, fmt.Errorf("%w: bitbucket %s", ErrIgnored, event)
}

// Standard Webhooks senders send {"type": "push"|"pull_request", "data": <change fields>}.
type stdPayload struct {
	Type string `json:"type"`
	Data Change `json:"data"`
}

func fromStandard(body []byte) (Change, error) {
	var p stdPayload
	if err := decode(body, &p); err != nil {
		return Change{}, err
	}
	switch p.Type {
	case Push, PullRequest:
	case "":
		return Change{}, fmt.Errorf("%w: payload without a type", ErrMalformed)
	default:
		return Change{}, fmt.Errorf("%w: type %q", ErrIgnored, p.Type)
	}
	s := p.Data
	s.Event = p.Type
	// The data amiss defines lists every commit and changed path: a list the sender sends
	// (empty included) is whole, as far as the bounds keep it; one it leaves out (or sends
	// null) is not known, and no API can read it. What the data claims whole is not taken.
	s.Whole = TitleInput | PullInput
	if s.Commits != nil {
		s.Whole |= CommitsInput
	}
	if s.Paths != nil {
		s.Whole |= PathsInput
	}
	s.Installation = 0 // a GitHub App's: never named by another sender
	s.RerunOf = ""     // a re-run's
	s.API = ""         // a Bitbucket webhook's
	if s.Event == PullRequest && s.Pull == nil {
		return Change{}, fmt.Errorf("%w: pull_request without pull_request data", ErrMalformed)
	}
	if s.Pull != nil {
		s.Pull.Was, s.Pull.Starts = nil, false // what an event did is the provider's to prove, not a sender's to claim
	}
	return s, nil
}
