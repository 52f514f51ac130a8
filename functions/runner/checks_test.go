package runner_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// What stands on the commit when verdicts are check runs: the ordering rules of the statuses'
// scenarios (standing_test.go) hold for the check-run publisher, and a re-run is a newer
// verdict with a check run of its own. The provider is a fake of GitHub's checks API that
// checks every request against GitHub's API description.

// appInstallation is the installation the deliveries' webhooks name.
const appInstallation = 2311213

// oneToken is an App's installation tokens: one token per installation, never refused.
type oneToken struct{}

func (oneToken) Token(context.Context, int64) (github.InstallationToken, error) {
	return github.InstallationToken{Value: "installation-token"}, nil
}
func (oneToken) Forget(int64, string) {}

// checksWorld is a commitWorld whose routes publish check runs to a checks fake.
type checksWorld struct {
	*commitWorld
	checks *githubtest.GitHub
	srv    *httptest.Server
}

func newChecksWorld(t *testing.T, checks *githubtest.GitHub) *checksWorld {
	t.Helper()
	w := &checksWorld{commitWorld: newCommitWorld(t, githubtest.New(githubtest.Token(ghToken))), checks: checks}
	w.srv = httptest.NewServer(checks)
	t.Cleanup(w.srv.Close)
	return w
}

// checksRunner is a runner over the world's ledger publishing check runs with ev.
func (w *checksWorld) checksRunner(owner string, ev evaluate.Evaluator, timeout time.Duration) *runner.Runner {
	hc := *w.srv.Client()
	hc.Timeout = timeout
	pub := publish.NewGitHubChecks(w.srv.URL, oneToken{}, &hc)
	pub.Sleep = func(context.Context, time.Duration) error { return nil }
	return &runner.Runner{Ledger: w.l, Owner: owner, Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond,
		RetryDelay: time.Second, Now: w.clock.Now,
		Routes: func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: ev, Publisher: pub, Context: statusCtx, Destination: provider.GitHubChecks + " " + w.srv.URL,
				Timeout: timeout, Settle: time.Minute}, nil
		}}
}

// admitChange admits s (from an App's installation) with the body time at (zero: none, as
// for a re-run) and returns its queue message.
func (w *checksWorld) admitChange(s change.Change, body string, at time.Time) queue.Message {
	w.t.Helper()
	b, _ := json.Marshal(s)
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: ledger.SumBody([]byte(body)).String(),
		BodyDigest: ledger.SumBody([]byte(body))}, Change: b, BodyAt: at}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit: %+v %v", a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

func (w *checksWorld) pullRequestFromApp(title string, updatedAt time.Time) queue.Message {
	return w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: title, TargetBranch: "main"}, Installation: appInstallation}, title, updatedAt)
}

// checkRuns checks what a user sees on the commit: the latest check run of the context, whose
// conclusion and external_id (the delivery) are given, and how many check runs were created.
func (w *checksWorld) checkRuns(wantConclusion string, wantDelivery queue.Message, wantCreated int) {
	w.t.Helper()
	if v := w.checks.Violations(); len(v) > 0 {
		w.t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	runs := w.checks.Runs(commitRepo, headSHA)
	got, ok := w.checks.LatestRun(commitRepo, headSHA, statusCtx)
	if !ok || got.Conclusion != wantConclusion || got.ExternalID != wantDelivery.Key.String() {
		w.t.Fatalf("the commit shows %q from delivery %.8s, want %q from %s; check runs: %+v", got.Conclusion, got.ExternalID,
			wantConclusion, wantDelivery.Key.Short(), runs)
	}
	if len(runs) != wantCreated {
		w.t.Fatalf("%d check runs created, want %d: %+v", len(runs), wantCreated, runs)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.ExternalID] {
			w.t.Fatalf("two check runs for delivery %.8s", r.ExternalID)
		}
		seen[r.ExternalID] = true
	}
}

// Delivered newest first, no fault: the older verdict is superseded, one check run.
func TestAnOlderVerdictDeliveredLastCreatesNoCheckRun(t *testing.T) {
	w := newChecksWorld(t, githubtest.New(nil))
	edited := w.pullRequestFromApp(goodTitle, epoch.Add(-time.Minute))
	opened := w.pullRequestFromApp(badTitle, epoch.Add(-2*time.Minute))
	r := w.checksRunner("a", titleRule, 5*time.Second)
	w.process(r, edited)
	w.process(r, opened)
	w.checkRuns("success", edited, 1)
	w.wantSuperseded(opened, edited)
}

// The older verdict's creates are answered 503 until the newer check run exists; retried
// after, the older is superseded, never created.
func TestAnOlderVerdictRefusedUntilTheNewerStandsCreatesNoCheckRunAfterIt(t *testing.T) {
	checks := githubtest.New(nil)
	var mu sync.Mutex
	newerCreated := false
	checks.Create = func(_ int, r githubtest.CheckRun) githubtest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		if r.Conclusion == "success" {
			newerCreated = true
		} else if !newerCreated {
			return githubtest.Behavior{Code: http.StatusServiceUnavailable}
		}
		return githubtest.Behavior{}
	}
	w := newChecksWorld(t, checks)
	opened := w.pullRequestFromApp(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequestFromApp(goodTitle, epoch.Add(-time.Minute))
	r := w.checksRunner("a", titleRule, 5*time.Second)
	if res, _ := r.Process(context.Background(), opened); res.Done {
		t.Fatal("the older verdict was done although every create of it was refused")
	}
	w.process(r, edited)
	w.clock.Advance(time.Hour)
	w.process(r, opened)
	w.checkRuns("success", edited, 1)
	w.wantSuperseded(opened, edited)
}

// A checks API that answers every create after longer than the route's timeout, though it
// creates the check run at once: each verdict has exactly one check run, the newest stands.
func TestASlowChecksAPICreatesOneCheckRunPerVerdict(t *testing.T) {
	checks := githubtest.New(nil)
	checks.Create = func(int, githubtest.CheckRun) githubtest.Behavior {
		return githubtest.Behavior{Delay: 400 * time.Millisecond, ApplyFirst: true}
	}
	w := newChecksWorld(t, checks)
	opened := w.pullRequestFromApp(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequestFromApp(goodTitle, epoch.Add(-time.Minute))
	r := w.checksRunner("a", titleRule, 100*time.Millisecond)
	w.process(r, opened)
	w.process(r, edited)
	w.checkRuns("success", edited, 2)
	if checks.Creates() != 2 {
		t.Fatalf("%d creates for two verdicts", checks.Creates())
	}
}

// A user presses Re-run on the commit's check run: GitHub's check_run "rerequested" webhook
// (read from the fixture as the ingress reads it) is a new delivery for the same commit,
// without a body time, so it is ordered by its admission, after the push. It is evaluated
// again and gets a check run of its own, which stands; the push's stays, one each.
func TestARerunLeadsToANewCheckRunForTheSameCommit(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("..", "change", "testdata", "github", "check_run_rerequested.json"))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-GitHub-Event", "check_run")
	rerunChange, err := only(provider.Extract("github", h, body))
	if err != nil || rerunChange.Event != change.Rerun || rerunChange.Installation != appInstallation {
		t.Fatalf("re-run change %+v %v", rerunChange, err)
	}
	rerunChange.Repository, rerunChange.SHA = commitRepo, headSHA
	w := newChecksWorld(t, githubtest.New(nil))
	push := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.Push,
		Installation: appInstallation}, "push", epoch.Add(-2*time.Minute))
	// The evaluator's outside dependency failed for the push, and works for the re-run.
	calls := 0
	flaky := evalFunc(func(_ context.Context, s change.Change) (evaluate.Verdict, error) {
		calls++
		if s.Event == change.Rerun {
			return evaluate.Verdict{State: "success", Description: "all rules hold"}, nil
		}
		return evaluate.Verdict{State: "failure", Description: "failed: the licence server did not answer"}, nil
	})
	r := w.checksRunner("a", flaky, 5*time.Second)
	w.process(r, push)
	w.checkRuns("failure", push, 1)
	w.clock.Advance(time.Minute) // the user reads the check run, and presses Re-run
	rerun := w.admitChange(rerunChange, string(body), time.Time{})
	w.process(r, rerun)
	w.checkRuns("success", rerun, 2)
	if calls != 2 {
		t.Fatalf("%d evaluations, want the push's and the re-run's", calls)
	}
	for _, m := range []queue.Message{push, rerun} {
		if st := w.row(m).State; st != ledger.StateDone {
			t.Fatalf("delivery %s: %v, want done", m.Key.Short(), st)
		}
	}
}
