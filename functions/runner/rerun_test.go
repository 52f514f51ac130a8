package runner_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A Re-run evaluates the same commit with the same inputs: the runner reads what the re-run's
// webhook lacks from GitHub (a fake of its pull request and commit reads, checking every
// request against GitHub's API description) before the route's rules are evaluated, and the
// verdict is a check run as for the event re-run.

// baseSHA is the commit the fixtures' check suite names as its before.
const baseSHA = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"

// forbiddenPaths is a route's rules: a title of the conventional form, no secrets.
func forbiddenPaths(t *testing.T) evaluate.Evaluator {
	t.Helper()
	r, err := evaluate.NewRules(config.Rules{PullRequestTitle: `^feat: `, ForbiddenPaths: []string{"secrets/**"}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rerunWorld is a checksWorld whose routes read re-runs' inputs from a History.
type rerunWorld struct {
	*checksWorld
	history *githubtest.GitHub
	hsrv    *httptest.Server
}

func newRerunWorld(t *testing.T) *rerunWorld {
	t.Helper()
	w := &rerunWorld{checksWorld: newChecksWorld(t, githubtest.New(nil)), history: githubtest.New(nil)}
	w.hsrv = httptest.NewServer(w.history)
	t.Cleanup(w.hsrv.Close)
	// The commit the re-runs are of: it moves secrets/ into docs/ unless a test says otherwise.
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: baseSHA, Message: "Add the thing",
		Files: []githubtest.ChangedFile{{Filename: "src/thing.go", Status: "added"}}})
	return w
}

// rerunRunner is a runner publishing check runs with ev, reading re-runs' inputs as the
// wiring does for a route with a GitHub App.
func (w *rerunWorld) rerunRunner(ev evaluate.Evaluator) *runner.Runner {
	r := w.checksRunner("a", ev, 5*time.Second)
	reader := github.NewInstallationClient(w.hsrv.URL, oneToken{}, w.hsrv.Client())
	reader.Sleep = func(context.Context, time.Duration) error { return nil }
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		route, err := routes(ctx, name)
		if err == nil {
			route.Inputs = reader
		}
		return route, err
	}
	return r
}

// rerun admits GitHub's check_run (or check_suite) "rerequested" webhook of the fixture,
// read as the ingress reads it, for the world's commit.
func (w *rerunWorld) rerun(event string) queue.Message {
	w.t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "change", "testdata", "github", event+"_rerequested.json"))
	if err != nil {
		w.t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-GitHub-Event", event)
	s, err := only(provider.Extract("github", h, body))
	if err != nil || s.Event != change.Rerun || s.Before != baseSHA {
		w.t.Fatalf("re-run change %+v %v", s, err)
	}
	s.Repository, s.SHA = commitRepo, headSHA
	return w.admitChange(s, string(body), time.Time{})
}

// pullRequest makes the commit the head of the fixture's pull request #2, changing files.
func (w *rerunWorld) pullRequest(title string, files ...string) {
	var changed []githubtest.ChangedFile
	for _, f := range files {
		changed = append(changed, githubtest.ChangedFile{Filename: f, Status: "added"})
	}
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: baseSHA, Message: "Add the thing", Files: changed})
	w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 2, Title: title, Base: "main", Head: "changes",
		BaseSHA: baseSHA, HeadSHA: headSHA})
}

// latest is the check run the commit shows, after checking every request to GitHub.
func (w *rerunWorld) latest(m queue.Message, wantConclusion string) githubtest.CheckRun {
	w.t.Helper()
	if v := w.history.Violations(); len(v) > 0 {
		w.t.Fatalf("reads outside GitHub's API description: %v", v)
	}
	w.checkRuns(wantConclusion, m, 1)
	run, _ := w.checks.LatestRun(commitRepo, headSHA, statusCtx)
	return run
}

// A Re-run of a pull request whose files hold a forbidden path fails, annotating the file.
func TestARerunOfAPullRequestChangingAForbiddenPathFailsAnnotatingIt(t *testing.T) {
	w := newRerunWorld(t)
	w.pullRequest("feat: add the thing", "src/thing.go", "secrets/key.pem")
	m := w.rerun("check_run")
	w.process(w.rerunRunner(forbiddenPaths(t)), m)
	run := w.latest(m, "failure")
	if !strings.Contains(run.Summary, "forbidden path secrets/key.pem") || len(run.Annotations) != 1 ||
		run.Annotations[0].Path != "secrets/key.pem" {
		t.Fatalf("check run %+v", run)
	}
}

// A Re-run of a clean pull request succeeds: its title, files and commits are read, and every
// rule holds (its webhook alone would fail the title and paths rules closed).
func TestARerunOfACleanPullRequestSucceeds(t *testing.T) {
	w := newRerunWorld(t)
	w.pullRequest("feat: add the thing", "src/thing.go")
	m := w.rerun("check_run")
	w.process(w.rerunRunner(forbiddenPaths(t)), m)
	if run := w.latest(m, "success"); run.Title != "All rules hold" {
		t.Fatalf("check run %+v", run)
	}
	if w.history.Requests(githubtest.OpListPullFiles) == 0 {
		t.Fatal("the pull request's files were not read")
	}
}

// A Re-run of a push (a check suite no pull request heads) is evaluated on the push's
// comparison, from the suite's before to the commit.
func TestARerunOfAPushIsEvaluatedOnThePushsComparison(t *testing.T) {
	w := newRerunWorld(t)
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: baseSHA, Message: "Add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/deploy.pem", Status: "added"}}})
	m := w.rerun("check_suite")
	w.process(w.rerunRunner(forbiddenPaths(t)), m)
	run := w.latest(m, "failure")
	if len(run.Annotations) != 1 || run.Annotations[0].Path != "secrets/deploy.pem" || w.history.Requests(githubtest.OpCompareCommits) == 0 {
		t.Fatalf("check run %+v; %d comparisons", run, w.history.Requests(githubtest.OpCompareCommits))
	}
}

// An App without Contents: read cannot read a push: the re-run fails closed, its check run
// naming the permission to grant.
func TestARerunWithoutTheContentsPermissionFailsClosedNamingIt(t *testing.T) {
	w := newRerunWorld(t)
	w.history.Answer = func(op string, _ int) int {
		if op == githubtest.OpCompareCommits || op == githubtest.OpGetCommit {
			return http.StatusForbidden
		}
		return 0
	}
	m := w.rerun("check_suite")
	w.process(w.rerunRunner(forbiddenPaths(t)), m)
	if run := w.latest(m, "failure"); !strings.Contains(run.Summary, "changed paths") || !strings.Contains(run.Summary, "Contents: read") {
		t.Fatalf("check run %+v", run)
	}
}

// GitHub's outage while the inputs are read (502) ends the attempt like an evaluation failure:
// released, nothing published, and retried; the next attempt reads them and publishes.
func TestARerunDuringGitHubsOutageIsReleasedAndRetried(t *testing.T) {
	w := newRerunWorld(t)
	w.pullRequest("feat: add the thing", "src/thing.go")
	var outage atomic.Bool
	outage.Store(true)
	w.history.Answer = func(string, int) int {
		if outage.Load() {
			return http.StatusBadGateway
		}
		return 0
	}
	m := w.rerun("check_run")
	r := w.rerunRunner(forbiddenPaths(t))
	res, _ := r.Process(context.Background(), m)
	if res.Done || len(w.checks.Runs(commitRepo, headSHA)) != 0 {
		t.Fatalf("an attempt that could not read the inputs: %+v, check runs %+v", res, w.checks.Runs(commitRepo, headSHA))
	}
	if row := w.row(m); row.State != ledger.StatePending {
		t.Fatalf("row after the outage: %v, want pending (released for a later attempt)", row.State)
	}
	outage.Store(false)
	w.process(r, m)
	w.latest(m, "success")
}

// A fork's pull request whose first commit adds a forbidden file and whose head only edits
// the README: its Re-run (a check run naming no pull request, its external_id the pull
// request's delivery) gives the verdict the pull request got, on a route whose rules need
// only the changed paths (no title rule asks which pull request the commit heads), whether the
// re-run's check suite names the push that made the head or none.
func TestAForkRerunOnARouteOfPathsRulesGivesThePullRequestsVerdict(t *testing.T) {
	const secretSHA = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"
	paths, err := evaluate.NewRules(config.Rules{ForbiddenPaths: []string{"secrets/**"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, before := range []string{secretSHA, ""} {
		w := newRerunWorld(t)
		w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: secretSHA, Parent: baseSHA, Message: "Add the key",
			Files: []githubtest.ChangedFile{{Filename: "secrets/key.pem", Status: "added"}}})
		w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: secretSHA, Message: "Edit the README",
			Files: []githubtest.ChangedFile{{Filename: "README.md", Status: "modified"}}})
		w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 2, Title: "feat: a fork's change", Base: "main", Head: "changes",
			BaseSHA: baseSHA, HeadSHA: headSHA})
		r := w.rerunRunner(paths)
		pr := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
			Pull:  &change.Pull{Number: 2, Title: "feat: a fork's change", TargetBranch: "main", SourceBranch: "changes"},
			Whole: change.TitleInput | change.PullInput, Installation: appInstallation}, "pull_request", epoch.Add(-time.Minute))
		w.process(r, pr)
		if run := w.latest(pr, "failure"); !strings.Contains(run.Summary, "secrets/key.pem") {
			t.Fatalf("the pull request's check run %+v", run)
		}
		w.clock.Advance(time.Minute) // a user presses Re-run on it
		fork := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.Rerun,
			Before: before, RerunOf: pr.Key.String(), Installation: appInstallation}, "rerun "+before, time.Time{})
		w.process(r, fork)
		if v := w.history.Violations(); len(v) > 0 {
			t.Fatalf("reads outside GitHub's API description: %v", v)
		}
		w.checkRuns("failure", fork, 2)
	}
}

// A Re-run of a push's check run is evaluated on the push's own inputs: the commits and paths
// its webhook listed whole are taken from its delivery, as the push's verdict saw them, with
// nothing read. The first push of a repository's default branch (no before) adds a forbidden
// file in its first commit and edits the README in its head: its Re-run fails as it did.
func TestARerunOfAPushsCheckRunSeesThePushsInputs(t *testing.T) {
	const firstSHA = "f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1"
	paths, err := evaluate.NewRules(config.Rules{ForbiddenPaths: []string{"secrets/**"}, CommitMessage: "^[A-Z]"})
	if err != nil {
		t.Fatal(err)
	}
	w := newRerunWorld(t)
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: firstSHA, Message: "Add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/key.pem", Status: "added"}}})
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: firstSHA, Message: "Edit the README",
		Files: []githubtest.ChangedFile{{Filename: "README.md", Status: "modified"}}})
	w.history.SetBranch(commitRepo, "main", headSHA)
	r := w.rerunRunner(paths)
	push := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Ref: "refs/heads/main", Event: change.Push,
		Commits: []change.Commit{{ID: firstSHA, Message: "Add the key"}, {ID: headSHA, Message: "Edit the README"}},
		Paths:   []string{"secrets/key.pem", "README.md"}, Whole: change.AllInputs, Installation: appInstallation}, "push", epoch.Add(-time.Minute))
	w.process(r, push)
	first := w.latest(push, "failure")
	w.clock.Advance(time.Minute) // a user presses Re-run on its check run
	rerun := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Ref: "refs/heads/main",
		Event: change.Rerun, RerunOf: push.Key.String(), Installation: appInstallation}, "rerun", time.Time{})
	w.process(r, rerun)
	w.checkRuns("failure", rerun, 2)
	again, _ := w.checks.LatestRun(commitRepo, headSHA, statusCtx)
	if again.Summary != first.Summary {
		t.Fatalf("the re-run's check run says %q, the push's %q", again.Summary, first.Summary)
	}
	for _, op := range []string{githubtest.OpCompareCommits, githubtest.OpGetCommit, githubtest.OpGetRepo} {
		if n := w.history.Requests(op); n != 0 {
			t.Fatalf("%d requests of %s: the push's delivery held what the rules need", n, op)
		}
	}
}

// A pull request's event is evaluated on the title its webhook carried: the read of its files
// does not replace it with the title GitHub's API answers, which may be one the event changed
// (a replica behind the edit). An edit to "WIP: add the thing" fails the title rule even when
// the API still shows "feat: add the thing".
func TestAPullRequestsEventIsEvaluatedOnItsOwnTitle(t *testing.T) {
	w := newRerunWorld(t)
	w.pullRequest("feat: add the thing", "src/thing.go")
	r := w.rerunRunner(forbiddenPaths(t))
	edit := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull:  &change.Pull{Number: 2, Title: "WIP: add the thing", TargetBranch: "main", SourceBranch: "changes"},
		Whole: change.TitleInput | change.PullInput, Installation: appInstallation}, "edited", epoch.Add(-time.Minute))
	w.process(r, edit)
	if run := w.latest(edit, "failure"); !strings.Contains(run.Summary, "pull request title") {
		t.Fatalf("check run %+v", run)
	}
}

// A commit may head two pull requests (one to main, one to a release branch): its check run's
// Re-run lists both, and is evaluated for the one the check run was published for, not the
// first GitHub lists. Pull request #3 follows the title rule, #2 (listed first) does not: a
// Re-run of #3's check run succeeds as #3's did. An evaluator that names no inputs it needs (a
// route's HTTP evaluator) is given #3 too, with its own target branch. Once the commit no
// longer heads #3 (closed, or pushed to), its check run's Re-run lists #2 alone and is
// evaluated for #2.
func TestARerunOfACommitHeadingTwoPullRequestsIsForItsCheckRunsOwn(t *testing.T) {
	var evaluatedFor []string
	external := evalFunc(func(_ context.Context, s change.Change) (evaluate.Verdict, error) {
		if s.Pull != nil {
			evaluatedFor = append(evaluatedFor, fmt.Sprintf("#%d to %s", s.Pull.Number, s.Pull.TargetBranch))
		}
		return evaluate.Verdict{State: "success", Description: "seen"}, nil
	})
	two, one := listedTwoThree, `[{"number":2,"head":{"ref":"changes"},"base":{"ref":"main"}}]`
	for _, c := range []struct {
		name    string
		ev      evaluate.Evaluator
		listed  string
		want    string   // the re-run's conclusion
		wantFor []string // the pull requests the external evaluator was given
	}{
		{"the rules, both listed", forbiddenPaths(t), two, "success", nil},
		{"an HTTP evaluator, both listed", external, two, "success", []string{"#3 to release", "#3 to release"}},
		{"the rules, #3 no longer listed", forbiddenPaths(t), one, "failure", nil},
		{"an HTTP evaluator, #3 no longer listed", external, one, "success", []string{"#3 to release", "#2 to main"}},
	} {
		evaluatedFor = nil
		w := newRerunWorld(t)
		w.pullRequest("WIP: the thing", "src/thing.go") // #2, heading the commit
		w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 3, Title: "feat: the thing", Base: "release", Head: "changes",
			BaseSHA: baseSHA, HeadSHA: headSHA})
		r := w.rerunRunner(c.ev)
		pr := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
			Pull:  &change.Pull{Number: 3, Title: "feat: the thing", TargetBranch: "release", SourceBranch: "changes"},
			Whole: change.TitleInput | change.PullInput, Installation: appInstallation}, "pull_request 3", epoch.Add(-time.Minute))
		w.process(r, pr)
		w.latest(pr, "success")

		w.clock.Advance(time.Minute) // a user presses Re-run on #3's check run
		rerun := w.checkRunRerun(pr, c.listed)
		w.process(r, rerun)
		w.checkRuns(c.want, rerun, 2)
		if c.wantFor != nil && !slices.Equal(evaluatedFor, c.wantFor) {
			t.Errorf("%s: the evaluator was given pull requests %v, want %v", c.name, evaluatedFor, c.wantFor)
		}
	}
}
