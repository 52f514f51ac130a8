package gitlab_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/subject"
)

// What a webhook's missing inputs are read as, from the fake of GitLab, which checks every
// request against GitLab's published API description.

const readProject = "group/sub/app"

// commitN is a made-up commit hash numbered n.
func commitN(n int) string { return fmt.Sprintf("%040x", n+1) }

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

func (w *readWorld) read(s subject.Subject, need subject.Inputs) subject.Subject {
	w.t.Helper()
	got, err := w.reader.Read(context.Background(), s, need)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	if v := w.gitlab.Violations(); len(v) > 0 {
		w.t.Fatalf("requests outside GitLab's API description: %v", v)
	}
	return got
}

func mergeRequestOf(head, iid int) subject.Subject {
	return subject.Subject{Provider: "gitlab", Repository: readProject, SHA: commitN(head), Event: subject.PullRequest,
		Ref: "refs/heads/changes", Whole: subject.TitleInput | subject.PullInput,
		Pull: &subject.Pull{Number: iid, Title: "feat: the webhook's title", TargetBranch: "main", SourceBranch: "changes"}}
}

func pushOf(before, head, listed int) subject.Subject {
	s := subject.Subject{Provider: "gitlab", Repository: readProject, SHA: commitN(head), Event: subject.Push, Ref: "refs/heads/main",
		Whole: subject.TitleInput | subject.PullInput}
	if before >= 0 {
		s.Before = commitN(before)
	}
	for n := head - listed + 1; n <= head; n++ {
		s.Commits = append(s.Commits, subject.Commit{ID: commitN(n), Message: fmt.Sprintf("Commit %d\n\nbody", n)})
	}
	return s
}

func ids(s subject.Subject) []string {
	var out []string
	for _, c := range s.Commits {
		out = append(out, c.ID)
	}
	return out
}

func commitsFrom(from, to int) []string {
	var out []string
	for n := from; n <= to; n++ {
		out = append(out, commitN(n))
	}
	return out
}

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
	got := w.read(mergeRequestOf(250, 7), subject.CommitsInput|subject.PathsInput)
	if !got.Whole.Has(subject.AllInputs) || len(got.Unread) != 0 {
		t.Fatalf("whole %v, unread %+v", got.Whole, got.Unread)
	}
	if !slices.Equal(ids(got), commitsFrom(1, 250)) || got.Commits[0].Message != "Commit 1\n\nbody" {
		t.Fatalf("commits %v", ids(got)[:3])
	}
	if len(got.Paths) != 251 || !slices.Contains(got.Paths, "secrets/key.pem") || !slices.Contains(got.Paths, "docs/key.md") {
		t.Fatalf("%d paths", len(got.Paths))
	}
	reads := map[string]int{}
	for _, op := range []string{gitlabtest.OpGetMR, gitlabtest.OpMRDiffs, gitlabtest.OpMRCommits, gitlabtest.OpCompare, gitlabtest.OpGetProject} {
		reads[op] = w.gitlab.Requests(op)
	}
	want := map[string]int{gitlabtest.OpGetMR: 1, gitlabtest.OpMRDiffs: 3, gitlabtest.OpMRCommits: 3, gitlabtest.OpCompare: 0, gitlabtest.OpGetProject: 0}
	if !reflect.DeepEqual(reads, want) || got.Read[0] != "GitLab: commits, paths (7 requests)" {
		t.Fatalf("requests %v, want %v; read %q", reads, want, got.Read)
	}
	before := w.gitlab.AllRequests()
	if got := w.read(mergeRequestOf(250, 7), subject.CommitsInput); len(got.Commits) != 250 || w.gitlab.AllRequests()-before != 3 {
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
	got := w.read(mergeRequestOf(200, 7), subject.PathsInput)
	if got.Whole.Has(subject.PathsInput) || len(got.Paths) != 150 ||
		got.UnreadReason(subject.PathsInput) != "GitLab keeps 150+ files of the merge request's diff (the instance's maximum files or lines in a diff)" {
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
	for _, need := range []subject.Inputs{subject.PathsInput, subject.CommitsInput} {
		before := w.gitlab.Requests(gitlabtest.OpCompare)
		got := w.read(mergeRequestOf(2, 7), need|subject.CommitsInput)
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
	got := w.read(pushOf(0, 30, 20), subject.CommitsInput|subject.PathsInput)
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
	got := w.read(pushOf(0, 30, 20), subject.CommitsInput|subject.PathsInput)
	if !got.Whole.Has(subject.CommitsInput) || got.Whole.Has(subject.PathsInput) || len(got.Paths) != 10 ||
		!strings.HasPrefix(got.UnreadReason(subject.PathsInput), "GitLab's comparison overflowed its diff limits") {
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
	got := w.read(s, subject.CommitsInput|subject.PathsInput)
	if !slices.Equal(ids(got), commitsFrom(6, 30)) || len(got.Unread) != 0 || w.gitlab.Requests(gitlabtest.OpGetProject) != 1 {
		t.Fatalf("commits %v, unread %+v", ids(got), got.Unread)
	}
	s.Ref = "refs/heads/main"
	if got := w.read(s, subject.CommitsInput); got.Whole.Has(subject.CommitsInput) ||
		!strings.Contains(got.UnreadReason(subject.CommitsInput), "created the project's default branch") {
		t.Fatalf("whole %v, unread %+v", got.Whole, got.Unread)
	}
}

// A read GitLab refuses (401, 403 insufficient_scope, 404) marks the inputs unread, naming the
// scope to grant.
func TestARefusedReadNamesTheScopeToGrant(t *testing.T) {
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound} {
		w := newReadWorld(t)
		w.commits(1, 30, each)
		w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main", BaseSHA: commitN(0), HeadSHA: commitN(30)})
		w.gitlab.Answer = func(string, int) int { return code }
		got := w.read(mergeRequestOf(30, 7), subject.CommitsInput|subject.PathsInput)
		want := fmt.Sprintf("GitLab answered %d; grant the token the read_api scope, as a member who can read the project's code (Reporter)", code)
		if got.Whole.Has(subject.PathsInput) || got.UnreadReason(subject.PathsInput) != want || got.UnreadReason(subject.CommitsInput) != want {
			t.Fatalf("%d: whole %v, unread %+v", code, got.Whole, got.Unread)
		}
	}
}

// GitLab's outage (502, 503) or rate limit (429) while reading is Transient: retried, nothing
// marked unread.
func TestAnOutageWhileReadingIsTransient(t *testing.T) {
	for _, code := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		w := newReadWorld(t)
		w.commits(1, 30, each)
		w.gitlab.Answer = func(string, int) int { return code }
		got, err := w.reader.Read(context.Background(), pushOf(0, 30, 20), subject.PathsInput)
		if providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "reading from GitLab") || len(got.Unread) != 0 {
			t.Fatalf("%d: %v, unread %+v", code, err, got.Unread)
		}
	}
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
	w.gitlab.Answer = func(op string, _ int) int {
		if op == gitlabtest.OpCompare {
			return http.StatusForbidden // a Guest of a private project
		}
		return 0
	}
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
	got, err := w.reader.Read(context.Background(), mergeRequestOf(3, 7), subject.PathsInput)
	if providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "still preparing merge request !7's diff") ||
		len(got.Unread) != 0 || got.Whole.Has(subject.PathsInput) {
		t.Fatalf("%v; whole %v, unread %+v", err, got.Whole, got.Unread)
	}
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "t", Source: "changes", Target: "main",
		BaseSHA: commitN(0), HeadSHA: commitN(3)})
	if got := w.read(mergeRequestOf(3, 7), subject.PathsInput); !slices.Equal(got.Paths, []string{"secrets/key.pem"}) {
		t.Fatalf("once prepared: %v", got.Paths)
	}
}
