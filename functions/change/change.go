// Package change extracts the bounded, normalised change of a webhook: what the runner
// evaluates, whatever the provider. It reads push and pull/merge request payloads of GitHub,
// Gitea/Forgejo, GitLab, Bitbucket Cloud, Bitbucket Data Center and Standard Webhooks senders
// (whose data amiss defines: see docs/providers/standard-webhooks.md).
package change

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Event kinds.
const (
	Push        = "push"
	PullRequest = "pull_request"
	// Rerun is a GitHub user's request to evaluate a commit again (the "Re-run" button of a
	// check run or a check suite). Its webhook names the commit and its pull requests'
	// branches, and carries no commits, changed paths or pull request title: the change
	// holds none of them whole, and the runner reads them from GitHub.
	Rerun = "rerun"
)

// Bounds on what a change keeps.
const (
	MaxCommits      = 100
	MaxMessageBytes = 2 << 10
	MaxPaths        = 1000
	MaxTitleBytes   = 512
)

// Change is what the runner evaluates.
type Change struct {
	Provider   string   `json:"provider"`
	Repository string   `json:"repository"`
	SHA        string   `json:"sha"`
	Ref        string   `json:"ref,omitempty"`
	Event      string   `json:"event"`
	Pull       *Pull    `json:"pull_request,omitempty"`
	Commits    []Commit `json:"commits,omitempty"`
	Paths      []string `json:"changed_paths,omitempty"`
	// Whole says which inputs the change holds whole, as its webhook (or the provider's API,
	// read by the runner) gave them: the rules that need an input not held whole have it read
	// from the provider first, and fail closed when it cannot be. A change stored before amiss
	// recorded it holds nothing whole.
	Whole Inputs `json:"whole,omitempty"`
	// Installation is the GitHub App installation a GitHub webhook came from (installation.id
	// in its signed body; 0 when it carried none: a repository's own webhook). A publisher
	// that authenticates as the App posts with that installation's token.
	Installation int64 `json:"installation,omitempty"`
	// Before is the commit the branch was at before the push (a push's before, a re-run's
	// check suite's; empty when the body gave none, or for a new branch). With SHA it names
	// the push's commits and changed paths, which the runner reads from the provider when the
	// webhook did not list them whole.
	Before string `json:"before,omitempty"`
	// RerunOf is the delivery a re-run's check run was published for (the check run's
	// external_id, the ledger key of that delivery; empty for a check suite, or a check run
	// amiss did not create): its change says which pull request (or push) the re-run is of.
	RerunOf string `json:"rerun_of,omitempty"`
	// Listed are the pull requests a re-run's webhook names the commit heading (Pull is the
	// first), when RerunOf is set: the pull request of RerunOf's delivery is taken only while
	// it is one of them.
	Listed []int `json:"listed_pull_requests,omitempty"`
	// API names the API the webhook's sender speaks where one provider's webhooks come from
	// more than one (Bitbucket: BitbucketCloud or BitbucketDataCenter, told apart by the event
	// key); empty where the provider has one. A reader or publisher of another API must not
	// take the delivery for its own.
	API string `json:"api,omitempty"`

	// Unread lists the inputs the provider's API could not give whole, with why. Set by the
	// runner before evaluation, never stored.
	Unread []Unread `json:"-"`
	// Read says what the runner read from the provider's API for this evaluation (for the
	// verdict's record). Set by the runner, never stored.
	Read []string `json:"-"`
}

// The APIs a Bitbucket webhook may come from, named as the provider table (functions/provider)
// names them: Bitbucket Cloud's (api.bitbucket.org), or a Bitbucket Data Center server's.
const (
	BitbucketCloud      = "bitbucket"
	BitbucketDataCenter = "bitbucket-datacenter"
)

// Pull is a pull or merge request.
type Pull struct {
	Number       int    `json:"number"`
	Title        string `json:"title"`
	TargetBranch string `json:"target_branch"`
	SourceBranch string `json:"source_branch,omitempty"`
	// Was is the pull request as it was just before this event, as the payload proves it: set
	// for an edit (GitHub's, Gitea's and Forgejo's edited, with changes.title.from and the
	// target branch's changes.base.ref.from, changes.ref.from on Gitea and Forgejo; GitLab's
	// update not made by a push, with changes.title.previous and
	// changes.target_branch.previous; Bitbucket Data Center's pr:modified, with previousTitle
	// and previousTarget), what the edit did not change as it is now. Nil when the payload
	// proves nothing of what came before. It orders two verdicts whose events carry the same
	// time: this event came after one evaluated on Was.
	Was *PullState `json:"was,omitempty"`
	// Starts says this event made the change's commit the pull request's head: it opened the
	// pull request, or pushed the commit to it (GitHub's and Gitea's opened and
	// synchronize(d), GitLab's open and update by a push, Bitbucket Data Center's pr:opened
	// and pr:from_ref_updated). Every edit carrying that head came after it (unless the head
	// was pushed back to the commit since).
	Starts bool `json:"starts,omitempty"`
}

// PullState is what a pull request's verdict depends on that an edit changes (the commit is
// the change's).
type PullState struct {
	Title        string `json:"title"`
	TargetBranch string `json:"target_branch"`
}

// Commit is one commit of a push.
type Commit struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

var (
	// ErrIgnored: the request is a kind amiss does not evaluate (a ping, a closed pull
	// request, a deleted branch). The ingress answers 204.
	ErrIgnored = errors.New("change: event not evaluated")
	// ErrMalformed: the payload lacks what its event must carry. The ingress answers 400.
	ErrMalformed = errors.New("change: malformed payload")
	// ErrTooMany: a push updates more branches than one webhook's are evaluated
	// (MaxBranches, CheckBranches). The ingress answers 413.
	ErrTooMany = errors.New("change: too many branches")
)

// A Format is the shape of one family of providers' webhooks: where the event kind is named
// (a header, or the body) and how each kind's payload reads. The provider table
// (functions/provider) gives each provider its format.
type Format struct {
	read func(provider string, h http.Header, body []byte) (changes []Change, abbreviated bool, err error)
}

// one is the one change of a webhook that carries one.
func one(s Change, err error) ([]Change, bool, error) {
	if err != nil {
		return nil, false, err
	}
	return []Change{s}, false, nil
}

// The formats amiss reads.
var (
	// GitHubFormat: the event in X-GitHub-Event.
	GitHubFormat = Format{func(provider string, h http.Header, body []byte) ([]Change, bool, error) {
		return one(fromGitHubFamily(provider, h.Get("X-GitHub-Event"), body))
	}}
	// GiteaFormat: GitHub's payloads, the event in X-Gitea-Event.
	GiteaFormat = Format{func(provider string, h http.Header, body []byte) ([]Change, bool, error) {
		return one(fromGitHubFamily(provider, h.Get("X-Gitea-Event"), body))
	}}
	// ForgejoFormat: GitHub's payloads, the event in X-Forgejo-Event (or X-Gitea-Event).
	ForgejoFormat = Format{func(provider string, h http.Header, body []byte) ([]Change, bool, error) {
		ev := h.Get("X-Forgejo-Event")
		if ev == "" {
			ev = h.Get("X-Gitea-Event")
		}
		return one(fromGitHubFamily(provider, ev, body))
	}}
	// GitLabFormat: the event in the body's object_kind.
	GitLabFormat = Format{func(_ string, _ http.Header, body []byte) ([]Change, bool, error) {
		return one(fromGitLab(body))
	}}
	// BitbucketFormat: Bitbucket Cloud and Data Center, the event in X-Event-Key. A push lists
	// every branch it updated: one change each.
	BitbucketFormat = Format{func(_ string, h http.Header, body []byte) ([]Change, bool, error) {
		ev := h.Get("X-Event-Key")
		cs, err := fromBitbucket(ev, body)
		// Bitbucket Cloud's pull request payloads abbreviate commit hashes (12 characters
		// observed; at least 7); the publisher resolves them to the full hash.
		return cs, strings.HasPrefix(ev, "pullrequest:"), err
	}}
	// StandardWebhooksFormat: the data amiss defines for Standard Webhooks senders, the event
	// in the body's type.
	StandardWebhooksFormat = Format{func(_ string, _ http.Header, body []byte) ([]Change, bool, error) {
		return one(fromStandard(body))
	}}
)

// MaxBranches bounds the branches one push webhook may update to be evaluated: each is
// admitted on its own while the sender waits for the answer (Bitbucket Cloud gives up after
// 10 seconds), so a larger push is refused whole (CheckBranches), none of its branches
// evaluated.
const MaxBranches = 20

// CheckBranches refuses the changes of a push of more than MaxBranches branches
// (ErrTooMany, naming the count). Extract does not: a route that ignores the push, or may not
// take it, answers it as it answers any push, and only a push it would evaluate is refused
// for its count.
func CheckBranches(cs []Change) error {
	if len(cs) > MaxBranches {
		return fmt.Errorf("%w: a push updating %d branches; amiss evaluates at most %d from one webhook (push fewer at once)",
			ErrTooMany, len(cs), MaxBranches)
	}
	return nil
}

// Extract reads the changes of a request that provider sent in format f: one, but for a
// Bitbucket push, which lists every branch it updated (a push of several branches, or Data
// Center's automatic merge into later release branches) and gives one change per branch, in
// the order the payload lists them. The event kind comes from the provider's event header
// (or, for GitLab and Standard Webhooks, the body). Every change names the provider, has a
// repository and a commit sha, and is bounded (see the bounds above); the changes of one
// request share event, repository and API. An event amiss does not
// evaluate is ErrIgnored, a payload that lacks what its event must carry ErrMalformed. The
// changes are not counted: CheckBranches refuses a push of more than MaxBranches branches.
func Extract(provider string, f Format, h http.Header, body []byte) ([]Change, error) {
	if f.read == nil {
		return nil, fmt.Errorf("change: provider %q sends no webhooks amiss reads", provider)
	}
	cs, abbreviated, err := f.read(provider, h, body)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		s := &cs[i]
		s.Provider = provider
		if s.Repository == "" || !(isSHA(s.SHA) || abbreviated && isAbbreviatedSHA(s.SHA)) {
			return nil, fmt.Errorf("%w: %s %s payload without a repository and a commit sha", ErrMalformed, provider, s.Event)
		}
		s.Bound()
	}
	return cs, nil
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

func isSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MinAbbreviatedSHA is the shortest abbreviated commit hash accepted where a provider is
// known to abbreviate (git's own default abbreviation).
const MinAbbreviatedSHA = 7

// isAbbreviatedSHA reports whether s is lower-case hex of an abbreviated SHA-1 hash.
func isAbbreviatedSHA(s string) bool {
	if len(s) < MinAbbreviatedSHA || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// zeroSHA reports the all-zero sha a provider sends for a deleted ref; an absent sha is not one.
func zeroSHA(s string) bool { return s != "" && strings.Trim(s, "0") == "" }

// cut shortens s to at most n bytes on a rune boundary.
func cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// Bound applies the bounds (the newest MaxCommits commits, MaxMessageBytes of each message,
// the first MaxPaths paths, MaxTitleBytes of the title): an input cut by them is no longer
// held whole.
func (s *Change) Bound() {
	if len(s.Commits) > MaxCommits {
		s.Commits = s.Commits[len(s.Commits)-MaxCommits:]
		s.Whole &^= CommitsInput
	}
	for i := range s.Commits {
		var c bool
		if s.Commits[i].Message, c = cut(s.Commits[i].Message, MaxMessageBytes); c {
			s.Whole &^= CommitsInput
		}
	}
	if len(s.Paths) > MaxPaths {
		s.Paths = s.Paths[:MaxPaths]
		s.Whole &^= PathsInput
	}
	if s.Pull != nil {
		var c bool
		if s.Pull.Title, c = cut(s.Pull.Title, MaxTitleBytes); c {
			s.Whole &^= TitleInput
		}
		if w := s.Pull.Was; w != nil {
			w.Title, _ = cut(w.Title, MaxTitleBytes) // cut as the title it was is, so that the two compare
		}
	}
}

// paths merges changed path lists without repeats, in order of appearance.
func paths(lists ...[]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, p := range l {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Marshal encodes the change for the ledger, fitting maxBytes: when it is too large, changed
// paths and then the oldest commits are dropped (and no longer held whole: the runner reads
// them from the provider when a rule needs them).
func (s Change) Marshal(maxBytes int) ([]byte, error) {
	for {
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		if len(b) <= maxBytes {
			return b, nil
		}
		switch {
		case len(s.Paths) > 0:
			s.Paths = s.Paths[:len(s.Paths)/2]
			s.Whole &^= PathsInput
		case len(s.Commits) > 0:
			s.Commits = s.Commits[1:]
			s.Whole &^= CommitsInput
		default:
			return nil, fmt.Errorf("%w: change of %d bytes over %d even without commits and paths", ErrMalformed, len(b), maxBytes)
		}
	}
}
