package gitea_test

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
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What a webhook's missing inputs are read as, from the fake of Gitea, which checks every
// request against Gitea's API description.

const readRepo = "acme/app"

// commitN is a made-up commit hash numbered n.
var commitN = providerapitest.CommitN

// readWorld is a fake Gitea holding a repository's history, and a client reading from it.
type readWorld struct {
	t      *testing.T
	gitea  *giteatest.Gitea
	srv    *httptest.Server
	reader *gitea.Client
}

func newReadWorld(t *testing.T) *readWorld {
	t.Helper()
	g := giteatest.New(func(tok string) bool { return tok == "rt" })
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	r := gitea.NewClient(srv.URL, "rt", srv.Client())
	r.Sleep = func(context.Context, time.Duration) error { return nil }
	return &readWorld{t: t, gitea: g, srv: srv, reader: r}
}

// commits adds a line of commits from commitN(from) to commitN(to) on commitN(from-1), each
// changing the files files gives it.
func (w *readWorld) commits(from, to int, files func(n int) []giteatest.File) {
	for n := from; n <= to; n++ {
		w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(n), Parent: commitN(n - 1), Message: fmt.Sprintf("Commit %d", n), Files: files(n)})
	}
}

func modified(paths ...string) func(int) []giteatest.File {
	return func(int) []giteatest.File {
		var out []giteatest.File
		for _, p := range paths {
			out = append(out, giteatest.File{Filename: p, Status: "modified"})
		}
		return out
	}
}

// each gives commit n its own file, f<n>.go.
func each(n int) []giteatest.File {
	return []giteatest.File{{Filename: fmt.Sprintf("f%d.go", n), Status: "added"}}
}

// read reads need of s, failing on an error or a request outside Gitea's description.
func (w *readWorld) read(s change.Change, need change.Inputs) change.Change {
	w.t.Helper()
	return w.reads().Must(s, need)
}

// reads is the client reading from the fake, failing on a request outside Gitea's API description.
func (w *readWorld) reads() providerapitest.Reader {
	return providerapitest.Reader{T: w.t, Read: w.reader.Read, Violations: w.gitea.Violations, API: "Gitea's API description"}
}

func pullOf(head, number int) change.Change {
	return change.Change{Provider: "gitea", Repository: readRepo, SHA: commitN(head), Event: change.PullRequest,
		Ref: "refs/heads/changes", Whole: change.TitleInput | change.PullInput,
		Pull: &change.Pull{Number: number, Title: "feat: the webhook's title", TargetBranch: "main", SourceBranch: "changes"}}
}

func pushOf(before, head, listed int) change.Change {
	return providerapitest.PushOf("gitea", readRepo, before, head, listed, func(n int) string { return fmt.Sprintf("Commit %d", n) })
}

var ids = providerapitest.IDs

var commitsFrom = providerapitest.CommitsFrom

// A pull request's files and commits are read whole, every page (Gitea serves 50 a page),
// commits oldest first, a renamed file's old path too; the pull request itself is read first,
// and nothing else.
func TestAPullRequestsFilesAndCommitsAreReadEveryPage(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 119, each)
	w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(120), Parent: commitN(119), Message: "Move the key",
		Files: []giteatest.File{{Filename: "docs/key.md", Status: "renamed", PreviousFilename: "secrets/key.pem"}}})
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "feat: move the key", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(120)})
	var paths []string
	for n := 1; n <= 119; n++ {
		paths = append(paths, fmt.Sprintf("f%d.go", n))
	}
	paths = append(paths, "secrets/key.pem", "docs/key.md")
	got := providerapitest.CheckAPullRequestIsReadWhole(t, pullOf(120, 4), w.reads().Inputs, paths, commitsFrom(1, 120), ids,
		"Gitea: commits, paths (7 requests)", map[string]int{giteatest.OpGetPull: 1, giteatest.OpPullFiles: 3, giteatest.OpPullCommits: 3,
			giteatest.OpCompare: 0, giteatest.OpGetRepo: 0}, w.gitea.Requests)
	if len(got.Commits) != 120 || got.Commits[119].Message != "Move the key" {
		t.Fatalf("commits %v", ids(got))
	}
	if got.Pull.Title != "feat: the webhook's title" {
		t.Fatalf("title %q, want the webhook's, held whole", got.Pull.Title)
	}
}

// A server serving fewer entries a page than asked is read to its end all the same.
func TestAServerServingSmallerPagesIsReadToTheEnd(t *testing.T) {
	w := newReadWorld(t)
	w.gitea.MaxItems = 20
	w.commits(1, 45, each)
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(45)})
	got := w.read(pullOf(45, 4), change.CommitsInput|change.PathsInput)
	if len(got.Paths) != 45 || len(got.Commits) != 45 || len(got.Unread) != 0 || w.gitea.Requests(giteatest.OpPullFiles) != 3 {
		t.Fatalf("%d paths, %d commits, unread %+v, %d pages", len(got.Paths), len(got.Commits), got.Unread, w.gitea.Requests(giteatest.OpPullFiles))
	}
}

// A pull request whose head is no longer the commit (a push since the webhook) is read as the
// comparison of its target branch with the commit: its files describe another commit.
func TestAPullRequestThatMovedOnIsReadAsItsTargetsComparison(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 2, modified("src/a.go"))
	w.commits(3, 3, modified("secrets/later.pem"))
	w.gitea.SetBranch(readRepo, "main", commitN(0))
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(3)})
	providerapitest.CheckAPullRequestThatMovedOnIsReadAtItsCommit(t, pullOf(2, 4), w.reads().Inputs, []string{"src/a.go"}, commitsFrom(1, 2), ids,
		func() int { return w.gitea.Requests(giteatest.OpPullFiles) + w.gitea.Requests(giteatest.OpPullCommits) })
	if n := w.gitea.Requests(giteatest.OpCompare); n != 1 {
		t.Fatalf("%d comparisons, want 1", n)
	}
}

// A push landing on the pull request while its files are read (between two pages) leaves the
// listing describing another head: it is dropped, and the comparison with the commit read.
func TestAPullRequestMovingOnWhileItsFilesAreReadIsReadAsTheComparison(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 60, each)
	w.commits(61, 61, modified("secrets/later.pem"))
	w.gitea.SetBranch(readRepo, "main", commitN(0))
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(60)})
	w.srv.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.gitea.ServeHTTP(rw, r)
		if strings.HasSuffix(r.URL.Path, "/files") && r.URL.Query().Get("page") == "1" {
			w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(61)})
		}
	})
	got := w.read(pullOf(60, 4), change.PathsInput)
	if len(got.Paths) != 60 || slices.Contains(got.Paths, "secrets/later.pem") || len(got.Unread) != 0 {
		t.Fatalf("%d paths (secrets/later.pem: %v), unread %+v", len(got.Paths), slices.Contains(got.Paths, "secrets/later.pem"), got.Unread)
	}
	if w.gitea.Requests(giteatest.OpCompare) != 1 {
		t.Fatalf("%d comparisons", w.gitea.Requests(giteatest.OpCompare))
	}
}

// A push whose webhook listed part of its commits is read as the comparison before...sha: every
// commit, oldest first, and every file each changes (a rename names both paths).
func TestAPushIsReadAsItsComparison(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 6, each)
	w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(7), Parent: commitN(6), Message: "Move",
		Files: []giteatest.File{{Filename: "b.go", Status: "renamed", PreviousFilename: "a.go"}}})
	got := w.read(pushOf(0, 7, 5), change.CommitsInput|change.PathsInput)
	if !slices.Equal(ids(got), commitsFrom(1, 7)) || len(got.Unread) != 0 {
		t.Fatalf("commits %v, unread %+v", ids(got), got.Unread)
	}
	want := []string{"f1.go", "f2.go", "f3.go", "f4.go", "f5.go", "f6.go", "a.go", "b.go"}
	if !slices.Equal(got.Paths, want) {
		t.Fatalf("paths %v, want %v", got.Paths, want)
	}
}

// A new branch's push (no before) is read as what it adds to the default branch; a push that
// created the default branch itself names no start: its commits and paths are unread, and
// the rules that need them fail closed.
func TestANewBranchIsReadAgainstTheDefaultBranch(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 8, each)
	w.gitea.SetBranch(readRepo, "main", commitN(2))
	s := pushOf(-1, 8, 5)
	s.Ref = "refs/heads/feature"
	first := s
	first.Ref = "refs/heads/main"
	providerapitest.CheckANewBranchIsReadAgainstTheDefaultBranch(t, w.reads().Inputs, s,
		[]string{"f3.go", "f4.go", "f5.go", "f6.go", "f7.go", "f8.go"}, commitsFrom(3, 8), ids,
		func() int { return w.gitea.Requests(giteatest.OpGetRepo) }, first, change.PathsInput, "created the repository's default branch")
}

// A comparison from a Gitea that lists no files of its commits gives the commits whole and
// the paths unread, saying so.
func TestAComparisonWithoutFilesLeavesThePathsUnread(t *testing.T) {
	w := newReadWorld(t)
	w.gitea.CompareWithoutFiles = true
	w.commits(1, 7, each)
	got := w.read(pushOf(0, 7, 5), change.CommitsInput|change.PathsInput)
	if !got.Whole.Has(change.CommitsInput) || got.Whole.Has(change.PathsInput) ||
		!strings.Contains(got.UnreadReason(change.PathsInput), "does not list the files of every commit") {
		t.Fatalf("whole %v, unread %+v", got.Whole, got.Unread)
	}
}

// A pull request with more files than amiss reads is read to the bound; the paths are unread,
// naming it, and a forbidden path among those read is still there to fail the rule.
func TestAPullRequestBeyondTheBoundIsNotHeldWhole(t *testing.T) {
	w := newReadWorld(t)
	w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(1), Parent: commitN(0), Message: "Many", Files: func() []giteatest.File {
		var out []giteatest.File
		for n := range gitea.MaxReadFiles + 1 {
			out = append(out, giteatest.File{Filename: fmt.Sprintf("f%04d", n), Status: "added"})
		}
		return out
	}()})
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(1)})
	got := w.read(pullOf(1, 4), change.PathsInput)
	if got.Whole.Has(change.PathsInput) || len(got.Paths) != gitea.MaxReadFiles ||
		got.UnreadReason(change.PathsInput) != "the pull request has 3001 files; amiss reads at most 3000" {
		t.Fatalf("whole %v, %d paths, unread %+v", got.Whole, len(got.Paths), got.Unread)
	}
}

// A read Gitea refuses (a token without read:repository: 403; a repository it cannot see:
// 404; a token it does not know: 401) marks the inputs unread, naming the scope to grant.
func TestARefusedReadNamesTheScopeToGrant(t *testing.T) {
	need := change.CommitsInput | change.PathsInput
	providerapitest.CheckARefusedReadFailsItsInputsClosed(t, []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}, need,
		func(code int) (change.Change, error) {
			w := newReadWorld(t)
			w.commits(1, 7, each)
			w.gitea.Answer = providerapitest.Refuse(code)
			return w.reads().Inputs(pushOf(0, 7, 5), need)
		}, func(code int, why string) bool {
			return why == fmt.Sprintf("Gitea answered %d; grant the token the read:repository scope, as a user who can read the repository", code)
		})
	w := newReadWorld(t)
	w.reader = gitea.NewClient(w.srv.URL, "not-the-token", w.srv.Client())
	s := pushOf(0, 7, 5)
	s.Provider = "forgejo"
	if got := w.read(s, change.PathsInput); !strings.HasPrefix(got.UnreadReason(change.PathsInput), "Forgejo answered 401; grant the token the read:repository scope") {
		t.Fatalf("unread %+v", got.Unread)
	}
}

// Gitea's outage (a 502, a 503, a 429) while reading is Transient: the attempt is retried, and
// nothing is marked unread.
func TestAnOutageWhileReadingIsTransient(t *testing.T) {
	providerapitest.CheckAnOutageWhileReadingIsTransient(t, "Gitea", pushOf(0, 7, 5), func(code int, s change.Change) (change.Change, error) {
		w := newReadWorld(t)
		w.commits(1, 7, each)
		w.gitea.Answer = providerapitest.Refuse(code)
		return w.reads().Inputs(s, change.PathsInput)
	})
}

// A title the change does not hold whole (cut by its bound) is read from the pull request.
func TestATitleIsReadFromThePullRequest(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 1, each)
	long := strings.Repeat("t", change.MaxTitleBytes+10)
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: long, Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(1)})
	s := pullOf(1, 4)
	s.Whole = change.PullInput
	got := w.read(s, change.TitleInput)
	if got.Pull.Title != long || !got.Whole.Has(change.TitleInput) || w.gitea.AllRequests() != 1 {
		t.Fatalf("title of %d bytes, whole %v, %d requests", len(got.Pull.Title), got.Whole, w.gitea.AllRequests())
	}
}

// CheckRead reads the repository and posts nothing: nil for a token that may read it, the
// refusal otherwise.
func TestCheckReadReadsTheRepository(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 1, each)
	if err := w.reader.CheckRead(context.Background(), readRepo); err != nil {
		t.Fatal(err)
	}
	w.gitea.Answer = providerapitest.Refuse(http.StatusForbidden)
	var refused *gitea.Refused
	if err := w.reader.CheckRead(context.Background(), readRepo); err == nil || !errors.As(err, &refused) {
		t.Fatalf("a token without the scope: %v", err)
	}
	if w.gitea.Requests(giteatest.OpCreateStatus) != 0 || len(w.gitea.Violations()) != 0 {
		t.Fatalf("posted %d, violations %v", w.gitea.Requests(giteatest.OpCreateStatus), w.gitea.Violations())
	}
}

// The title and branches a pull request's webhook carried whole are the event's: a read of the
// files and commits never replaces them with what the API answers (which may be older than the
// event, or newer: another event's, whose own verdict follows).
func TestReadingAPullRequestKeepsWhatItsWebhookCarried(t *testing.T) {
	w := newReadWorld(t)
	w.commits(1, 2, each)
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "feat: the title before the edit", Base: "develop", Head: "changes",
		BaseSHA: commitN(0), HeadSHA: commitN(2)})
	providerapitest.CheckReadingAPullRequestKeepsWhatItsWebhookCarried(t, pullOf(2, 4), w.reads().Inputs)
}

// stripped serves h through a proxy that drops the named headers from every answer.
func stripped(h http.Handler, drop ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			if !slices.Contains(drop, http.CanonicalHeaderKey(k)) {
				w.Header()[k] = vs
			}
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// Behind a proxy that drops the paging headers (Link, X-Total-Count), a listing's first page
// says nothing of what follows: the next pages are read until one is empty, never the first
// taken as the whole list. A listing read to amiss's bound with no count to say whether it
// ended there is not held whole.
func TestAListingWhosePagingHeadersAreDroppedIsReadToItsEnd(t *testing.T) {
	g := giteatest.New(func(tok string) bool { return tok == "rt" })
	srv := httptest.NewServer(stripped(g, "Link", "X-Total-Count"))
	t.Cleanup(srv.Close)
	w := &readWorld{t: t, gitea: g, srv: srv, reader: gitea.NewClient(srv.URL, "rt", srv.Client())}
	w.commits(1, 119, each)
	w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(120), Parent: commitN(119), Message: "Add the key",
		Files: []giteatest.File{{Filename: "secrets/key.pem", Status: "added"}}})
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 4, Title: "t", Base: "main", Head: "changes", BaseSHA: commitN(0), HeadSHA: commitN(120)})
	got := w.read(pullOf(120, 4), change.CommitsInput|change.PathsInput)
	if !got.Whole.Has(change.AllInputs) || len(got.Paths) != 120 || !slices.Contains(got.Paths, "secrets/key.pem") || len(got.Commits) != 120 {
		t.Fatalf("whole %q, %d paths, %d commits, unread %+v", got.Whole, len(got.Paths), len(got.Commits), got.Unread)
	}

	var many []giteatest.File
	for i := 0; i < gitea.MaxReadFiles+10; i++ {
		many = append(many, giteatest.File{Filename: fmt.Sprintf("many/f%d.go", i), Status: "added"})
	}
	w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(200), Parent: commitN(0), Message: "Many files", Files: many})
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 5, Title: "t", Base: "main", Head: "many", BaseSHA: commitN(0), HeadSHA: commitN(200)})
	got = w.read(pullOf(200, 5), change.PathsInput)
	if got.Whole.Has(change.PathsInput) || len(got.Paths) < gitea.MaxReadFiles {
		t.Fatalf("a pull request of more files than amiss reads, counted by nothing: whole %q, %d paths", got.Whole, len(got.Paths))
	}
}

// An answer longer than amiss reads of one leaves its input unread, without a retry.
func TestAnAnswerLongerThanAmissReadsLeavesItsInputUnread(t *testing.T) {
	s := change.Change{Provider: "gitea", Repository: "acme/app", SHA: strings.Repeat("b", 40), Event: change.Push,
		Ref: "refs/heads/main", Before: strings.Repeat("a", 40)}
	providerapitest.CheckAnAnswerPastItsBoundLeavesThePathsUnread(t, func(u string, hc *http.Client) (change.Change, error) {
		return gitea.NewClient(u, "rt", hc).Read(context.Background(), s, change.PathsInput)
	})
}

// A push whose webhook listed its commits whole has only its paths read: the comparison gives
// them, and the webhook's commits stay as they were, not listed twice.
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

// Gitea's comparison lists each commit with its files against its first parent: their union is
// what a push changes on its branch only along the branch's first parents. Commit 0 added
// secrets/prod.pem, commit 1 (main, the push's before) removed it; commit 2 is on commit 0.
//   - a merge into the branch (first parent main) is read whole, the merged commit's own files
//     (a key commit 2 adds) among its paths;
//   - a merge of main into commit 2 taking commit 2's tree ("git merge -s ours"), onto which main
//     fast-forwards, restores the key no commit lists: its paths are unread;
//   - main forced back to commit 0, or to commit 2, drops commit 1 and restores the key: its
//     paths name it, read from the comparison of what it drops, whose commits are not its own.
func TestAPushIsReadAlongItsBranchsFirstParents(t *testing.T) {
	for _, c := range []struct {
		name    string
		merge   *giteatest.Commit
		head    int
		paths   []string // nil: unread
		commits []string
	}{
		{"a merge into the branch", &giteatest.Commit{SHA: commitN(3), Parent: commitN(1), Merged: []string{commitN(2)}, Message: "Merge",
			Files: []giteatest.File{{Filename: "secrets/key.pem", Status: "added"}, {Filename: "secrets/prod.pem", Status: "added"}}},
			3, []string{"secrets/key.pem", "secrets/prod.pem"}, []string{commitN(2), commitN(3)}},
		{"a merge of the branch into an older line", &giteatest.Commit{SHA: commitN(3), Parent: commitN(2), Merged: []string{commitN(1)},
			Message: "Merge branch 'main'"}, 3, nil, []string{commitN(2), commitN(3)}},
		{"forced back", nil, 0, []string{"secrets/prod.pem"}, nil},
		{"forced onto a rewritten commit", nil, 2, []string{"secrets/key.pem", "secrets/prod.pem"}, []string{commitN(2)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newReadWorld(t)
			w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(0), Message: "Root", Files: []giteatest.File{{Filename: "secrets/prod.pem", Status: "added"}}})
			w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(1), Parent: commitN(0), Message: "Remove the key",
				Files: []giteatest.File{{Filename: "secrets/prod.pem", Status: "deleted"}}})
			w.gitea.AddCommit(readRepo, giteatest.Commit{SHA: commitN(2), Parent: commitN(0), Message: "Add a key",
				Files: []giteatest.File{{Filename: "secrets/key.pem", Status: "added"}}})
			if c.merge != nil {
				w.gitea.AddCommit(readRepo, *c.merge)
			}
			s := pushOf(1, c.head, 0)
			got := w.read(s, change.CommitsInput|change.PathsInput)
			if !slices.Equal(ids(got), c.commits) || !got.Whole.Has(change.CommitsInput) {
				t.Fatalf("commits %v (whole %q), want %v", ids(got), got.Whole, c.commits)
			}
			if c.paths == nil {
				if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "first parent") {
					t.Fatalf("whole %q, unread %+v, paths %v: want the paths unread, naming the first parents", got.Whole, got.Unread, got.Paths)
				}
				return
			}
			if !got.Whole.Has(change.PathsInput) || !slices.Equal(got.Paths, c.paths) {
				t.Fatalf("whole %q, unread %+v, paths %v, want %v", got.Whole, got.Unread, got.Paths, c.paths)
			}
		})
	}
}

// The paths a push's webhook listed are kept beside what a read of its paths gives, so that a
// forbidden one is named even when the read leaves them unread.
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
