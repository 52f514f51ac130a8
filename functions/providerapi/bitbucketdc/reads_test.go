package bitbucketdc_test

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
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What Bitbucket Data Center's webhooks lack is read from a fake of its API that checks every
// request against Data Center's published description.

const repo = "PROJ/app"

// hash is a made-up commit hash numbered n.
var hash = providerapitest.Hash

// readWorld is a fake Data Center server, under a context path, holding a repository's
// history: main at commit 1, a branch "feature" of commits 2 (adds src/a.go), 3 (moves
// docs/old.md to docs/new.md) and 4 (adds secrets/prod.env), and a client reading it.
type readWorld struct {
	t      *testing.T
	fake   *bitbucketdctest.BitbucketDC
	client *bitbucketdc.Client
	r      providerapitest.Reader
}

func newReadWorld(t *testing.T) *readWorld {
	t.Helper()
	w := &readWorld{t: t, fake: bitbucketdctest.New(func(tok string) bool { return tok == "dc_token" })}
	w.fake.ContextPath = "/bitbucket"
	w.fake.AddCommit(repo, bitbucketdctest.Commit{ID: hash(1), Message: "Initial\n", Changes: []bitbucketdctest.Change{{Path: "README.md", Type: "ADD"}}})
	w.fake.SetBranch(repo, "main", hash(1))
	w.commit(2, 1, "Add a\n", bitbucketdctest.Change{Path: "src/a.go", Type: "ADD"})
	w.commit(3, 2, "Move the docs\n", bitbucketdctest.Change{Path: "docs/new.md", SrcPath: "docs/old.md", Type: "MOVE"})
	w.commit(4, 3, "add the key\n", bitbucketdctest.Change{Path: "secrets/prod.env", Type: "ADD"})
	w.fake.SetBranch(repo, "feature", hash(4))
	srv := httptest.NewServer(w.fake)
	t.Cleanup(srv.Close)
	w.client = bitbucketdc.NewClient(srv.URL+"/bitbucket", "dc_token", srv.Client())
	w.client.Sleep = func(context.Context, time.Duration) error { return nil }
	w.r = providerapitest.Reader{T: t, Read: w.client.Read, Violations: w.fake.Violations, API: "Bitbucket Data Center's API description"}
	t.Cleanup(func() {
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests Bitbucket Data Center refuses: %q", v)
		}
	})
	return w
}

// commit adds commit n, child of parent, changing changes.
func (w *readWorld) commit(n, parent int, message string, changes ...bitbucketdctest.Change) {
	w.fake.AddCommit(repo, bitbucketdctest.Commit{ID: hash(n), Parents: []string{hash(parent)}, Message: message, Changes: changes})
}

// pull makes pull request 7 from feature (at head) into main (at commit 1).
func (w *readWorld) pull(head int) {
	w.fake.AddPull(repo, bitbucketdctest.Pull{ID: 7, Title: "feat: add a", FromBranch: "feature", ToBranch: "main",
		FromCommit: hash(head), ToCommit: hash(1)})
}

// pullEvent is the pull request's webhook as the ingress reads it.
func pullEvent(head int) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketDataCenter, Repository: repo, SHA: hash(head), Event: change.PullRequest,
		Ref: "refs/heads/feature", Pull: &change.Pull{Number: 7, Title: "feat: add a", TargetBranch: "main", SourceBranch: "feature"},
		Whole: change.TitleInput | change.PullInput}
}

// pushEvent is a push of feature from before to commit head: Data Center lists neither its
// commits nor its paths.
func pushEvent(head int, before string) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketDataCenter, Repository: repo, SHA: hash(head), Event: change.Push,
		Ref: "refs/heads/feature", Before: before, Whole: change.TitleInput | change.PullInput}
}

var messages = providerapitest.Messages

// A pull request is read as Data Center lists it: its changes, with a moved file's old path
// too, and its commits, oldest first.
func TestAPullRequestIsReadAsItsChangesAndCommits(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckAPullRequestIsReadWhole(t, pullEvent(4), w.r.Inputs, []string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"},
		[]string{"Add a", "Move the docs", "add the key"}, messages, "Bitbucket Data Center: commits, paths (3 requests)",
		map[string]int{bitbucketdctest.OpGetPull: 1, bitbucketdctest.OpPullChanges: 1, bitbucketdctest.OpPullCommits: 1}, w.fake.Requests)
}

// A pull request whose head has moved on since its webhook is read at the webhook's commit:
// the range from that commit to the target's latest commit.
func TestAPullRequestThatMovedOnIsReadAtItsCommit(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckAPullRequestThatMovedOnIsReadAtItsCommit(t, pullEvent(3), w.r.Inputs, []string{"src/a.go", "docs/old.md", "docs/new.md"},
		[]string{"Add a", "Move the docs"}, messages, func() int {
			return w.fake.Requests(bitbucketdctest.OpPullChanges) + w.fake.Requests(bitbucketdctest.OpPullCommits)
		})
}

// A pull request's changes are one page: Data Center cuts them at its page.max.changes, saying
// so (isLastPage false) and ignoring start, so a cut list is marked unread, naming the limit,
// never read again from another start.
func TestAPullRequestsChangesCutByTheServerAreNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	w.fake.MaxChanges = 2
	w.pull(4)
	got := w.r.Must(pullEvent(4), change.PathsInput)
	if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "lists at most 2 changes of a pull request") ||
		w.fake.Requests(bitbucketdctest.OpPullChanges) != 1 {
		t.Fatalf("whole %v, unread %+v, %d requests", got.Whole, got.Unread, w.fake.Requests(bitbucketdctest.OpPullChanges))
	}
}

// A push is read as its range from the commit before it, and its paths with what that commit
// has that the head has not (nothing, for a push that only adds commits: one empty page); a
// listing longer than a page is read page by page, from each page's nextPageStart.
func TestAPushIsReadAsItsRange(t *testing.T) {
	w := newReadWorld(t)
	w.fake.MaxLimit = 1 // a page a change, a page a commit
	got := w.r.Must(pushEvent(4, hash(2)), change.PathsInput|change.CommitsInput)
	if want := []string{"docs/old.md", "docs/new.md", "secrets/prod.env"}; !reflect.DeepEqual(got.Paths, want) {
		t.Errorf("paths %q, want %q", got.Paths, want)
	}
	if want := []string{"Move the docs", "add the key"}; !reflect.DeepEqual(messages(got), want) || !got.Whole.Has(change.AllInputs) {
		t.Errorf("commits %q (whole %v), want %q", messages(got), got.Whole, want)
	}
	if n, m := w.fake.Requests(bitbucketdctest.OpCompareChanges), w.fake.Requests(bitbucketdctest.OpCompareCommits); n != 3 || m != 2 {
		t.Errorf("%d pages of changes and %d of commits, want 3 and 2", n, m)
	}
}

// A new branch names no commit before it: it is read as what it brings to the default branch.
// The first push of the default branch itself names nothing to compare with, and fails closed.
func TestANewBranchIsReadAgainstTheDefaultBranch(t *testing.T) {
	w := newReadWorld(t)
	first := pushEvent(1, "")
	first.Ref = "refs/heads/main"
	providerapitest.CheckANewBranchIsReadAgainstTheDefaultBranch(t, w.r.Inputs, pushEvent(4, ""),
		[]string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"}, []string{"Add a", "Move the docs", "add the key"}, messages,
		func() int { return w.fake.Requests(bitbucketdctest.OpDefaultBranch) }, first, change.PathsInput|change.CommitsInput,
		"first push of the repository's default branch")
}

// Past amiss's bounds, a list is read in part and not held whole, naming the bound.
func TestAListPastTheBoundsIsNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	w.fake.MaxChanges = bitbucketdc.MaxReadPaths + 10 // a server whose page.max.changes is above amiss's bound
	var changes []bitbucketdctest.Change
	for i := range bitbucketdc.MaxReadPaths + 1 {
		changes = append(changes, bitbucketdctest.Change{Path: fmt.Sprintf("gen/%04d.go", i), Type: "ADD"})
	}
	w.commit(5, 4, "Generate\n", changes...)
	for n := 6; n < 6+bitbucketdc.MaxReadCommits; n++ {
		w.commit(n, n-1, "More\n")
	}
	head := 5 + bitbucketdc.MaxReadCommits
	got := w.r.Must(pushEvent(head, hash(4)), change.PathsInput|change.CommitsInput)
	providerapitest.CheckAListPastTheBoundsIsNotHeldWhole(t, got, bitbucketdc.MaxReadPaths, bitbucketdc.MaxReadCommits, hash(head))
}

// A comparison's changes stop at the server's page.max.changes: the page reaching it and every
// page past it say they are not the last, naming a start beyond it, and hold nothing more. The
// paths read are kept (a forbidden one among them still fails the rule), and the paths are not
// held whole, naming the server's limit: the read is not an outage to be retried.
func TestAComparisonsChangesCutByTheServerAreNotHeldWhole(t *testing.T) {
	for _, limit := range []int{0, 1} { // the page size amiss asks for; a server serving a change a page
		w := newReadWorld(t)
		w.fake.MaxChanges = 2
		w.fake.MaxLimit = limit
		got, err := w.r.Inputs(pushEvent(4, hash(1)), change.PathsInput)
		if err != nil {
			t.Fatalf("max limit %d: read: %v", limit, err)
		}
		if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "page.max.changes") {
			t.Errorf("max limit %d: whole %v, unread %+v; want the paths unread, naming page.max.changes", limit, got.Whole, got.Unread)
		}
		if len(got.Paths) == 0 {
			t.Errorf("max limit %d: the changes listed before the cut were dropped", limit)
		}
	}
}

// A read the server refuses fails the inputs closed, naming the permission to grant.
func TestARefusedReadNamesThePermissionToGrant(t *testing.T) {
	providerapitest.CheckARefusedReadFailsItsInputsClosed(t, []int{http.StatusUnauthorized}, change.CommitsInput, func(code int) (change.Change, error) {
		w := newReadWorld(t)
		w.pull(4)
		w.fake.Answer = providerapitest.Refuse(code, bitbucketdctest.OpPullCommits)
		return w.r.Inputs(pullEvent(4), change.CommitsInput)
	}, func(code int, why string) bool {
		return strings.Contains(why, fmt.Sprintf("answered %d", code)) && strings.Contains(why, "REPO_READ") && strings.Contains(why, "not permitted")
	})
}

// The server's outage is no verdict: the read returns a transient error, the change
// unchanged.
func TestAnOutageWhileReadingIsTransient(t *testing.T) {
	providerapitest.CheckAnOutageWhileReadingIsTransient(t, "Bitbucket Data Center", pushEvent(4, hash(1)), func(code int, s change.Change) (change.Change, error) {
		w := newReadWorld(t)
		w.fake.Answer = providerapitest.Refuse(code)
		return w.r.Inputs(s, change.PathsInput)
	})
}

// Bitbucket Cloud's delivery is not read from a Data Center server: nothing is asked, and its
// inputs fail closed naming the configuration to fix.
func TestACloudDeliveryIsNotReadFromDataCenter(t *testing.T) {
	w := newReadWorld(t)
	s := pushEvent(4, hash(1))
	s.API = change.BitbucketCloud
	providerapitest.CheckADeliveryOfAnotherAPIIsNotRead(t, s, w.r.Inputs, w.fake.AllRequests, "publish.provider bitbucket")
}

// The title and branches a pull request's webhook carried whole are the event's: a read of its
// changes and commits never replaces them with what the API answers (which may be older than
// the event, or newer: another event's, whose own verdict follows).
func TestReadingAPullRequestKeepsWhatItsWebhookCarried(t *testing.T) {
	w := newReadWorld(t)
	w.pull(4)
	providerapitest.CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t, pullEvent(4), w.r.Inputs)
}

// A pull request force-pushed while its changes and commits are read (after the pull request's
// own read): the listings describe the new head (the changes name the commit they are from,
// the commits begin with it) and are dropped; the webhook's commit is read as its range, and
// the file it added, gone from the new head, is seen.
func TestAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t *testing.T) {
	providerapitest.CheckAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t, func(need change.Inputs) (change.Change, error) {
		w := newReadWorld(t)
		w.pull(4)
		w.commit(5, 3, "Edit the docs\n", bitbucketdctest.Change{Path: "docs/new.md", Type: "MODIFY"})
		w.fake.Answer = func(op string, n int) int {
			if (op == bitbucketdctest.OpPullChanges || op == bitbucketdctest.OpPullCommits) && n == 1 {
				w.fake.AddPull(repo, bitbucketdctest.Pull{ID: 7, Title: "feat: add a", FromBranch: "feature", ToBranch: "main",
					FromCommit: hash(5), ToCommit: hash(1)})
			}
			return 0
		}
		return w.r.Inputs(pullEvent(4), need)
	}, []string{"src/a.go", "docs/old.md", "docs/new.md", "secrets/prod.env"}, []string{"Add a", "Move the docs", "add the key"}, messages)
}

// An answer longer than amiss reads of one leaves its input unread, without a retry.
func TestAnAnswerLongerThanAmissReadsLeavesItsInputUnread(t *testing.T) {
	providerapitest.CheckAnAnswerPastItsBoundLeavesThePathsUnread(t, func(u string, hc *http.Client) (change.Change, error) {
		return bitbucketdc.NewClient(u+"/bitbucket", "dc_token", hc).Read(context.Background(), pushEvent(2, hash(1)), change.PathsInput)
	})
}

// A push's paths are the union of two comparisons: when the one from before is cut by the
// server and the one to it whole (feature forced back from commit 4 to commit 2: nothing of 2
// is missing from 4, and 4 has two changes 2 lacks), the paths are not held whole, naming the
// server's limit, and the change read before the cut is kept.
func TestAPushWhoseComparisonFromBeforeIsCutIsNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	w.fake.MaxChanges = 1
	got := w.r.Must(pushEvent(2, hash(4)), change.PathsInput)
	if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "page.max.changes") || len(got.Paths) == 0 {
		t.Fatalf("paths %q, whole %v, unread %+v; want those read kept, not whole, naming page.max.changes", got.Paths, got.Whole, got.Unread)
	}
}
