package gitlab_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What a webhook's missing inputs are read as, from the fake of GitLab, which checks every
// request against GitLab's published API description.

const readProject = "group/sub/app"

// commitN is a made-up commit hash numbered n.
var commitN = providerapitest.CommitN

type readWorld struct {
	t      *testing.T
	gitlab *gitlabtest.GitLab
	srv    *httptest.Server
	reader *gitlab.Client
}

func newReadWorld(t *testing.T) *readWorld {
	t.Helper()
	g := gitlabtest.New(func(tok string) bool { return tok == "glpat-read" })
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	r := gitlab.NewClient(srv.URL, "glpat-read", srv.Client())
	r.Sleep = func(context.Context, time.Duration) error { return nil }
	return &readWorld{t: t, gitlab: g, srv: srv, reader: r}
}

// commits adds a line of commits from commitN(from) to commitN(to) on commitN(from-1).
func (w *readWorld) commits(from, to int, files func(n int) []gitlabtest.File) {
	for n := from; n <= to; n++ {
		w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(n), Parent: commitN(n - 1), Message: fmt.Sprintf("Commit %d\n\nbody", n), Files: files(n)})
	}
}

func each(n int) []gitlabtest.File {
	return []gitlabtest.File{{Path: fmt.Sprintf("f%d.go", n), Status: "added"}}
}

func modified(paths ...string) func(int) []gitlabtest.File {
	return func(int) []gitlabtest.File {
		var out []gitlabtest.File
		for _, p := range paths {
			out = append(out, gitlabtest.File{Path: p, Status: "modified"})
		}
		return out
	}
}

func (w *readWorld) read(s change.Change, need change.Inputs) change.Change {
	w.t.Helper()
	return w.reads().Must(s, need)
}

// reads is the client reading from the fake, failing on a request outside GitLab's API description.
func (w *readWorld) reads() providerapitest.Reader {
	return providerapitest.Reader{T: w.t, Read: w.reader.Read, Violations: w.gitlab.Violations, API: "GitLab's API description"}
}

func mergeRequestOf(head, iid int) change.Change {
	return change.Change{Provider: "gitlab", Repository: readProject, SHA: commitN(head), Event: change.PullRequest,
		Ref: "refs/heads/changes", Whole: change.TitleInput | change.PullInput,
		Pull: &change.Pull{Number: iid, Title: "feat: the webhook's title", TargetBranch: "main", SourceBranch: "changes"}}
}

func pushOf(before, head, listed int) change.Change {
	return providerapitest.PushOf("gitlab", readProject, before, head, listed, func(n int) string { return fmt.Sprintf("Commit %d\n\nbody", n) })
}

var ids = providerapitest.IDs

var commitsFrom = providerapitest.CommitsFrom

// A merge request's diffs and commits are read whole, every page (100 a page), commits oldest
// first with their whole messages, a renamed file's old path too; the merge request is read
// for its head and its diff's overflow; a rule needing commits alone reads no more than them.
func TestAMergeRequestsDiffsAndCommitsAreReadEveryPage(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 249, each)
	w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(250), Parent: commitN(249), Message: "Move the key",
		Files: []gitlabtest.File{{Path: "docs/key.md", Status: "renamed", OldPath: "secrets/key.pem"}}})
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "feat: move the key", Source: "changes", Target: "main",
		BaseSHA: commitN(0), HeadSHA: commitN(250)})
	var paths []string
	for n := 1; n <= 249; n++ {
		paths = append(paths, fmt.Sprintf("f%d.go", n))
	}
	paths = append(paths, "secrets/key.pem", "docs/key.md")
	got := providerapitest.CheckAPullRequestIsReadWhole(t, mergeRequestOf(250, 7), w.reads().Inputs, paths, commitsFrom(1, 250), ids,
		"GitLab: commits, paths (7 requests)", map[string]int{gitlabtest.OpGetMR: 1, gitlabtest.OpMRDiffs: 3, gitlabtest.OpMRCommits: 3,
			gitlabtest.OpCompare: 0, gitlabtest.OpGetProject: 0}, w.gitlab.Requests)
	if len(got.Commits) != 250 || got.Commits[0].Message != "Commit 1\n\nbody" {
		t.Fatalf("commits %v", ids(got)[:3])
	}
	before := w.gitlab.AllRequests()
	if got := w.read(mergeRequestOf(250, 7), change.CommitsInput); len(got.Commits) != 250 || w.gitlab.AllRequests()-before != 3 {
		t.Fatalf("commits alone: %d commits in %d requests", len(got.Commits), w.gitlab.AllRequests()-before)
	}
}

// A merge request whose diff overflowed GitLab's limit (changes_count "1000+") gives the files
// GitLab keeps, and the paths unread, naming the limit; a forbidden file among them is there.
func TestAnOverflowingMergeRequestIsNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	w.gitlab.DiffMaxFiles = 150
	w.commits(1, 200, each)
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main", BaseSHA: commitN(0), HeadSHA: commitN(200)})
	got := w.read(mergeRequestOf(200, 7), change.PathsInput)
	if got.Whole.Has(change.PathsInput) || len(got.Paths) != 150 ||
		got.UnreadReason(change.PathsInput) != "GitLab keeps 150+ files of the merge request's diff (the instance's maximum files or lines in a diff)" {
		t.Fatalf("whole %v, %d paths, unread %+v", got.Whole, len(got.Paths), got.Unread)
	}
}

// A merge request that moved on (its head is another commit) is read as the comparison of its
// target branch with the commit; so is one whose commits begin with another commit by the time
// they are listed.
func TestAMergeRequestThatMovedOnIsReadAsItsTargetsComparison(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 2, modified("src/a.go"))
	w.commits(3, 3, modified("secrets/later.pem"))
	w.gitlab.SetBranch(readProject, "main", commitN(0))
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main", BaseSHA: commitN(0), HeadSHA: commitN(3)})
	for _, need := range []change.Inputs{change.PathsInput, change.CommitsInput} {
		before := w.gitlab.Requests(gitlabtest.OpCompare)
		got := w.read(mergeRequestOf(2, 7), need|change.CommitsInput)
		if !slices.Equal(ids(got), commitsFrom(1, 2)) || !slices.Equal(got.Paths, []string{"src/a.go"}) || len(got.Unread) != 0 ||
			w.gitlab.Requests(gitlabtest.OpCompare) != before+1 {
			t.Fatalf("%v: commits %v, paths %v, unread %+v", need, ids(got), got.Paths, got.Unread)
		}
	}
}

// A push whose webhook listed part of its commits (GitLab lists 20) is read as the comparison
// before...sha: every commit, oldest first, and the push's diff.
func TestAPushIsReadAsItsComparison(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 29, each)
	w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(30), Parent: commitN(29), Message: "Move",
		Files: []gitlabtest.File{{Path: "b.go", Status: "renamed", OldPath: "a.go"}}})
	got := w.read(pushOf(0, 30, 20), change.CommitsInput|change.PathsInput)
	if !slices.Equal(ids(got), commitsFrom(1, 30)) || len(got.Unread) != 0 || len(got.Paths) != 31 ||
		!slices.Contains(got.Paths, "a.go") || w.gitlab.AllRequests() != 1 {
		t.Fatalf("commits %d, paths %v, unread %+v, %d requests", len(got.Commits), got.Paths, got.Unread, w.gitlab.AllRequests())
	}
}

// A comparison whose diff overflowed (compare_timeout, GitLab's overflow flag) gives its
// commits whole and the paths unread, naming the limit.
func TestAnOverflowingComparisonLeavesThePathsUnread(t *testing.T) {
	w := newReadWorld(t)
	w.gitlab.DiffMaxFiles = 10
	w.commits(1, 30, each)
	got := w.read(pushOf(0, 30, 20), change.CommitsInput|change.PathsInput)
	if !got.Whole.Has(change.CommitsInput) || got.Whole.Has(change.PathsInput) || len(got.Paths) != 10 ||
		!strings.HasPrefix(got.UnreadReason(change.PathsInput), "GitLab's comparison overflowed its diff limits") {
		t.Fatalf("whole %v, %d paths, unread %+v", got.Whole, len(got.Paths), got.Unread)
	}
}

// A new branch's push (no before) is read as what it adds to the default branch; a push that
// created the default branch names no start: unread.
func TestANewBranchIsReadAgainstTheDefaultBranch(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 30, each)
	w.gitlab.SetBranch(readProject, "main", commitN(5))
	s := pushOf(-1, 30, 20)
	s.Ref = "refs/heads/feature"
	first := s
	first.Ref = "refs/heads/main"
	var paths []string
	for n := 6; n <= 30; n++ {
		paths = append(paths, fmt.Sprintf("f%d.go", n))
	}
	providerapitest.CheckANewBranchIsReadAgainstTheDefaultBranch(t, w.reads().Inputs, s, paths, commitsFrom(6, 30), ids,
		func() int { return w.gitlab.Requests(gitlabtest.OpGetProject) }, first, change.CommitsInput, "created the project's default branch")
}

// A read GitLab refuses (401, 403 insufficient_scope, 404) marks the inputs unread, naming the
// scope to grant.
func TestARefusedReadNamesTheScopeToGrant(t *testing.T) {
	need := change.CommitsInput | change.PathsInput
	providerapitest.CheckARefusedReadFailsItsInputsClosed(t, []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}, need,
		func(code int) (change.Change, error) {
			w := newReadWorld(t)
			w.commits(1, 30, each)
			w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main", BaseSHA: commitN(0), HeadSHA: commitN(30)})
			w.gitlab.Answer = providerapitest.Refuse(code)
			return w.reads().Inputs(mergeRequestOf(30, 7), need)
		}, func(code int, why string) bool {
			return why == fmt.Sprintf("GitLab answered %d; grant the token the read_api scope, as a member who can read the project's code (Reporter)", code)
		})
}

// GitLab's outage (502, 503) or rate limit (429) while reading is Transient: retried, nothing
// marked unread.
func TestAnOutageWhileReadingIsTransient(t *testing.T) {
	providerapitest.CheckAnOutageWhileReadingIsTransient(t, "GitLab", pushOf(0, 30, 20), func(code int, s change.Change) (change.Change, error) {
		w := newReadWorld(t)
		w.commits(1, 30, each)
		w.gitlab.Answer = providerapitest.Refuse(code)
		return w.reads().Inputs(s, change.PathsInput)
	})
}

// CheckRead reads the project and its code (a comparison of its default branch with itself),
// posting nothing: nil for a token that may, the refusal otherwise.
func TestCheckReadReadsTheProjectsCode(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 3, each)
	w.gitlab.SetBranch(readProject, "main", commitN(3))
	if err := w.reader.CheckRead(context.Background(), readProject); err != nil || w.gitlab.Requests(gitlabtest.OpCompare) != 1 {
		t.Fatalf("%v; %d comparisons", err, w.gitlab.Requests(gitlabtest.OpCompare))
	}
	w.gitlab.Answer = providerapitest.Refuse(http.StatusForbidden, gitlabtest.OpCompare) // a Guest of a private project
	var refused *gitlab.Refused
	if err := w.reader.CheckRead(context.Background(), readProject); !errors.As(err, &refused) {
		t.Fatalf("a token that cannot read the code: %v", err)
	}
	if w.gitlab.Posts() != 0 || len(w.gitlab.Violations()) != 0 {
		t.Fatalf("posted %d, violations %v", w.gitlab.Posts(), w.gitlab.Violations())
	}
}

// A merge request GitLab has not made the diff of yet (just opened: no diff_refs, no
// changes_count, no diffs listed) is no merge request without files: the read is Transient,
// retried after the runner's delay, and nothing is marked unread or taken as whole.
func TestAMergeRequestStillBeingPreparedIsReadAgainLater(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 3, modified("secrets/key.pem"))
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main",
		BaseSHA: commitN(0), HeadSHA: commitN(3), Preparing: true})
	got, err := w.reader.Read(context.Background(), mergeRequestOf(3, 7), change.PathsInput)
	if providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "still preparing merge request !7's diff") ||
		len(got.Unread) != 0 || got.Whole.Has(change.PathsInput) {
		t.Fatalf("%v; whole %v, unread %+v", err, got.Whole, got.Unread)
	}
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main",
		BaseSHA: commitN(0), HeadSHA: commitN(3)})
	if got := w.read(mergeRequestOf(3, 7), change.PathsInput); !slices.Equal(got.Paths, []string{"secrets/key.pem"}) {
		t.Fatalf("once prepared: %v", got.Paths)
	}
}

// The title and branches a merge request's webhook carried whole are the event's: a read of
// the diffs and commits never replaces them with what the API answers (which may be older than
// the event, from a lagging replica, or newer: another event's, whose own verdict follows).
func TestReadingAMergeRequestKeepsWhatItsWebhookCarried(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 2, each)
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "feat: the title before the edit", Source: "changes",
		Target: "develop", BaseSHA: commitN(0), HeadSHA: commitN(2)})
	providerapitest.CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t, mergeRequestOf(2, 7), w.reads().Inputs)
}

// A merge request force-pushed while its diffs are read (after the merge request's own read):
// its diffs, which name no head, describe the new one; read alone they are checked against the
// merge request read again, and dropped when it has moved on. The webhook's commit is then read
// as its target's comparison, and the file it added, gone from the new head, is seen.
func TestAMergeRequestMovingOnWhileItsDiffsAreReadIsReadAtItsCommit(t *testing.T) {
	w := newReadWorld(t)
	w.gitlab.SetBranch(readProject, "main", commitN(0))
	w.commits(1, 1, modified("secrets/key.pem"))
	w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(2), Parent: commitN(0), Message: "Edit the README",
		Files: []gitlabtest.File{{Path: "README.md", Status: "modified"}}})
	mr := gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main", BaseSHA: commitN(0), HeadSHA: commitN(1)}
	w.gitlab.AddMergeRequest(readProject, mr)
	w.gitlab.Answer = func(op string, n int) int {
		if op == gitlabtest.OpMRDiffs && n == 1 {
			moved := mr
			moved.HeadSHA = commitN(2)
			w.gitlab.AddMergeRequest(readProject, moved)
		}
		return 0
	}
	got := w.read(mergeRequestOf(1, 7), change.PathsInput)
	if !got.Whole.Has(change.PathsInput) || !slices.Equal(got.Paths, []string{"secrets/key.pem"}) {
		t.Fatalf("whole %q, paths %q, unread %+v", got.Whole, got.Paths, got.Unread)
	}
}

// rewritten serves h through a proxy that sets the named headers of every answer to the value
// given ("" drops the header).
func rewritten(h http.Handler, set map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		for k, v := range set {
			if v == "" {
				w.Header().Del(k)
			} else {
				w.Header().Set(k, v)
			}
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// A listing whose paging headers are not GitLab's (an X-Next-Page that is no page number,
// behind a proxy that also drops Link) is read on page by page until an empty page, never
// ended at its first; one that ends short of the count GitLab named (X-Total) is not held
// whole.
func TestAListingWhosePagingHeadersAreNotGitLabsIsNotHeldWholeAtItsFirstPage(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   map[string]string
		whole bool
	}{
		{"X-Next-Page no number, no Link", map[string]string{"X-Next-Page": "next", "Link": ""}, true},
		{"X-Next-Page always empty", map[string]string{"X-Next-Page": " ", "Link": ""}, false},
	} {
		g := gitlabtest.New(func(tok string) bool { return tok == "rt" })
		srv := httptest.NewServer(rewritten(g, c.set))
		w := &readWorld{t: t, gitlab: g, reader: gitlab.NewClient(srv.URL, "rt", srv.Client())}
		w.commits(1, 249, each)
		w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(250), Parent: commitN(249), Message: "add the key",
			Files: []gitlabtest.File{{Path: "secrets/key.pem", Status: "added"}}})
		w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main",
			BaseSHA: commitN(0), HeadSHA: commitN(250)})
		got := w.read(mergeRequestOf(250, 7), change.PathsInput|change.CommitsInput)
		srv.Close()
		switch {
		case c.whole && (!got.Whole.Has(change.AllInputs) || len(got.Paths) != 250 || len(got.Commits) != 250):
			t.Errorf("%s: whole %q, %d paths, %d commits, unread %+v", c.name, got.Whole, len(got.Paths), len(got.Commits), got.Unread)
		case !c.whole && (got.Whole.Has(change.PathsInput) || got.Whole.Has(change.CommitsInput) ||
			!strings.Contains(got.UnreadReason(change.PathsInput), "250")):
			t.Errorf("%s: whole %q, %d paths, %d commits, unread %+v", c.name, got.Whole, len(got.Paths), len(got.Commits), got.Unread)
		}
	}
}

// An answer longer than amiss reads of one leaves its input unread, without a retry.
func TestAnAnswerLongerThanAmissReadsLeavesItsInputUnread(t *testing.T) {
	s := change.Change{Provider: "gitlab", Repository: "acme/app", SHA: strings.Repeat("b", 40), Event: change.Push,
		Ref: "refs/heads/main", Before: strings.Repeat("a", 40)}
	providerapitest.CheckAnAnswerPastItsBoundLeavesThePathsUnread(t, func(u string, hc *http.Client) (change.Change, error) {
		return gitlab.NewClient(u, "glpat-read", hc).Read(context.Background(), s, change.PathsInput)
	})
}

// A push's paths read alone leave the commits its webhook listed as they were: the
// comparison's commits are not added to them.
func TestAPushsPathsReadAloneKeepTheCommitsItsWebhookListed(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 3, each)
	s := pushOf(0, 3, 3)
	s.Whole |= change.CommitsInput
	got := w.read(s, change.PathsInput)
	if !got.Whole.Has(change.AllInputs) || len(got.Unread) != 0 || !slices.Equal(ids(got), commitsFrom(1, 3)) {
		t.Fatalf("whole %q, unread %+v, commits %v: want the listed 3 kept, whole", got.Whole, got.Unread, ids(got))
	}
	if !slices.Equal(got.Paths, []string{"f1.go", "f2.go", "f3.go"}) {
		t.Fatalf("paths %v", got.Paths)
	}
}

// The paths a push's webhook listed are kept beside what is read, even when nothing can be
// read: a forbidden one stays named.
func TestAPushsListedPathsAreKeptWithWhatIsRead(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 1, each)
	s := pushOf(-1, 1, 1)
	s.Paths = []string{"secrets/prod.pem"}
	got := w.read(s, change.PathsInput) // the push that created main: nothing to compare with
	if got.Whole.Has(change.PathsInput) || !slices.Equal(got.Paths, []string{"secrets/prod.pem"}) {
		t.Fatalf("whole %q, paths %v: want the listed path kept, the paths unread", got.Whole, got.Paths)
	}
}

// A push's paths are what it changes on its branch: the tree at before against the tree at
// after, whatever the two's merge base. Commit 0 added secrets/prod.pem, commit 1 (main, the
// push's before) removed it; commit 2 is on commit 0 and adds secrets/key.pem.
//   - a merge into the branch (first parent main) brings commit 2's key;
//   - a merge of main into commit 2 taking commit 2's tree ("git merge -s ours"), onto which
//     main fast-forwards, restores secrets/prod.pem, which no commit lists against its first
//     parent and the diff from the merge base (main itself) does not name;
//   - main forced back to commit 0, or onto commit 2, drops commit 1 and restores the key,
//     which a diff from the merge base (commit 0) does not name.
func TestAPushsPathsAreTheTreeBeforeAgainstTheTreeAfter(t *testing.T) {
	for _, c := range []struct {
		name    string
		merge   *gitlabtest.Commit
		head    int
		paths   []string
		commits []string
	}{
		{"a merge into the branch", &gitlabtest.Commit{SHA: commitN(3), Parent: commitN(1), Merged: []string{commitN(2)}, Message: "Merge",
			Files: []gitlabtest.File{{Path: "secrets/key.pem", Status: "added"}}}, 3, []string{"secrets/key.pem"}, []string{commitN(2), commitN(3)}},
		{"a merge of the branch into an older line", &gitlabtest.Commit{SHA: commitN(3), Parent: commitN(2), Merged: []string{commitN(1)},
			Message: "Merge branch 'main'"}, 3, []string{"secrets/key.pem", "secrets/prod.pem"}, []string{commitN(2), commitN(3)}},
		{"forced back", nil, 0, []string{"secrets/prod.pem"}, nil},
		{"forced onto a rewritten commit", nil, 2, []string{"secrets/key.pem", "secrets/prod.pem"}, []string{commitN(2)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newReadWorld(t)
			w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(0), Message: "Root",
				Files: []gitlabtest.File{{Path: "secrets/prod.pem", Status: "added"}}})
			w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(1), Parent: commitN(0), Message: "Remove the key",
				Files: []gitlabtest.File{{Path: "secrets/prod.pem", Status: "deleted"}}})
			w.gitlab.AddCommit(readProject, gitlabtest.Commit{SHA: commitN(2), Parent: commitN(0), Message: "Add another key",
				Files: []gitlabtest.File{{Path: "secrets/key.pem", Status: "added"}}})
			if c.merge != nil {
				w.gitlab.AddCommit(readProject, *c.merge)
			}
			s := change.Change{Provider: "gitlab", Repository: readProject, SHA: commitN(c.head), Event: change.Push, Ref: "refs/heads/main",
				Before: commitN(1), Whole: change.TitleInput | change.PullInput}
			got := w.read(s, change.CommitsInput|change.PathsInput)
			if !got.Whole.Has(change.AllInputs) || len(got.Unread) != 0 {
				t.Fatalf("whole %q, unread %+v", got.Whole, got.Unread)
			}
			paths := slices.Clone(got.Paths)
			slices.Sort(paths)
			if !slices.Equal(paths, c.paths) || !slices.Equal(ids(got), c.commits) {
				t.Fatalf("paths %v, commits %v; want %v, %v", paths, ids(got), c.paths, c.commits)
			}
		})
	}
}

// A push whose before GitLab no longer holds (a branch forced past it, the commit since
// pruned) is answered 404 Ref Not Found by the comparison: its commits and paths are unread,
// the reason naming the comparison and that a commit is gone, not a scope to grant (the token
// reads the project: granting more changes nothing). The paths its webhook listed are kept.
func TestAPushWhoseBeforeIsGoneIsUnreadSayingSo(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 3, each)
	s := pushOf(99, 3, 3) // commit 99: no commit GitLab holds, nor a parent of one
	s.Paths = []string{"f3.go"}
	got := w.read(s, change.CommitsInput|change.PathsInput)
	want := fmt.Sprintf("GitLab answered 404 Ref Not Found to the comparison of %s with %s: one of them is gone "+
		"(a commit a forced push left behind, since pruned, or a deleted branch), so what the change brings cannot be read", commitN(99), commitN(3))
	for _, in := range []change.Inputs{change.CommitsInput, change.PathsInput} {
		if got.Whole.Has(in) || got.UnreadReason(in) != want {
			t.Fatalf("%s: whole %q, unread %q; want unread %q", in, got.Whole, got.UnreadReason(in), want)
		}
	}
	if !slices.Equal(got.Paths, []string{"f3.go"}) {
		t.Fatalf("paths %v: want the listed path kept", got.Paths)
	}
}
