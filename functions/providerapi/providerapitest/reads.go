package providerapitest

import (
	"context"
	"crypto/sha1"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// The checks below are what every provider's reader promises of a read of what a webhook
// lacks, each run by the provider's reader test against its own fake: the test gives the
// read, the check asserts the promise.

// Read is a reader's Read of the inputs need of in.
type Read func(in change.Change, need change.Inputs) (change.Change, error)

// CheckReadingAPullRequestKeepsWhatItsWebhookCarried reads the commits and paths of in, a
// pull request's webhook (its title and pull request held whole), whose title and target
// branch the check edits to ones the provider does not hold (as after an edit the webhook
// reports): the read fills the commits and paths whole and keeps the webhook's title and
// branches, never replacing them with what the API answers (which may be older than the event,
// or newer: another event's, whose own verdict follows).
func CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t *testing.T, in change.Change, read Read) {
	t.Helper()
	pull := *in.Pull
	pull.Title, pull.TargetBranch = "WIP: the edited title", "release/1"
	in.Pull = &pull
	got, err := read(in, change.CommitsInput|change.PathsInput)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got.Pull == nil || !reflect.DeepEqual(*got.Pull, pull) || !got.Whole.Has(change.AllInputs) {
		t.Fatalf("the webhook's pull request %+v became %+v (whole %q, unread %+v)", pull, got.Pull, got.Whole, got.Unread)
	}
}

// OutageCodes are the answers of a provider that cannot answer now: a gateway's 502, an
// outage's 503, a rate limit's 429.
var OutageCodes = []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooManyRequests}

// CheckAnOutageWhileReadingIsTransient runs read (a reader's Read of in's paths against a
// provider answering code to every request) for each of OutageCodes: an outage is no verdict,
// so the read is an error of class Transient naming the provider ("reading from " and name),
// to be retried, and the change comes back as it was, nothing marked read or unread.
func CheckAnOutageWhileReadingIsTransient(t *testing.T, name string, in change.Change, read func(code int, in change.Change) (change.Change, error)) {
	t.Helper()
	for _, code := range OutageCodes {
		got, err := read(code, in)
		if err == nil || providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "reading from "+name) {
			t.Fatalf("%d: %v (class %v), want a Transient error reading from %s", code, err, providerapi.ClassOf(err), name)
		}
		if !reflect.DeepEqual(got, in) {
			t.Fatalf("%d: the change became %+v, want it as it was: %+v", code, got, in)
		}
	}
}

// CheckARefusedReadFailsItsInputsClosed runs read (a reader's Read of need against a provider
// refusing it with code) for each of codes: a refusal stands until the operator grants the
// token more, so the read is no error and no retry; every input of need is left unread, none
// of its paths held, each with a reason names accepts (the provider's answer and what to
// grant).
func CheckARefusedReadFailsItsInputsClosed(t *testing.T, codes []int, need change.Inputs, read func(code int) (change.Change, error),
	names func(code int, why string) bool) {
	t.Helper()
	for _, code := range codes {
		got, err := read(code)
		if err != nil {
			t.Fatalf("%d: %v, want the inputs unread, not an error", code, err)
		}
		for _, in := range []change.Inputs{change.TitleInput, change.PullInput, change.CommitsInput, change.PathsInput} {
			if !need.Has(in) {
				continue
			}
			if why := got.UnreadReason(in); got.Whole.Has(in) || !names(code, why) {
				t.Fatalf("%d: %s whole %q, unread %q", code, in, got.Whole, why)
			}
		}
		if need.Has(change.PathsInput) && got.Paths != nil {
			t.Fatalf("%d: paths %q held from a refused read", code, got.Paths)
		}
	}
}

// CheckAListPastTheBoundsIsNotHeldWhole asserts what a read of a push past amiss's bounds
// gave: its first maxPaths paths and its newest maxCommits commits (the newest, head, last),
// neither held whole, each naming the bound, so that the rules needing them fail closed.
func CheckAListPastTheBoundsIsNotHeldWhole(t *testing.T, got change.Change, maxPaths, maxCommits int, head string) {
	t.Helper()
	if got.Whole.Has(change.PathsInput) || len(got.Paths) != maxPaths ||
		!strings.Contains(got.UnreadReason(change.PathsInput), "amiss reads the first 3000") {
		t.Errorf("paths: %d read, whole %v, %q", len(got.Paths), got.Whole, got.UnreadReason(change.PathsInput))
	}
	if got.Whole.Has(change.CommitsInput) || len(got.Commits) != maxCommits || got.Commits[len(got.Commits)-1].ID != head ||
		!strings.Contains(got.UnreadReason(change.CommitsInput), "amiss reads the newest 1000") {
		t.Errorf("commits: %d read, whole %v, %q", len(got.Commits), got.Whole, got.UnreadReason(change.CommitsInput))
	}
}

// CheckADeliveryOfAnotherAPIIsNotRead reads the paths of in, a delivery of another API than
// the reader's (a Data Center server's given to Bitbucket Cloud's reader, or the reverse):
// nothing is asked of the provider (asked counts its requests), and the paths fail closed
// naming the configuration to fix (fix).
func CheckADeliveryOfAnotherAPIIsNotRead(t *testing.T, in change.Change, read Read, asked func() int, fix string) {
	t.Helper()
	got, err := read(in, change.PathsInput)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), fix) || asked() != 0 {
		t.Fatalf("whole %v, unread %+v, %d requests", got.Whole, got.Unread, asked())
	}
}

// Messages is the messages of c's commits, oldest first, without their surrounding space.
func Messages(c change.Change) []string {
	var out []string
	for _, m := range c.Commits {
		out = append(out, strings.TrimSpace(m.Message))
	}
	return out
}

// IDs is the ids of c's commits, oldest first.
func IDs(c change.Change) []string {
	var out []string
	for _, m := range c.Commits {
		out = append(out, m.ID)
	}
	return out
}

// CommitN is a made-up commit id numbered n (40 hexadecimal digits).
func CommitN(n int) string { return fmt.Sprintf("%040x", n+1) }

// CommitsFrom is CommitN of from to to.
func CommitsFrom(from, to int) []string {
	var out []string
	for n := from; n <= to; n++ {
		out = append(out, CommitN(n))
	}
	return out
}

// Hash is a made-up commit hash numbered n (a SHA-1's 40 hexadecimal digits, unlike any other
// n's in its first 12).
func Hash(n int) string { return fmt.Sprintf("%x", sha1.Sum([]byte(strconv.Itoa(n)))) }

// Reader is a provider's reader under test, reading from its fake.
type Reader struct {
	T *testing.T
	// Read is the reader's Read.
	Read func(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error)
	// Violations lists the requests the fake recorded as breaking the provider's API; API names
	// it in a failure ("GitLab's API description").
	Violations func() []string
	API        string
}

// Inputs is Read's answer to need of s, failing T on a request that broke the API.
func (r Reader) Inputs(s change.Change, need change.Inputs) (change.Change, error) {
	r.T.Helper()
	got, err := r.Read(context.Background(), s, need)
	if v := r.Violations(); len(v) > 0 {
		r.T.Fatalf("requests outside %s: %q", r.API, v)
	}
	return got, err
}

// Must is Inputs, failing T on an error as well.
func (r Reader) Must(s change.Change, need change.Inputs) change.Change {
	r.T.Helper()
	got, err := r.Inputs(s, need)
	if err != nil {
		r.T.Fatalf("read: %v", err)
	}
	return got
}

// CheckAPullRequestThatMovedOnIsReadAtItsCommit reads the commits and paths of in, the webhook
// of a pull request whose head has moved on since: the pull request is read as it was at the
// webhook's commit, its paths and its commits (as commits gives their names, oldest first) as
// want says, whole, nothing unread; never from the pull request's own listings of files and
// commits (listings counts their requests), which describe another commit.
func CheckAPullRequestThatMovedOnIsReadAtItsCommit(t *testing.T, in change.Change, read Read, wantPaths, wantCommits []string,
	commits func(change.Change) []string, listings func() int) {
	t.Helper()
	got, err := read(in, change.CommitsInput|change.PathsInput)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !reflect.DeepEqual(got.Paths, wantPaths) || !reflect.DeepEqual(commits(got), wantCommits) || !got.Whole.Has(change.AllInputs) ||
		len(got.Unread) != 0 {
		t.Fatalf("paths %q, commits %q, whole %q, unread %+v; want paths %q, commits %q", got.Paths, commits(got), got.Whole, got.Unread,
			wantPaths, wantCommits)
	}
	if n := listings(); n != 0 {
		t.Fatalf("%d requests of the pull request's own listings, which describe another commit", n)
	}
}

// CheckAPullRequestIsReadWhole reads the commits and paths of in, a pull request's webhook at
// the pull request's head: its paths (a renamed file's old path too) and its commits (as
// commits gives their names, oldest first) as want says, every input whole and nothing
// unread, the read noted once as note (the provider, the inputs read and the requests they
// took), and each operation of the provider's asked as often as asked says (requests counts
// an operation's). It returns what was read, for the provider's own checks.
func CheckAPullRequestIsReadWhole(t *testing.T, in change.Change, read Read, wantPaths, wantCommits []string,
	commits func(change.Change) []string, note string, asked map[string]int, requests func(op string) int) change.Change {
	t.Helper()
	got, err := read(in, change.CommitsInput|change.PathsInput)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !reflect.DeepEqual(got.Paths, wantPaths) {
		t.Errorf("paths %q, want %q", got.Paths, wantPaths)
	}
	if !reflect.DeepEqual(commits(got), wantCommits) {
		t.Errorf("commits %q, want %q", commits(got), wantCommits)
	}
	if !got.Whole.Has(change.AllInputs) || len(got.Unread) != 0 || !reflect.DeepEqual(got.Read, []string{note}) {
		t.Errorf("whole %q, unread %+v, read %q; want all whole, the read noted as %q", got.Whole, got.Unread, got.Read, note)
	}
	for op, want := range asked {
		if n := requests(op); n != want {
			t.Errorf("%s: %d requests, want %d", op, n, want)
		}
	}
	return got
}

// CheckAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit reads, for each of paths,
// commits and both, the webhook of a pull request a force push moves on while its listings
// are read (read makes a fake that moves the pull request's head once its first listing is
// asked, and reads need from it): the listings describe the new head and are dropped, and the
// webhook's commit is read as the pull request was at it, need whole, its paths and its
// commits (as commits gives their names, oldest first) as want says: a file the webhook's
// commit added, gone from the new head, is seen.
func CheckAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t *testing.T, read func(need change.Inputs) (change.Change, error),
	wantPaths, wantCommits []string, commits func(change.Change) []string) {
	t.Helper()
	for _, need := range []change.Inputs{change.PathsInput, change.CommitsInput, change.PathsInput | change.CommitsInput} {
		got, err := read(need)
		if err != nil {
			t.Fatalf("need %q: %v", need, err)
		}
		if !got.Whole.Has(need) || need.Has(change.PathsInput) && !reflect.DeepEqual(got.Paths, wantPaths) ||
			need.Has(change.CommitsInput) && !reflect.DeepEqual(commits(got), wantCommits) {
			t.Fatalf("need %q: whole %q, paths %q, commits %q; want paths %q, commits %q", need, got.Whole, got.Paths, commits(got),
				wantPaths, wantCommits)
		}
	}
}

// PushOf is the webhook of a push to provider's repository repo's main branch, from
// CommitN(before) (none when before is negative: the branch is new) to CommitN(head), listing
// its last listed commits (their messages as message gives them) and no paths; its title and
// pull request are whole (a push has none).
func PushOf(provider, repo string, before, head, listed int, message func(n int) string) change.Change {
	s := change.Change{Provider: provider, Repository: repo, SHA: CommitN(head), Event: change.Push, Ref: "refs/heads/main",
		Whole: change.TitleInput | change.PullInput}
	if before >= 0 {
		s.Before = CommitN(before)
	}
	for n := head - listed + 1; n <= head; n++ {
		s.Commits = append(s.Commits, change.Commit{ID: CommitN(n), Message: message(n)})
	}
	return s
}

// CheckANewBranchIsReadAgainstTheDefaultBranch reads newBranch, the webhook of a push that
// created a branch (it names no commit before it): it is read as what the branch brings to
// the repository's default branch, its paths and its commits (as commits names them, oldest
// first) as want says, whole, nothing unread, the default branch asked for once (defaultReads
// counts those requests). It then reads need of first, the push that created the default
// branch itself, which names nothing to compare with: every input of need is left unread, its
// reason holding why, so that the rules needing it fail closed.
func CheckANewBranchIsReadAgainstTheDefaultBranch(t *testing.T, read Read, newBranch change.Change, wantPaths, wantCommits []string,
	commits func(change.Change) []string, defaultReads func() int, first change.Change, need change.Inputs, why string) {
	t.Helper()
	got, err := read(newBranch, change.CommitsInput|change.PathsInput)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !reflect.DeepEqual(got.Paths, wantPaths) || !reflect.DeepEqual(commits(got), wantCommits) || !got.Whole.Has(change.AllInputs) ||
		len(got.Unread) != 0 || defaultReads() != 1 {
		t.Fatalf("a new branch: paths %q, commits %q, whole %q, unread %+v, %d reads of the default branch; want paths %q, commits %q",
			got.Paths, commits(got), got.Whole, got.Unread, defaultReads(), wantPaths, wantCommits)
	}
	got, err = read(first, need)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	for _, in := range []change.Inputs{change.CommitsInput, change.PathsInput} {
		if need.Has(in) && (got.Whole.Has(in) || !strings.Contains(got.UnreadReason(in), why)) {
			t.Fatalf("the default branch's first push: %s whole %q, unread %+v; want it unread, saying %q", in, got.Whole, got.Unread, why)
		}
	}
}
