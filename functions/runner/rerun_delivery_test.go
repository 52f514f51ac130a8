package runner_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// The Re-run of a check run amiss published is evaluated for the delivery that check run was
// for, found in the ledger through the check run's external_id: these tests hold what it
// finds, and what it does when it cannot look.

// Pull requests the world's commit heads: #2 to main follows the title rule, #3 to release
// does not.
const (
	listedTwoThree = `[{"number":2,"head":{"ref":"changes"},"base":{"ref":"main"}},{"number":3,"head":{"ref":"changes"},"base":{"ref":"release"}}]`
	listedThree    = `[{"number":3,"head":{"ref":"changes"},"base":{"ref":"release"}}]`
)

// twoPullRequests makes the world's commit the head of #2 ("feat: the thing", to main) and
// #3 ("WIP: the thing", to release), changing src/thing.go.
func (w *rerunWorld) twoPullRequests() {
	w.history.AddCommit(commitRepo, githubtest.HistoryCommit{SHA: headSHA, Parent: baseSHA, Message: "Add the thing",
		Files: []githubtest.ChangedFile{{Filename: "src/thing.go", Status: "added"}}})
	w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 2, Title: "feat: the thing", Base: "main", Head: "changes",
		BaseSHA: baseSHA, HeadSHA: headSHA})
	w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 3, Title: "WIP: the thing", Base: "release", Head: "changes",
		BaseSHA: baseSHA, HeadSHA: headSHA})
}

// pullRequestThree admits #3's pull_request event, a minute before the world's clock.
func (w *rerunWorld) pullRequestThree() queue.Message {
	return w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull:  &change.Pull{Number: 3, Title: "WIP: the thing", TargetBranch: "release", SourceBranch: "changes"},
		Whole: change.TitleInput | change.PullInput, Installation: appInstallation}, "pull_request 3", epoch.Add(-time.Minute))
}

// checkRunRerun admits GitHub's check_run "rerequested" webhook for the check run published
// for of, the commit heading the pull requests pulls lists (a JSON array), read as the
// ingress reads it.
func (w *rerunWorld) checkRunRerun(of queue.Message, pulls string) queue.Message {
	w.t.Helper()
	body := fmt.Sprintf(`{"action":"rerequested","repository":{"full_name":%q},"installation":{"id":%d},
		"check_run":{"head_sha":%q,"external_id":%q,"check_suite":{"head_branch":"changes","before":%q,"after":%q},
		"pull_requests":%s}}`, commitRepo, appInstallation, headSHA, of.Key.String(), baseSHA, headSHA, pulls)
	return w.admitRerun("check_run", body)
}

// admitRerun admits a re-run webhook of event with body, read as the ingress reads it.
func (w *rerunWorld) admitRerun(event, body string) queue.Message {
	w.t.Helper()
	h := http.Header{}
	h.Set("X-GitHub-Event", event)
	s, err := only(provider.Extract("github", h, []byte(body)))
	if err != nil {
		w.t.Fatal(err)
	}
	return w.admitChange(s, body, time.Time{})
}

// inspectFails is a ledger whose Inspect fails, while fail is set, as a store fails for a
// while (busy, unreachable): not ErrUnknownDelivery, which says the row is gone.
type inspectFails struct {
	ledger.Ledger
	fail atomic.Bool
}

var errStoreUnreachable = errors.New("the store is unreachable")

func (l *inspectFails) Inspect(ctx context.Context, key ledger.Key) (ledger.Row, error) {
	if l.fail.Load() {
		return ledger.Row{}, fmt.Errorf("inspect %s: %w", key.Short(), errStoreUnreachable)
	}
	return l.Ledger.Inspect(ctx, key)
}

// A ledger that cannot be read when a Re-run looks up its check run's delivery says nothing
// of which pull request the check run was for: the Re-run of #3's check run (#3 fails the
// title rule) is not evaluated for #2, listed first (which would pass it), but handed back,
// nothing published, and evaluated for #3 once the ledger answers.
func TestARerunWhoseCheckRunsDeliveryCannotBeLookedUpIsRetriedNotEvaluatedForAnother(t *testing.T) {
	w := newRerunWorld(t)
	w.twoPullRequests()
	r := w.rerunRunner(forbiddenPaths(t))
	pr := w.pullRequestThree()
	w.process(r, pr)
	w.latest(pr, "failure")

	w.clock.Advance(time.Minute) // a user presses Re-run on #3's check run
	rerun := w.checkRunRerun(pr, listedTwoThree)
	flaky := &inspectFails{Ledger: r.Ledger}
	flaky.fail.Store(true)
	r.Ledger = flaky
	res, _ := r.Process(context.Background(), rerun)
	if res.Done || len(w.checks.Runs(commitRepo, headSHA)) != 1 {
		t.Fatalf("an attempt that could not look up the check run's delivery: %+v, check runs %+v", res,
			w.checks.Runs(commitRepo, headSHA))
	}
	if row := w.row(rerun); row.State != ledger.StatePending {
		t.Fatalf("row after the failed look-up: %v, want pending (handed back for a later attempt)", row.State)
	}
	flaky.fail.Store(false)
	w.process(r, rerun)
	w.checkRuns("failure", rerun, 2)
}

// checkSuiteRerun admits GitHub's check_suite "rerequested" webhook (Re-run all) for the
// world's commit, heading the pull requests pulls lists (a JSON array).
func (w *rerunWorld) checkSuiteRerun(pulls string) queue.Message {
	w.t.Helper()
	body := fmt.Sprintf(`{"action":"rerequested","repository":{"full_name":%q},"installation":{"id":%d},
		"check_suite":{"head_sha":%q,"head_branch":"changes","before":%q,"after":%q,"pull_requests":%s}}`,
		commitRepo, appInstallation, headSHA, baseSHA, headSHA, pulls)
	return w.admitRerun("check_suite", body)
}

// A check suite's Re-run names no check run: the first pull request its webhook lists (#2)
// stands in, and the check run it publishes is #2's. Once #2 is closed, a Re-run of that check
// run lists #3 alone: the commit no longer heads #2, and #3 stands in, as for a Re-run of #2's
// own check run; #2 (which follows the title rule) is not re-run.
func TestARerunOfACheckSuitesRerunIsNotForAPullRequestTheCommitNoLongerHeads(t *testing.T) {
	w := newRerunWorld(t)
	w.twoPullRequests()
	r := w.rerunRunner(forbiddenPaths(t))
	suite := w.checkSuiteRerun(listedTwoThree)
	w.process(r, suite)
	w.latest(suite, "success")

	w.clock.Advance(time.Minute) // #2 is closed; a user presses Re-run on the suite's check run
	w.history.AddPull(commitRepo, githubtest.HistoryPull{Number: 2, Title: "feat: the thing", Base: "main", Head: "changes",
		BaseSHA: baseSHA, HeadSHA: headSHA, State: "closed"})
	rerun := w.checkRunRerun(suite, listedThree)
	w.process(r, rerun)
	w.checkRuns("failure", rerun, 2)
}

// A Re-run of a Re-run's check run is for what that Re-run was: each press of Re-run on the
// newest check run of #3 is evaluated for #3, the commit heading #2 too (listed first), press
// after press: a flaky check is re-run a dozen times in ordinary use.
func TestRerunsOfRerunsAreForTheirFirstCheckRunsPullRequest(t *testing.T) {
	w := newRerunWorld(t)
	w.twoPullRequests()
	r := w.rerunRunner(forbiddenPaths(t))
	last := w.pullRequestThree()
	w.process(r, last)
	w.latest(last, "failure")
	for press := 1; press <= 12; press++ {
		w.clock.Advance(time.Minute)
		last = w.checkRunRerun(last, listedTwoThree)
		w.process(r, last)
		if run, _ := w.checks.LatestRun(commitRepo, headSHA, statusCtx); run.Conclusion != "failure" || run.ExternalID != last.Key.String() {
			t.Fatalf("press %d of Re-run: the commit shows %q from %.8s, want #3's failure from %s", press, run.Conclusion,
				run.ExternalID, last.Key.Short())
		}
	}
}

// A Re-run's payload proves nothing of the pull request's history: the verdict of a Re-run of
// the check run of an edit (which proves the title it changed from) or of an opening (which
// made the commit the pull request's head) records no such proof in its tie, which would order
// it after another event of its second that it never followed.
func TestARerunClaimsNoneOfItsDeliverysPayloadProofs(t *testing.T) {
	for _, c := range []struct {
		name string
		pull change.Pull
	}{
		{"an edit", change.Pull{Number: 3, Title: "WIP: the thing", TargetBranch: "release", SourceBranch: "changes",
			Was: &change.PullState{Title: "WIP: the old thing", TargetBranch: "release"}}},
		{"an opening", change.Pull{Number: 3, Title: "WIP: the thing", TargetBranch: "release", SourceBranch: "changes", Starts: true}},
	} {
		w := newRerunWorld(t)
		w.twoPullRequests()
		r := w.rerunRunner(forbiddenPaths(t))
		pull := c.pull
		pr := w.admitChange(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
			Pull: &pull, Whole: change.TitleInput | change.PullInput, Installation: appInstallation}, c.name, epoch.Add(-time.Minute))
		w.process(r, pr)
		w.clock.Advance(time.Minute)
		rerun := w.checkRunRerun(pr, listedTwoThree)
		w.process(r, rerun)
		w.checkRuns("failure", rerun, 2)
		rec, err := w.l.InspectSubject(context.Background(), ledger.Subject{Publisher: provider.GitHubChecks + " " + w.srv.URL,
			Repository: commitRepo, SHA: headSHA, Context: statusCtx}.Key())
		if err != nil {
			t.Fatal(err)
		}
		if tie := rec.Newest.Tie; rec.Newest.Key != rerun.Key || !tie.From.IsZero() || tie.Starts || tie.Inputs.IsZero() {
			t.Errorf("the Re-run of %s's check run stands as %s with the tie %+v: want %s, with its inputs and no proof of a place",
				c.name, rec.Newest.Key.Short(), tie, rerun.Key.Short())
		}
	}
}
