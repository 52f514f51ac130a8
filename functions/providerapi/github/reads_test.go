package github_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What a re-run's inputs are read as, from a fake of GitHub's pull request and commit reads
// that checks every request against GitHub's API description.

const rerunRepo = "octo-org/octo-repo"

// commitN is a made-up commit hash numbered n.
var commitN = providerapitest.CommitN

// rerunWorld is a fake GitHub holding a repository's history, and a client reading re-runs'
// inputs from it with the App's installation tokens.
type rerunWorld struct {
	t       *testing.T
	history *githubtest.GitHub
	reader  *github.Client
}

func newRerunWorld(t *testing.T) *rerunWorld {
	t.Helper()
	key, pemKey := appKey()
	h := githubtest.NewApp(appID, &key.PublicKey)
	h.Install(2311213, rerunRepo)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	app, err := github.NewApp(github.AppConfig{BaseURL: srv.URL, AppID: "4242", PrivateKey: pemKey, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	r := github.NewInstallationClient(srv.URL, app, srv.Client())
	r.Sleep = func(context.Context, time.Duration) error { return nil }
	return &rerunWorld{t: t, history: h, reader: r}
}

// commits adds a line of commits from commitN(from) to commitN(to), each changing the files files
// gives it, and returns them oldest first.
func (w *rerunWorld) commits(from, to int, files func(n int) []githubtest.ChangedFile) {
	for n := from; n <= to; n++ {
		w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(n), Parent: commitN(n - 1),
			Message: fmt.Sprintf("Commit %d", n), Files: files(n)})
	}
}

func modified(paths ...string) func(int) []githubtest.ChangedFile {
	return func(int) []githubtest.ChangedFile {
		var out []githubtest.ChangedFile
		for _, p := range paths {
			out = append(out, githubtest.ChangedFile{Filename: p, Status: "modified"})
		}
		return out
	}
}

// fill fills s, failing on an error or a request outside GitHub's description.
func (w *rerunWorld) fill(s change.Change) change.Change {
	w.t.Helper()
	return w.reads().Must(s, change.AllInputs&^s.Whole)
}

// reads is the client reading from the fake, failing on a request outside GitHub's description.
func (w *rerunWorld) reads() providerapitest.Reader {
	return providerapitest.Reader{T: w.t, Read: w.reader.Read, Violations: w.history.Violations, API: "GitHub's API description"}
}

func rerunOf(head int, pull int, before string) change.Change {
	s := change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(head), Event: change.Rerun,
		Installation: 2311213, Before: before, Ref: "refs/heads/changes"}
	// Known to be a pull request's (pull > 0), or a push's (the runner found the delivery its
	// check run was published for): either way the pull request is held.
	s.Whole = change.PullInput
	if pull > 0 {
		s.Pull = &change.Pull{Number: pull, TargetBranch: "main", SourceBranch: "changes"}
	}
	return s
}

// A re-run that names no pull request, and that the runner could not match to the delivery it
// re-runs, may be a fork's pull request's as well as a push's: neither its pull request nor
// its commits and paths (all of a pull request's, or a push's since the branch's last) are
// known, and every rule that needs them fails closed, saying what to do. The push's files are
// still read, so that a forbidden one among them is named.
func TestARerunNamingNoPullRequestLeavesItsPullRequestCommitsAndPathsUnread(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 2, modified("a.go"))
	s := rerunOf(2, 0, commitN(1))
	s.Whole = 0
	got := w.fill(s)
	for _, in := range []change.Inputs{change.TitleInput, change.PullInput, change.CommitsInput, change.PathsInput} {
		if got.Whole.Has(in) || !strings.Contains(got.UnreadReason(in), "names no pull request") {
			t.Fatalf("%s: whole %q, unread %+v", in, got.Whole, got.Unread)
		}
	}
	if !reflect.DeepEqual(got.Paths, []string{"a.go"}) {
		t.Fatalf("the push's paths %q, want them read", got.Paths)
	}
}

// A re-run that names no pull request, whose commit is on the branch its check suite names
// ("Re-run all checks" of a push), is a push's: its pull request is known to be none, and its
// commits and paths are the push's, read from the push's range. The commit stays on the branch
// after the branch moves on. Without the branch (a fork's pull request's commit, which the
// repository's branches do not hold) it stays unread, as the test of a re-run naming no pull request says.
func TestARerunOfAPushOnItsBranchIsReadAsThePush(t *testing.T) {
	for _, tc := range []struct {
		name   string
		branch int // the commit the branch is at
	}{{"at the commit", 2}, {"moved on", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRerunWorld(t)
			w.commits(1, 1, modified("README.md"))
			w.commits(2, 2, modified("secrets/key.pem"))
			w.commits(3, 3, modified("later.go"))
			w.history.SetBranch(rerunRepo, "changes", commitN(tc.branch))
			s := rerunOf(2, 0, commitN(1))
			s.Whole = 0
			got := w.fill(s)
			if got.Pull != nil || len(got.Unread) > 0 {
				t.Fatalf("pull %+v, unread %+v: want a push's re-run, read whole", got.Pull, got.Unread)
			}
			for _, in := range []change.Inputs{change.TitleInput, change.PullInput, change.CommitsInput, change.PathsInput} {
				if !got.Whole.Has(in) {
					t.Fatalf("%s not held whole: whole %q", in, got.Whole)
				}
			}
			if !reflect.DeepEqual(got.Paths, []string{"secrets/key.pem"}) || !reflect.DeepEqual(commitIDs(got), []string{commitN(2)}) {
				t.Fatalf("paths %q, commits %q: want the push's own", got.Paths, commitIDs(got))
			}
		})
	}
}

// A re-run naming no pull request whose check suite's branch does not hold its commit (a
// fork's pull request whose branch name the repository also has, at other commits) is not
// taken for a push.
func TestARerunWhoseBranchDoesNotHoldItsCommitStaysUnread(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 2, modified("a.go"))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(9), Parent: commitN(1), Message: "elsewhere"})
	w.history.SetBranch(rerunRepo, "changes", commitN(9))
	s := rerunOf(2, 0, commitN(1))
	s.Whole = 0
	got := w.fill(s)
	if got.Whole.Has(change.PullInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "names no pull request") {
		t.Fatalf("whole %q, unread %+v: want the pull request, commits and paths unread", got.Whole, got.Unread)
	}
}

var commitIDs = providerapitest.IDs

// A re-run of a pull request's head reads the pull request: its title and branches, its
// files (a renamed file's old path too) and its commits' messages.
func TestARerunOfAPullRequestReadsItsTitleFilesAndCommits(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 1, modified("src/a.go"))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(2), Parent: commitN(1), Message: "Move the key",
		Files: []githubtest.ChangedFile{{Filename: "docs/key.md", Status: "renamed", PreviousFilename: "secrets/key.pem"}}})
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 2, Title: "feat: move the key", Base: "release/1", Head: "changes",
		BaseSHA: commitN(0), HeadSHA: commitN(2)})
	got := w.fill(rerunOf(2, 2, ""))
	want := rerunOf(2, 2, "")
	want.Whole = change.AllInputs
	if len(got.Read) != 1 || !strings.HasPrefix(got.Read[0], "GitHub: title, commits, paths (") {
		t.Fatalf("read %q", got.Read)
	}
	want.Read = got.Read
	want.Pull.Title = "feat: move the key" // the branches are the webhook's, held whole
	want.Commits = []change.Commit{{ID: commitN(1), Message: "Commit 1"}, {ID: commitN(2), Message: "Move the key"}}
	want.Paths = []string{"src/a.go", "secrets/key.pem", "docs/key.md"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("filled\n%+v\nwant\n%+v", got, want)
	}
	if n := w.history.Requests(githubtest.OpCompareCommits) + w.history.Requests(githubtest.OpGetCommit); n != 0 {
		t.Fatalf("%d reads of the push for a pull request's head", n)
	}
}

// A re-run of a push reads the comparison from the check suite's before to the commit; of a
// new branch (before all zeros, or none), the comparison from the default branch.
func TestARerunOfAPushReadsTheComparisonSinceBeforeOrTheDefaultBranch(t *testing.T) {
	w := newRerunWorld(t)
	w.history.SetBranch(rerunRepo, "main", commitN(1))
	w.commits(1, 3, func(n int) []githubtest.ChangedFile { return modified(fmt.Sprintf("f%d.go", n), "README.md")(n) })
	got := w.fill(rerunOf(3, 0, commitN(1)))
	if !got.Whole.Has(change.AllInputs) || !reflect.DeepEqual(got.Paths, []string{"f2.go", "README.md", "f3.go"}) ||
		!reflect.DeepEqual(commitIDs(got), []string{commitN(2), commitN(3)}) {
		t.Fatalf("filled from the comparison %+v", got)
	}
	for _, before := range []string{strings.Repeat("0", 40), ""} {
		got = w.fill(rerunOf(3, 0, before))
		if !got.Whole.Has(change.AllInputs) || !reflect.DeepEqual(got.Paths, []string{"f2.go", "README.md", "f3.go"}) ||
			!reflect.DeepEqual(commitIDs(got), []string{commitN(2), commitN(3)}) {
			t.Fatalf("filled from the default branch (before %q) %+v", before, got)
		}
	}
}

// What GitHub's listings cut is not held whole, naming the limit: a pull request of 1200 files
// and 260 commits is read whole for its files and cut for its commits (GitHub lists 250); a
// comparison of 350 files (GitHub gives 300) and 230 commits (more than amiss reads one by one)
// is cut for its files, whole for its commits; a new branch's commit of 1100 files, cut in its
// comparison, is read whole from the commit (GitHub lists 3000 files of one).
func TestARerunBeyondGitHubsListingsIsNotHeldWhole(t *testing.T) {
	w := newRerunWorld(t)
	many := func(count int) func(int) []githubtest.ChangedFile {
		return func(n int) []githubtest.ChangedFile {
			var out []githubtest.ChangedFile
			for i := 0; i < count; i++ {
				out = append(out, githubtest.ChangedFile{Filename: fmt.Sprintf("c%d/f%d.go", n, i), Status: "added"})
			}
			return out
		}
	}
	w.commits(1, 259, many(0))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(260), Parent: commitN(259), Message: "Many files", Files: many(1200)(260)})
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 9, Title: "feat: many", Base: "main", Head: "many",
		BaseSHA: commitN(0), HeadSHA: commitN(260)})
	got := w.fill(rerunOf(260, 9, ""))
	if !got.Whole.Has(change.PathsInput) || got.Whole.Has(change.CommitsInput) || len(got.Paths) != 1200 || len(got.Commits) != 250 ||
		!strings.Contains(got.UnreadReason(change.CommitsInput), "250 commits") {
		t.Fatalf("a pull request of 1200 files and 260 commits: whole %q, %d paths, %d commits, %v", got.Whole, len(got.Paths), len(got.Commits), got.Unread)
	}
	if last := got.Commits[len(got.Commits)-1].ID; last != commitN(250) {
		// GitHub lists the first 250 commits of a pull request: the newest it gives is the 250th.
		t.Fatalf("the newest commit kept is %s, want the 250th %s", last, commitN(250))
	}

	w.commits(301, 530, func(n int) []githubtest.ChangedFile {
		if n == 530 {
			return many(350)(n)
		}
		return nil
	})
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(300), Parent: commitN(299)})
	got = w.fill(rerunOf(530, 0, commitN(300)))
	ids := commitIDs(got)
	if got.Whole.Has(change.PathsInput) || !got.Whole.Has(change.CommitsInput) || len(got.Paths) != 300 || len(ids) != 230 ||
		ids[len(ids)-1] != commitN(530) || ids[0] != commitN(301) || !strings.Contains(got.UnreadReason(change.PathsInput), "300 files") {
		t.Fatalf("a comparison of 350 files and 230 commits: whole %q, %d paths, %d commits from %.8s to %.8s", got.Whole,
			len(got.Paths), len(ids), ids[0], ids[len(ids)-1])
	}

	w.history.SetBranch(rerunRepo, "main", commitN(599))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(600), Parent: commitN(599), Message: "Big", Files: many(1100)(600)})
	got = w.fill(rerunOf(600, 0, ""))
	if !got.Whole.Has(change.PathsInput) || len(got.Paths) != 1100 {
		t.Fatalf("a new branch's commit of 1100 files: whole %q, %d paths, unread %+v", got.Whole, len(got.Paths), got.Unread)
	}
}

// A read the App's permissions do not cover (403 "Resource not accessible by integration",
// or 404) is no error: the change comes back unfilled, saying which permission to grant.
func TestARerunTheAppMayNotReadNamesThePermission(t *testing.T) {
	for _, c := range []struct {
		op, permission string
		code           int
		s              change.Change
	}{
		{githubtest.OpCompareCommits, "Contents: read", http.StatusForbidden, rerunOf(2, 0, commitN(1))},
		{githubtest.OpGetRepo, "Metadata: read", http.StatusNotFound, rerunOf(2, 0, "")},
		{githubtest.OpGetPull, "Pull requests: read", http.StatusForbidden, rerunOf(2, 2, "")},
	} {
		w := newRerunWorld(t)
		w.commits(1, 2, modified("a.go"))
		w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 2, Title: "feat: a", Base: "main", Head: "a", BaseSHA: commitN(0), HeadSHA: commitN(2)})
		w.history.Answer = providerapitest.Refuse(c.code, c.op)
		got := w.fill(c.s)
		why := got.UnreadReason(change.PathsInput)
		if got.Whole.Has(change.PathsInput) || got.Paths != nil || !strings.Contains(why, c.permission) ||
			!strings.Contains(why, fmt.Sprint(c.code)) {
			t.Fatalf("%s answered %d: %+v", c.op, c.code, got)
		}
	}
}

// GitHub's outage is an error of class Transient (the attempt is retried), the change as it
// was.
func TestARerunReadDuringGitHubsOutageIsTransient(t *testing.T) {
	providerapitest.CheckAnOutageWhileReadingIsTransient(t, "GitHub", rerunOf(2, 0, commitN(1)), func(code int, s change.Change) (change.Change, error) {
		w := newRerunWorld(t)
		w.commits(1, 2, modified("a.go"))
		w.history.Answer = providerapitest.Refuse(code)
		return w.reads().Inputs(s, change.AllInputs)
	})
}

// A pull request that has moved on since the re-run's commit: the commit is read as the pull
// request was at it (what it changed since its target branch), as its own pull request event
// read it then; never as the last push alone, which would leave out what the pull request's
// earlier commits changed.
func TestARerunOfAPullRequestThatMovedOnReadsWhatThePullRequestChangedAtItsCommit(t *testing.T) {
	w := newRerunWorld(t)
	w.history.SetBranch(rerunRepo, "main", commitN(0))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root"})
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(1), Parent: commitN(0), Message: "Add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/key.pem", Status: "added"}}})
	w.commits(2, 3, func(n int) []githubtest.ChangedFile { return modified(fmt.Sprintf("f%d.go", n))(n) })
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 2, Title: "feat: three", Base: "main", Head: "changes",
		BaseSHA: commitN(0), HeadSHA: commitN(3)})
	// Re-run of the check suite the push of commit 2 made (its before: commit 1).
	got := w.fill(rerunOf(2, 2, commitN(1)))
	if !got.Whole.Has(change.AllInputs) || got.Pull.Title != "feat: three" ||
		!reflect.DeepEqual(got.Paths, []string{"secrets/key.pem", "f2.go"}) ||
		!reflect.DeepEqual(commitIDs(got), []string{commitN(1), commitN(2)}) {
		t.Fatalf("filled %+v", got)
	}
	if n := w.history.Requests(githubtest.OpListPullFiles); n != 0 {
		t.Fatalf("%d reads of the files of a pull request whose head is another commit", n)
	}
}

// A push that creates a branch (no before) is read as what the branch brings to the
// repository's default branch: every commit and file since their merge base, never the head
// commit alone (whose message and files are not the push's whole). The push that creates the
// default branch itself names nothing to compare with: its commits and paths are unread.
func TestAPushCreatingABranchIsReadSinceTheDefaultBranch(t *testing.T) {
	w := newRerunWorld(t)
	w.history.SetBranch(rerunRepo, "main", commitN(0))
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root"})
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(1), Parent: commitN(0), Message: "add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/key.pem", Status: "added"}}})
	w.commits(2, 3, modified("README.md"))
	push := change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(3), Ref: "refs/heads/feature", Event: change.Push,
		Installation: 2311213, Whole: change.TitleInput | change.PullInput}
	got := w.fill(push)
	if !got.Whole.Has(change.AllInputs) || !reflect.DeepEqual(got.Paths, []string{"secrets/key.pem", "README.md"}) ||
		!reflect.DeepEqual(commitIDs(got), []string{commitN(1), commitN(2), commitN(3)}) {
		t.Fatalf("a new branch read as %+v", got)
	}
	w.history.SetDefaultBranch(rerunRepo, "feature")
	got = w.fill(push)
	for _, in := range []change.Inputs{change.CommitsInput, change.PathsInput} {
		if got.Whole.Has(in) || !strings.Contains(got.UnreadReason(in), "default branch") {
			t.Fatalf("the default branch's first push: %s whole %q, unread %+v", in, got.Whole, got.Unread)
		}
	}
	// A re-run naming no branch, no push before it and no pull request may be of that push.
	rerun := rerunOf(3, 0, "")
	rerun.Ref = ""
	got = w.fill(rerun)
	if got.Whole.Has(change.PathsInput) || got.Whole.Has(change.CommitsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "branch") {
		t.Fatalf("a re-run naming no branch: whole %q, unread %+v", got.Whole, got.Unread)
	}
}

// The title and branches a pull request's webhook carried whole are the event's: a read of the
// files and commits never replaces them with what the API answers (which may be older than the
// event, from a replica or cache, or newer: another event's, whose own verdict follows).
func TestReadingAPullRequestKeepsWhatItsWebhookCarried(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 2, modified("a.go"))
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 2, Title: "feat: the title before the edit", Base: "main", Head: "changes",
		BaseSHA: commitN(0), HeadSHA: commitN(2)})
	s := change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(2), Event: change.PullRequest, Installation: 2311213,
		Whole: change.TitleInput | change.PullInput,
		Pull:  &change.Pull{Number: 2, Title: "feat: the webhook's title", TargetBranch: "main", SourceBranch: "changes"}}
	providerapitest.CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t, s, w.reads().Inputs)
}

// A pull request whose head moves on while its files and commits are read (a force push landing
// between the pull request's read and its listings): the listings describe the new head, which
// GitHub's files name in their links and its commits end with, and they are dropped; the commit
// is read as the pull request was at it. Its forbidden file, gone from the new head, is seen.
func TestAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t *testing.T) {
	providerapitest.CheckAPullRequestMovingOnWhileItsListingsAreReadIsReadAtItsCommit(t, func(need change.Inputs) (change.Change, error) {
		w := newRerunWorld(t)
		w.history.SetBranch(rerunRepo, "main", commitN(0))
		w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root"})
		w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(1), Parent: commitN(0), Message: "Add the key",
			Files: []githubtest.ChangedFile{{Filename: "secrets/key.pem", Status: "added"}}})
		// The force push's head: commit 1 replaced by one editing the README.
		w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(2), Parent: commitN(0), Message: "Edit the README",
			Files: []githubtest.ChangedFile{{Filename: "README.md", Status: "modified"}}})
		pull := githubtest.HistoryPull{Number: 2, Title: "feat: a key", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(1)}
		w.history.AddPull(rerunRepo, pull)
		w.history.Answer = func(op string, n int) int {
			if (op == githubtest.OpListPullFiles || op == githubtest.OpListPullCommits) && n == 1 {
				moved := pull
				moved.HeadSHA = commitN(2)
				w.history.AddPull(rerunRepo, moved)
			}
			return 0
		}
		s := change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(1), Event: change.PullRequest, Installation: 2311213,
			Whole: change.TitleInput | change.PullInput,
			Pull:  &change.Pull{Number: 2, Title: "feat: a key", TargetBranch: "main", SourceBranch: "changes"}}
		return w.reads().Inputs(s, need)
	}, []string{"secrets/key.pem"}, []string{commitN(1)}, commitIDs)
}

// An answer longer than amiss reads of one leaves its input unread, without a retry.
func TestAnAnswerLongerThanAmissReadsLeavesItsInputUnread(t *testing.T) {
	s := change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(2), Event: change.Push,
		Ref: "refs/heads/main", Before: commitN(1), Whole: change.TitleInput | change.PullInput}
	providerapitest.CheckAnAnswerPastItsBoundLeavesThePathsUnread(t, func(u string, hc *http.Client) (change.Change, error) {
		return github.NewTokenClient(u, "ghp_token", hc).Read(context.Background(), s, change.PathsInput)
	})
}

// A Re-run whose check run's delivery is no longer kept names, as its pull request, the first
// its webhook lists, not held whole: the reader reads it (pulls/{n}), taking its branches as
// GitHub shows them (retargeted since to release/1, not the webhook's main), holds it whole,
// and reads its files and commits as for any pull request's head.
func TestARerunsStandInPullRequestIsReadAndHeldWhole(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 1, modified("src/a.go"))
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 2, Title: "feat: a", Base: "release/1", Head: "changes",
		BaseSHA: commitN(0), HeadSHA: commitN(1)})
	s := rerunOf(1, 2, "")
	s.Whole = 0
	got := w.fill(s)
	if got.Pull == nil || got.Pull.Number != 2 || got.Pull.Title != "feat: a" || got.Pull.TargetBranch != "release/1" ||
		!got.Whole.Has(change.AllInputs) || len(got.Unread) != 0 {
		t.Fatalf("read %+v (pull request %+v)", got, got.Pull)
	}
	if !reflect.DeepEqual(got.Paths, []string{"src/a.go"}) || w.history.Requests(githubtest.OpListPullFiles) != 1 {
		t.Fatalf("paths %q; %d listings of the pull request's files", got.Paths, w.history.Requests(githubtest.OpListPullFiles))
	}
}

// pushOf is a push of commit head from before ("" for a new branch) to the branch feature.
func pushOf(head int, before string) change.Change {
	return change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(head), Ref: "refs/heads/feature", Event: change.Push,
		Installation: 2311213, Before: before, Whole: change.TitleInput | change.PullInput}
}

// files is n files added under dir, named by their number.
func files(dir string, n int) []githubtest.ChangedFile {
	var out []githubtest.ChangedFile
	for i := 0; i < n; i++ {
		out = append(out, githubtest.ChangedFile{Filename: fmt.Sprintf("%s/f%03d.md", dir, i), Status: "added"})
	}
	return out
}

// A push whose comparison GitHub cuts at 300 files (a forced push of a rebased branch, a new
// branch bringing 400 files) is read commit by commit: its paths are every path its commits
// change, a renamed file's old path too, held whole, and the forbidden file among the 100 past
// GitHub's 300 is among them. Each commit costs a request a page of its files, counted with
// the comparison (and, for a new branch, the repository) in what the verdict records as read.
func TestAPushWhoseComparisonGitHubCutsIsReadCommitByCommit(t *testing.T) {
	for _, c := range []struct {
		name     string
		before   string
		requests int // the comparison, the repository for a new branch, and 6 pages of commits
	}{
		{"forced over a rewritten commit", commitN(90), 8}, // and the comparison of what it drops
		{"creating its branch", "", 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newRerunWorld(t)
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root"})
			w.history.SetBranch(rerunRepo, "main", commitN(0))
			// The branch's head before the forced push: a commit the push drops.
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(90), Parent: commitN(0), Message: "Dropped"})
			w.commits(1, 4, func(n int) []githubtest.ChangedFile {
				out := files(fmt.Sprintf("docs/c%d", n), 100)
				switch n {
				case 3:
					out = append(out, githubtest.ChangedFile{Filename: "docs/config.yml", Status: "renamed", PreviousFilename: "config/app.yml"})
				case 4:
					out = append(out, githubtest.ChangedFile{Filename: "secrets/prod.pem", Status: "added"})
				}
				return out
			})
			got := w.fill(pushOf(4, c.before))
			if !got.Whole.Has(change.PathsInput) || !got.Whole.Has(change.CommitsInput) || len(got.Unread) != 0 {
				t.Fatalf("whole %q, unread %+v: want the paths and commits held whole", got.Whole, got.Unread)
			}
			want := map[string]bool{"secrets/prod.pem": true, "config/app.yml": true, "docs/config.yml": true}
			for n := 1; n <= 4; n++ {
				for _, f := range files(fmt.Sprintf("docs/c%d", n), 100) {
					want[f.Filename] = true
				}
			}
			seen := map[string]bool{}
			for _, p := range got.Paths {
				if !want[p] || seen[p] {
					t.Fatalf("path %q read, not one the push's commits change once", p)
				}
				seen[p] = true
			}
			if len(seen) != len(want) {
				t.Fatalf("%d paths read, want the %d the push's commits change", len(seen), len(want))
			}
			if !reflect.DeepEqual(commitIDs(got), []string{commitN(1), commitN(2), commitN(3), commitN(4)}) {
				t.Fatalf("commits %q", commitIDs(got))
			}
			if n := w.history.Requests(githubtest.OpGetCommit); n != 6 {
				t.Fatalf("%d reads of commits, want 6 (a page of 100 files each, two for the commits of 101)", n)
			}
			if len(got.Read) != 1 || !strings.HasSuffix(got.Read[0], fmt.Sprintf("(%d requests)", c.requests)) {
				t.Fatalf("read %q, want %d requests counted", got.Read, c.requests)
			}
		})
	}
}

// The commits of a push whose comparison GitHub cuts are read one by one up to a bound: a
// push of MaxPushCommitsRead commits is read whole; one of a commit more keeps the comparison's
// 300 files and leaves the paths unread, naming the bound, without reading any commit.
func TestAPushOfMoreCommitsThanAmissReadsOneByOneLeavesItsPathsUnread(t *testing.T) {
	for _, count := range []int{github.MaxPushCommitsRead, github.MaxPushCommitsRead + 1} {
		w := newRerunWorld(t)
		w.commits(1, count, func(n int) []githubtest.ChangedFile {
			if n == count {
				return append(files(fmt.Sprintf("c%d", n), 6), githubtest.ChangedFile{Filename: "secrets/prod.pem", Status: "added"})
			}
			return files(fmt.Sprintf("c%d", n), 7)
		})
		got := w.fill(pushOf(count, commitN(0)))
		reads := w.history.Requests(githubtest.OpGetCommit)
		if count <= github.MaxPushCommitsRead {
			if !got.Whole.Has(change.PathsInput) || len(got.Paths) != 7*count || !slices.Contains(got.Paths, "secrets/prod.pem") || reads != count {
				t.Fatalf("%d commits: whole %q, %d paths, %d reads of commits", count, got.Whole, len(got.Paths), reads)
			}
			continue
		}
		why := got.UnreadReason(change.PathsInput)
		if got.Whole.Has(change.PathsInput) || !strings.Contains(why, fmt.Sprintf("at most %d commits", github.MaxPushCommitsRead)) ||
			len(got.Paths) != 300 || reads != 0 {
			t.Fatalf("%d commits: whole %q, unread %q, %d paths, %d reads of commits", count, got.Whole, why, len(got.Paths), reads)
		}
		if !got.Whole.Has(change.CommitsInput) {
			t.Fatalf("%d commits: the commits (listed whole by the comparison) not held whole: %+v", count, got.Unread)
		}
	}
}

// A push's commits are read to MaxPushFilesRead files in all, GitHub's own bound on one commit:
// a commit of more (GitHub lists 3000), or commits of more together, leave the paths unread,
// naming the bound, with the paths read kept; the requests stay within one a commit and one a
// further page of 100 files.
func TestAPushWhoseCommitsChangeMoreFilesThanAmissReadsLeavesItsPathsUnread(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int
	}{
		{"one commit of 3100 files", []int{3100}},
		{"two commits of 1600", []int{1600, 1600}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newRerunWorld(t)
			w.commits(1, len(c.sizes), func(n int) []githubtest.ChangedFile { return files(fmt.Sprintf("c%d", n), c.sizes[n-1]) })
			got := w.fill(pushOf(len(c.sizes), commitN(0)))
			why := got.UnreadReason(change.PathsInput)
			if got.Whole.Has(change.PathsInput) || !strings.Contains(why, "3,000") || len(got.Paths) < github.MaxPushFilesRead {
				t.Fatalf("whole %q, unread %q, %d paths", got.Whole, why, len(got.Paths))
			}
			if n := w.history.Requests(githubtest.OpGetCommit); n > len(c.sizes)+github.MaxPushFilesRead/100 {
				t.Fatalf("%d reads of commits for %d commits", n, len(c.sizes))
			}
		})
	}
}

// A commit's files are read page after page while GitHub links a next one, whatever a page
// holds: a GitHub that pages them by 300 (its size when per_page is not given) is read to the
// end, never taken as whole at its first page.
func TestACommitsFilesAreReadToTheLastPageWhateverTheirSize(t *testing.T) {
	const total, size = 700, 300
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := 1
		fmt.Sscan(r.URL.Query().Get("page"), &page)
		var fs []string
		for i := (page - 1) * size; i < min(page*size, total); i++ {
			fs = append(fs, fmt.Sprintf(`{"filename":"f%d.go","status":"added"}`, i))
		}
		if page*size < total {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?page=%d>; rel="next"`, r.Host, r.URL.Path, page+1))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"sha":%q,"commit":{"message":"Big"},"files":[%s]}`, commitN(1), strings.Join(fs, ","))
	}))
	t.Cleanup(srv.Close)
	_, got, pages, err := github.NewTokenClient(srv.URL, "ghp_token", srv.Client()).CommitFiles(context.Background(), 0, rerunRepo, commitN(1), 3000)
	if err != nil || len(got) != total || pages != 3 || got[total-1].Filename != fmt.Sprintf("f%d.go", total-1) {
		t.Fatalf("read %d files in %d pages (%v), want %d in 3", len(got), pages, err, total)
	}
}

// A push whose webhook listed its commits whole has only its paths read: the comparison's first
// page gives them, in one request whatever the number of commits, and the webhook's commits
// stay as they were, neither listed twice nor marked unread past the first page's 100.
func TestAPushsPathsReadAloneKeepTheCommitsItsWebhookListed(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 150, func(n int) []githubtest.ChangedFile {
		if n == 75 {
			return modified("secrets/prod.pem")(n)
		}
		return modified(fmt.Sprintf("f%d.go", n))(n)
	})
	s := pushOf(150, commitN(0))
	for n := 51; n <= 150; n++ { // the newest 100, as a change keeps them
		s.Commits = append(s.Commits, change.Commit{ID: commitN(n), Message: fmt.Sprintf("Commit %d", n)})
	}
	s.Whole |= change.CommitsInput
	listed := slices.Clone(s.Commits)
	got := w.reads().Must(s, change.PathsInput)
	if !got.Whole.Has(change.AllInputs) || len(got.Unread) != 0 || !reflect.DeepEqual(got.Commits, listed) {
		t.Fatalf("whole %q, unread %+v, %d commits: want the listed 100 kept, whole", got.Whole, got.Unread, len(got.Commits))
	}
	if len(got.Paths) != 150 || !slices.Contains(got.Paths, "secrets/prod.pem") {
		t.Fatalf("%d paths read, want the comparison's 150", len(got.Paths))
	}
	if n := w.history.Requests(githubtest.OpCompareCommits); n != 1 || !strings.HasSuffix(got.Read[0], "(1 requests)") {
		t.Fatalf("%d comparison requests, read %q: want one", n, got.Read)
	}
}

// A push whose comparison GitHub cuts at 300 files is read commit by commit only while its
// commits' own files, each against its first parent (as GitHub lists a commit's, a merge's too),
// add up to what it changes on its branch: while its head leads back to the comparison's merge
// base along first parents. A merge into the branch (its first parent the branch's earlier
// commit) is read so: the merged commits are the comparison's too, and a forbidden file one of
// them adds, past GitHub's 300, is found. A merge of the branch into an older line (made with
// "git merge -s ours" on a commit from before the branch removed secrets/prod.pem, then
// fast-forwarded onto the branch) restores the key, which neither it nor any of its commits
// changes against its first parent: its paths are left unread, never passed as whole.
func TestAPushOfAMergeIsReadCommitByCommitOnlyAlongItsBranchsFirstParents(t *testing.T) {
	for _, c := range []struct {
		name   string
		merge  githubtest.HistoryCommit
		secret string // the forbidden path the push brings
		whole  bool
	}{
		{"a merge into the branch", githubtest.HistoryCommit{SHA: commitN(5), Parent: commitN(1), Merged: []string{commitN(4)},
			Message: "Merge the docs", Files: append(append(append(files("docs/c2", 100), files("docs/c3", 100)...), files("docs/c4", 100)...),
				githubtest.ChangedFile{Filename: "secrets/key.pem", Status: "added"})}, "secrets/key.pem", true},
		{"a merge of the branch into an older line", githubtest.HistoryCommit{SHA: commitN(5), Parent: commitN(4), Merged: []string{commitN(1)},
			Message: "Merge branch 'main' into docs"}, "secrets/prod.pem", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newRerunWorld(t)
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root",
				Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}}})
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(1), Parent: commitN(0), Message: "Remove the key",
				Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
			// The docs line, from before the removal: 100 files a commit, commit 4 adding a key.
			for n := 2; n <= 4; n++ {
				fs := files(fmt.Sprintf("docs/c%d", n), 100)
				if n == 4 && c.whole {
					fs = append(fs, githubtest.ChangedFile{Filename: "secrets/key.pem", Status: "added"})
				}
				parent := commitN(n - 1)
				if n == 2 {
					parent = commitN(0)
				}
				w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(n), Parent: parent, Message: fmt.Sprintf("Commit %d", n), Files: fs})
			}
			w.history.AddCommit(rerunRepo, c.merge)
			// main, at commit 1, fast-forwarded to the merge.
			got := w.fill(pushOf(5, commitN(1)))
			if c.whole {
				if !got.Whole.Has(change.PathsInput) || !slices.Contains(got.Paths, c.secret) {
					t.Fatalf("whole %q, unread %+v, %d paths: want the merged commits' files read, %s among them",
						got.Whole, got.Unread, len(got.Paths), c.secret)
				}
				return
			}
			why := got.UnreadReason(change.PathsInput)
			if got.Whole.Has(change.PathsInput) || !strings.Contains(why, "first parent") {
				t.Fatalf("whole %q, unread %q, %s read: %v; want the paths unread, naming the first parents",
					got.Whole, why, c.secret, slices.Contains(got.Paths, c.secret))
			}
		})
	}
}

// A forced push changes on its branch what the commits it drops changed, as well as what it
// brings: GitHub's comparison before...after gives what the new head changes since the merge
// base, not what the old head had changed since it. main added secrets/prod.pem in commit 0
// and removed it in commit 1; main forced back to commit 0, or to commit 2 rewritten on it,
// has the key again. Its paths name it, read from the comparison after...before (what the
// dropped commits changed), and the dropped commits are not among its commits.
func TestAForcedPushsPathsNameWhatTheCommitsItDropsChanged(t *testing.T) {
	for _, c := range []struct {
		name  string
		head  int
		paths []string
	}{
		{"reset to an older commit", 0, []string{"secrets/prod.pem"}},
		{"a rewritten commit", 2, []string{"docs/a.md", "secrets/prod.pem"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newRerunWorld(t)
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root",
				Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}}})
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(1), Parent: commitN(0), Message: "Remove the key",
				Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
			w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(2), Parent: commitN(0), Message: "Rewritten",
				Files: []githubtest.ChangedFile{{Filename: "docs/a.md", Status: "added"}}})
			got := w.fill(pushOf(c.head, commitN(1)))
			if !got.Whole.Has(change.PathsInput) || !reflect.DeepEqual(got.Paths, c.paths) {
				t.Fatalf("whole %q, unread %+v, paths %q: want %q", got.Whole, got.Unread, got.Paths, c.paths)
			}
			if slices.Contains(commitIDs(got), commitN(1)) {
				t.Fatalf("commits %q: the dropped commit is not the push's", commitIDs(got))
			}
		})
	}
}

// What a forced push drops is read as what it brings is: when its comparison gives 300 files,
// commit by commit, within what the push's own reads left of the bounds. main's four commits of
// 100 files each, the last removing secrets/prod.pem, are dropped for a commit rewritten on
// their root: main has the key again, named past the 300.
func TestAForcedPushDroppingMoreFilesThanAComparisonGivesIsReadCommitByCommit(t *testing.T) {
	w := newRerunWorld(t)
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(0), Message: "Root",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}}})
	w.commits(1, 4, func(n int) []githubtest.ChangedFile {
		out := files(fmt.Sprintf("docs/c%d", n), 100)
		if n == 4 {
			out = append(out, githubtest.ChangedFile{Filename: "secrets/prod.pem", Status: "removed"})
		}
		return out
	})
	w.history.AddCommit(rerunRepo, githubtest.HistoryCommit{SHA: commitN(10), Parent: commitN(0), Message: "Rewritten",
		Files: []githubtest.ChangedFile{{Filename: "docs/new.md", Status: "added"}}})
	got := w.fill(pushOf(10, commitN(4)))
	if !got.Whole.Has(change.PathsInput) || len(got.Paths) != 402 || !slices.Contains(got.Paths, "secrets/prod.pem") {
		t.Fatalf("whole %q, unread %+v, %d paths: want the 401 the dropped commits changed and the new one", got.Whole, got.Unread, len(got.Paths))
	}
	if !reflect.DeepEqual(commitIDs(got), []string{commitN(10)}) {
		t.Fatalf("commits %q, want the push's own", commitIDs(got))
	}
	// Two comparisons, and a page of each dropped commit's files (two of the last's 101).
	if n := w.history.Requests(githubtest.OpCompareCommits) + w.history.Requests(githubtest.OpGetCommit); n != 7 {
		t.Fatalf("%d requests, want 7", n)
	}
}

// A commit GitHub refuses half way through a push read commit by commit never leaves the paths
// read so far as whole: a 404 (a permission, or a commit no longer there) leaves them unread,
// naming the permission; a 409, 500 or 502 is an error, and the attempt is retried.
func TestACommitRefusedHalfWayThroughAPushReadCommitByCommitIsNeverAPass(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusConflict, http.StatusInternalServerError, http.StatusBadGateway} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			w := newRerunWorld(t)
			w.commits(1, 4, func(n int) []githubtest.ChangedFile { return files(fmt.Sprintf("docs/c%d", n), 100) })
			w.history.Answer = func(op string, n int) int {
				if op == githubtest.OpGetCommit && n >= 3 { // the third commit, asked again too
					return code
				}
				return 0
			}
			s := pushOf(4, commitN(0))
			got, err := w.reads().Inputs(s, change.CommitsInput|change.PathsInput)
			if code != http.StatusNotFound {
				if err == nil || got.Whole.Has(change.PathsInput) {
					t.Fatalf("no error (whole %q): want the read retried", got.Whole)
				}
				return
			}
			if err != nil || got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), github.ContentsPermission) {
				t.Fatalf("whole %q, unread %+v, %v: want the paths unread, naming %s", got.Whole, got.Unread, err, github.ContentsPermission)
			}
		})
	}
}

// The paths a push's webhook listed (each commit's, against its first parent) are paths its
// commits change: a read of the push's paths keeps them beside what it reads, so that a
// forbidden one is named even when the read leaves the paths unread (the push that created
// the default branch names nothing to compare with).
func TestAPushsListedPathsAreKeptWithWhatIsRead(t *testing.T) {
	w := newRerunWorld(t)
	w.commits(1, 1, modified("README.md"))
	w.history.SetBranch(rerunRepo, "main", commitN(1))
	for _, c := range []struct {
		name   string
		push   change.Change
		whole  bool
		listed []string
		want   []string
	}{
		{"read whole", pushOf(1, commitN(0)), true, []string{"docs/old.md"}, []string{"docs/old.md", "README.md"}},
		{"unread: the default branch created", func() change.Change { s := pushOf(1, ""); s.Ref = "refs/heads/main"; return s }(),
			false, []string{"secrets/prod.pem"}, []string{"secrets/prod.pem"}},
	} {
		s := c.push
		s.Paths = c.listed
		got := w.reads().Must(s, change.CommitsInput|change.PathsInput)
		if got.Whole.Has(change.PathsInput) != c.whole || !reflect.DeepEqual(got.Paths, c.want) {
			t.Fatalf("%s: whole %q, paths %q, want %q", c.name, got.Whole, got.Paths, c.want)
		}
	}
}
