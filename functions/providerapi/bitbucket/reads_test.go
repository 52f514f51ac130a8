package bitbucket_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What Bitbucket Cloud's webhooks lack is read from a fake of its API that checks every
// request against Bitbucket Cloud's published description.

const repo = "team/app"

// hash is a made-up commit hash numbered n.
var hash = providerapitest.Hash

// readWorld is a fake Bitbucket Cloud holding a repository's history: main at commit 1, a
// branch "feature" of commits 2 (adds src/a.go), 3 (renames docs/old.md to docs/new.md) and 4
// (adds secrets/prod.env), and a client reading it.
type readWorld struct {
	t      *testing.T
	fake   *bitbuckettest.Bitbucket
	client *bitbucket.Client
	r      providerapitest.Reader
}

func newReadWorld(t *testing.T) *readWorld {
	t.Helper()
	w := &readWorld{t: t, fake: bitbuckettest.New(func(tok string) bool { return tok == "bb_token" })}
	w.fake.AddHistory(repo, bitbuckettest.Commit{Hash: hash(1), Message: "Initial\n", Changes: []bitbuckettest.Change{{Path: "README.md", Status: "added"}}})
	w.fake.SetBranch(repo, "main", hash(1))
	w.commit(2, 1, "Add a\n", bitbuckettest.Change{Path: "src/a.go", Status: "added"})
	w.commit(3, 2, "Move the docs\n", bitbuckettest.Change{Path: "docs/new.md", OldPath: "docs/old.md", Status: "renamed"})
	w.commit(4, 3, "add the key\n", bitbuckettest.Change{Path: "secrets/prod.env", Status: "added"})
	w.fake.SetBranch(repo, "feature", hash(4))
	srv := httptest.NewServer(w.fake)
	t.Cleanup(srv.Close)
	w.client = bitbucket.NewClient(srv.URL, "bb_token", srv.Client())
	w.client.Sleep = func(context.Context, time.Duration) error { return nil }
	w.r = providerapitest.Reader{T: t, Read: w.client.Read, Violations: w.fake.Violations, API: "Bitbucket Cloud's API description"}
	t.Cleanup(func() {
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests Bitbucket Cloud refuses: %q", v)
		}
	})
	return w
}

// commit adds commit n, child of parent, changing changes.
func (w *readWorld) commit(n, parent int, message string, changes ...bitbuckettest.Change) {
	w.fake.AddHistory(repo, bitbuckettest.Commit{Hash: hash(n), Parents: []string{hash(parent)}, Message: message, Changes: changes})
}

// pull makes pull request 7 from feature (at head) into main (at commit 1).
func (w *readWorld) pull(head int) {
	w.fake.AddPull(repo, bitbuckettest.Pull{ID: 7, Title: "feat: add a", Source: "feature", Destination: "main",
		SourceCommit: hash(head), DestinationCommit: hash(1)})
}

// pullEvent is the pull request's webhook as the ingress reads it: an abbreviated head.
func pullEvent(head int) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketCloud, Repository: repo, SHA: hash(head)[:12], Event: change.PullRequest,
		Ref: "refs/heads/feature", Pull: &change.Pull{Number: 7, Title: "feat: add a", TargetBranch: "main", SourceBranch: "feature"},
		Whole: change.TitleInput | change.PullInput}
}

// pushEvent is a push of feature from before to commit head, listing no paths and, truncated,
// not every commit.
func pushEvent(head int, before string) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketCloud, Repository: repo, SHA: hash(head), Event: change.Push,
		Ref: "refs/heads/feature", Before: before, Whole: change.TitleInput | change.PullInput}
}

var messages = providerapitest.Messages

// A pull request is read as Bitbucket lists it: its diffstat (through Bitbucket's redirect to
// the repository's diffstat) with a renamed file's old path too, and its commits, oldest first.
func TestAPullRequestIsReadAsItsDiffStatAndCommits(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckAPullRequestIsReadWhole(t, pullEvent(4), w.r.Inputs, []string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"},
		[]string{"Add a", "Move the docs", "add the key"}, messages, "Bitbucket Cloud: commits, paths (4 requests)",
		map[string]int{bitbuckettest.OpGetPull: 1, bitbuckettest.OpPullDiffStat: 1, bitbuckettest.OpDiffStat: 1, bitbuckettest.OpPullCommits: 1},
		w.fake.Requests)
}

// A pull request whose head has moved on since its webhook is read at the webhook's commit:
// the range from that commit to the destination, not the pull request's files as they are now.
func TestAPullRequestThatMovedOnIsReadAtItsCommit(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckAPullRequestThatMovedOnIsReadAtItsCommit(t, pullEvent(3), w.r.Inputs, []string{"src/a.go", "docs/old.md", "docs/new.md"},
		[]string{"Add a", "Move the docs"}, messages, func() int {
			return w.fake.Requests(bitbuckettest.OpPullDiffStat) + w.fake.Requests(bitbuckettest.OpPullCommits)
		})
}

// A push is read as its range, from the commit before it: its paths always (the webhook lists
// none), its commits only when asked (the webhook's were cut).
func TestAPushIsReadAsItsRange(t *testing.T) {
	w := newReadWorld(t)
	got := w.r.Must(pushEvent(4, hash(2)), change.PathsInput)
	if want := []string{"docs/old.md", "docs/new.md", "secrets/prod.env"}; !reflect.DeepEqual(got.Paths, want) {
		t.Errorf("paths %q, want %q", got.Paths, want)
	}
	if w.fake.Requests(bitbuckettest.OpCommits) != 0 {
		t.Error("commits read where the webhook listed them all")
	}
	got = w.r.Must(pushEvent(4, hash(2)), change.CommitsInput)
	if want := []string{"Move the docs", "add the key"}; !reflect.DeepEqual(messages(got), want) || !got.Whole.Has(change.CommitsInput) {
		t.Errorf("commits %q (whole %v), want %q", messages(got), got.Whole, want)
	}
}

// A new branch names no commit before it: it is read as what it brings to the main branch. The
// first push of the main branch itself names nothing to compare with, and fails closed.
func TestANewBranchIsReadAgainstTheMainBranch(t *testing.T) {
	w := newReadWorld(t)
	first := pushEvent(1, "")
	first.Ref = "refs/heads/main"
	providerapitest.CheckANewBranchIsReadAgainstTheDefaultBranch(t, w.r.Inputs, pushEvent(4, ""),
		[]string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"}, []string{"Add a", "Move the docs", "add the key"}, messages,
		func() int { return w.fake.Requests(bitbuckettest.OpGetRepository) }, first, change.PathsInput, "first push of the repository's main branch")
}

// Past amiss's bounds, a list is read in part and not held whole, naming the bound: the
// rules that need it fail closed.
func TestAListPastTheBoundsIsNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	var changes []bitbuckettest.Change
	for i := range bitbucket.MaxReadPaths + 1 {
		changes = append(changes, bitbuckettest.Change{Path: fmt.Sprintf("gen/%04d.go", i), Status: "added"})
	}
	w.commit(5, 4, "Generate\n", changes...)
	for n := 6; n < 6+bitbucket.MaxReadCommits; n++ {
		w.commit(n, n-1, "More\n")
	}
	head := 5 + bitbucket.MaxReadCommits
	got := w.r.Must(pushEvent(head, hash(4)), change.PathsInput|change.CommitsInput)
	providerapitest.CheckAListPastTheBoundsIsNotHeldWhole(t, got, bitbucket.MaxReadPaths, bitbucket.MaxReadCommits, hash(head))
}

// A read Bitbucket refuses fails the inputs closed, naming the scope to grant: a pull
// request's need pullrequest, a range's repository. Nothing is returned as an error.
func TestARefusedReadNamesTheScopeToGrant(t *testing.T) {
	for op, scope := range map[string]string{bitbuckettest.OpPullDiffStat: "pullrequest (Pull requests: Read)",
		bitbuckettest.OpDiffStat: "repository (Repositories: Read)"} {
		providerapitest.CheckARefusedReadFailsItsInputsClosed(t, []int{http.StatusForbidden}, change.PathsInput, func(code int) (change.Change, error) {
			w := newReadWorld(t)
			w.pull(4)
			w.fake.Answer = providerapitest.Refuse(code, op)
			s := pullEvent(4)
			if op == bitbuckettest.OpDiffStat {
				s = pushEvent(4, hash(1))
			}
			return w.client.Read(context.Background(), s, change.PathsInput)
		}, func(code int, why string) bool {
			return strings.Contains(why, fmt.Sprintf("answered %d", code)) && strings.Contains(why, scope) && strings.Contains(why, "privilege scopes")
		})
	}
}

// Bitbucket's outage is no verdict: the read returns a transient error, the change unchanged.
func TestAnOutageWhileReadingIsTransient(t *testing.T) {
	providerapitest.CheckAnOutageWhileReadingIsTransient(t, "Bitbucket Cloud", pullEvent(4), func(code int, s change.Change) (change.Change, error) {
		w := newReadWorld(t)
		w.pull(4)
		w.fake.Answer = providerapitest.Refuse(code)
		return w.client.Read(context.Background(), s, change.PathsInput)
	})
}

// A Data Center server's delivery is not read from Bitbucket Cloud: nothing is asked, and its
// inputs fail closed naming the configuration to fix.
func TestADataCenterDeliveryIsNotReadFromCloud(t *testing.T) {
	w := newReadWorld(t)
	s := pushEvent(4, hash(1))
	s.API = change.BitbucketDataCenter
	providerapitest.CheckADeliveryOfAnotherAPIIsNotRead(t, s, w.r.Inputs, w.fake.AllRequests, "bitbucket-datacenter")
}

// A read's redirect is followed only within the base URL: one elsewhere would carry the token
// there.
func TestARedirectOutsideTheBaseURLIsNotFollowed(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		w.Header().Set("Location", "https://elsewhere.example/2.0/repositories/team/app/diffstat/a..b")
		w.WriteHeader(http.StatusFound)
	}))
	defer srv.Close()
	c := bitbucket.NewClient(srv.URL, "bb_token", srv.Client())
	_, err := c.Do(context.Background(), providerapi.Request{Method: http.MethodGet, URL: "/2.0/repositories/team/app/pullrequests/7/diffstat"})
	if providerapi.ClassOf(err) != providerapi.Operator || len(asked) != 1 {
		t.Fatalf("%v (class %v), %d requests", err, providerapi.ClassOf(err), len(asked))
	}
}

// The title and branches a pull request's webhook carried whole are the event's: a read of its
// diffstat and commits never replaces them with what the API answers (which may be older than
// the event, or newer: another event's, whose own verdict follows).
func TestReadingAPullRequestKeepsWhatItsWebhookCarried(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t, pullEvent(4), w.r.Inputs)
}

// A pull request force-pushed while its diffstat and commits are read (after the pull request's
// own read): the listings describe the new head (its diffstat's redirect names it, its commits
// begin with it) and are dropped; the webhook's commit is read as its range, and the file it
// added, gone from the new head, is seen.
func TestAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t *testing.T) {
	providerapitest.CheckAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t, func(need change.Inputs) (change.Change, error) {
		w := newReadWorld(t)
		w.pull(4)
		w.commit(5, 3, "Edit the docs\n", bitbuckettest.Change{Path: "docs/new.md", Status: "modified"})
		w.fake.Answer = func(op string, n int) int {
			if (op == bitbuckettest.OpPullDiffStat || op == bitbuckettest.OpPullCommits) && n == 1 {
				w.fake.AddPull(repo, bitbuckettest.Pull{ID: 7, Title: "feat: add a", Source: "feature", Destination: "main",
					SourceCommit: hash(5), DestinationCommit: hash(1)})
				w.fake.SetBranch(repo, "feature", hash(5))
			}
			return 0
		}
		return w.r.Inputs(pullEvent(4), need)
	}, []string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"}, []string{"Add a", "Move the docs", "add the key"}, messages)
}

// An answer longer than amiss reads of one leaves its input unread, without a retry.
func TestAnAnswerLongerThanAmissReadsLeavesItsInputUnread(t *testing.T) {
	providerapitest.CheckAnAnswerPastItsBoundLeavesThePathsUnread(t, func(u string, hc *http.Client) (change.Change, error) {
		return bitbucket.NewClient(u, "bb_token", hc).Read(context.Background(), pushEvent(2, hash(1)), change.PathsInput)
	})
}
