package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// Ties within the provider's time resolution. GitHub's pull_request.updated_at has whole
// seconds: a pull request opened with a title that breaks the rule and edited within the same
// second gives two verdicts with one event time. Delivered newest first, admission order would
// call the opening's verdict the newer one; the edit's payload proves otherwise (its
// changes.title.from is the title the opening had), and the edit's verdict stands.

// githubPull is the body of a GitHub pull_request webhook of action, title, and (for an edit)
// the title it changed from.
func githubPull(action, title, from string) []byte {
	changes := ""
	if from != "" {
		changes = fmt.Sprintf(`"changes":{"title":{"from":%q}},`, from)
	}
	return fmt.Appendf(nil, `{"action":%q,"number":7,%s"repository":{"full_name":%q},"installation":{"id":%d},`+
		`"pull_request":{"title":%q,"head":{"sha":%q,"ref":"feature"},"base":{"ref":"main"}}}`,
		action, changes, commitRepo, appInstallation, title, headSHA)
}

// admitWebhook admits a GitHub pull_request webhook as the ingress does: its change read from
// the body, its body time at.
func (w *commitWorld) admitWebhook(body []byte, at time.Time) queue.Message {
	w.t.Helper()
	h := http.Header{"X-Github-Event": {"pull_request"}}
	s, err := only(change.Extract("github", change.GitHubFormat, h, body))
	if err != nil {
		w.t.Fatal(err)
	}
	b, err := s.Marshal(32 << 10)
	if err != nil {
		w.t.Fatal(err)
	}
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
		BodyDigest: ledger.SumBody(body)}, Change: b, BodyAt: at}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit: %+v %v", a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

func TestAPullRequestOpenedAndEditedInOneSecondLeavesTheEditStanding(t *testing.T) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	second := epoch.Add(-time.Minute)
	edited := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
	w.clock.Advance(time.Second) // delivered newest first
	opened := w.admitWebhook(githubPull("opened", badTitle, ""), second)
	r := w.runner("a", nil, 5*time.Second)
	w.process(r, edited)
	w.process(r, opened)
	w.standing("success", 1)
	w.wantSuperseded(opened, edited)
}

func TestACheckRunOfAPullRequestOpenedAndEditedInOneSecondLeavesTheEditStanding(t *testing.T) {
	w := newChecksWorld(t, githubtest.New(nil))
	second := epoch.Add(-time.Minute)
	edited := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
	w.clock.Advance(time.Second)
	opened := w.admitWebhook(githubPull("opened", badTitle, ""), second)
	r := w.checksRunner("a", titleRule, 5*time.Second)
	w.process(r, edited)
	w.process(r, opened)
	w.checkRuns("success", edited, 1)
	w.wantSuperseded(opened, edited)
}

// Where the payloads prove nothing, what the provider shows at evaluation decides: the route's
// reader answers the pull request's title as it is now; the verdict evaluated on it is newer
// than one evaluated on a title the pull request no longer has, whichever was delivered first.
// A reader that fails orders nothing, and the evaluation goes on.
func TestWhatTheProviderShowsAtEvaluationOrdersVerdictsOfOneSecond(t *testing.T) {
	for _, failing := range []bool{false, true} {
		w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
		second := epoch.Add(-time.Minute)
		current := w.pullRequest(goodTitle, second) // delivered first
		w.clock.Advance(time.Second)
		stale := w.pullRequest(badTitle, second)
		r := w.runner("a", nil, 5*time.Second)
		routes := r.Routes
		reads := 0
		r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
			rt, err := routes(ctx, name)
			if rt != nil {
				rt.PullNow = func(_ context.Context, s change.Change) (change.PullState, error) {
					reads++
					if failing {
						return change.PullState{}, errors.New("GET /repos/acme/app/pulls/7 answered 502")
					}
					return change.PullState{Title: goodTitle, TargetBranch: "main"}, nil
				}
			}
			return rt, err
		}
		w.process(r, current)
		w.process(r, stale)
		if reads != 2 {
			t.Fatalf("the provider was read %d times, want once per evaluation", reads)
		}
		if failing {
			// Ordered by admission: the later admitted stands, both published.
			w.standing("failure", 2)
			continue
		}
		w.standing("success", 1)
		w.wantSuperseded(stale, current)
	}
}

// A verdict frozen by a runner that recorded no tie (saved before the upgrade, published
// after it) is ordered by what its delivery's change says of it, as one evaluated now would
// be: the edit of the same second proves it came after the opening's title, whichever of the
// two asks the subject's record first. Ordered by admission instead, the opening (delivered
// last) stood over the edit.
func TestAVerdictFrozenWithoutATieIsOrderedByItsChange(t *testing.T) {
	for _, openedFirst := range []bool{false, true} {
		w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
		second := epoch.Add(-time.Minute)
		edited := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
		w.clock.Advance(time.Second) // delivered newest first
		opened := w.admitWebhook(githubPull("opened", badTitle, ""), second)
		w.freezeWithoutTie(opened, runner.Report{State: "failure", Description: "failed: pull request title", Context: statusCtx})
		r := w.runner("a", nil, 5*time.Second)
		first, then := edited, opened
		if openedFirst {
			first, then = opened, edited
		}
		w.process(r, first)
		w.process(r, then)
		if got, ok := w.gh.Latest(commitRepo, headSHA, statusCtx); !ok || got.State != "success" {
			t.Fatalf("opened first %v: the commit shows %q, want the edit's verdict", openedFirst, got.State)
		}
		if openedFirst {
			w.standing("success", 2)
			continue
		}
		w.standing("success", 1)
		w.wantSuperseded(opened, edited)
	}
}

// freezeWithoutTie saves rep as m's verdict, as a runner that recorded no tie froze it, and
// releases the row for an immediate claim.
func (w *commitWorld) freezeWithoutTie(m queue.Message, rep runner.Report) {
	w.t.Helper()
	ctx := context.Background()
	c, err := w.l.Claim(ctx, m.Key, m.Binding, "before-the-upgrade", 30*time.Second)
	if err != nil || c.Outcome != ledger.Execute {
		w.t.Fatalf("claim %+v %v", c, err)
	}
	b, _ := json.Marshal(rep)
	if strings.Contains(string(b), "tie") {
		w.t.Fatalf("the report %s records a tie", b)
	}
	st, err := w.l.Save(ctx, *c.Lease, b)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.l.Release(ctx, st.Lease, time.Time{}); err != nil {
		w.t.Fatal(err)
	}
}

// Three events of one pull request in one second: it is opened (or pushed to) with a title
// that breaks the rule, and edited twice, the second edit fixing it. Delivered newest first,
// the last edit's verdict stands: its payload proves it came after the first edit (the title
// it changed from), and an edit of the pull request's head came after the event that made
// that commit its head (the opening, or the push). Nothing related the opening to the last
// edit before, and the opening, admitted last, was posted over the edit.
func TestAPullRequestOpenedAndEditedTwiceInOneSecondLeavesTheLastEditStanding(t *testing.T) {
	for _, start := range []string{"opened", "synchronize"} {
		w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
		second := epoch.Add(-time.Minute)
		last := w.admitWebhook(githubPull("edited", goodTitle, "wip: the thing"), second)
		w.clock.Advance(time.Second) // delivered newest first
		first := w.admitWebhook(githubPull("edited", "wip: the thing", badTitle), second)
		w.clock.Advance(time.Second)
		started := w.admitWebhook(githubPull(start, badTitle, ""), second)
		r := w.runner("a", nil, 5*time.Second)
		w.process(r, last)
		w.process(r, first)
		w.process(r, started)
		if got, ok := w.gh.Latest(commitRepo, headSHA, statusCtx); !ok || got.State != "success" {
			t.Fatalf("%s and two edits: the commit shows %q, want the last edit's verdict", start, got.State)
		}
		w.standing("success", 1)
		w.wantSuperseded(first, last)
		w.wantSuperseded(started, last)
	}
}

// The routes built from the configuration read what the provider shows of the pull request at
// evaluation (Route.PullNow), with the route's reading credential. A title edited and changed
// back within one second gives two edits that each prove the other came first (each names the
// title the other set): nothing in the payloads orders them. Delivered newest first, admission
// would put the first edit's verdict over the revert's, though the pull request shows the
// revert's title; what GitHub shows at evaluation orders them, in either order of evaluation.
func TestAnEditChangedBackInOneSecondLeavesTheVerdictOfWhatThePullRequestShows(t *testing.T) {
	for _, revertFirst := range []bool{true, false} {
		w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
		w.gh.AddPull(commitRepo, githubtest.HistoryPull{Number: 7, Title: goodTitle, Base: "main", Head: "feature", HeadSHA: headSHA})
		second := epoch.Add(-time.Minute)
		reverted := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
		w.clock.Advance(time.Second) // delivered newest first
		edited := w.admitWebhook(githubPull("edited", badTitle, goodTitle), second)
		r := w.wiredRunner()
		if revertFirst {
			w.process(r, reverted)
			w.wantSeen(reverted, ledger.SeenCurrent)
			w.process(r, edited)
		} else {
			w.process(r, edited)
			w.wantSeen(edited, ledger.SeenStale)
			w.process(r, reverted)
			w.wantSeen(reverted, ledger.SeenCurrent)
		}
		if got, ok := w.gh.Latest(commitRepo, headSHA, statusCtx); !ok || got.State != "success" {
			t.Fatalf("revert evaluated first %v: the commit shows %q, want the revert's verdict (the title the pull request shows)",
				revertFirst, got.State)
		}
		if n := w.gh.Requests(githubtest.OpGetPull); n != 2 {
			t.Fatalf("the pull request was read %d times, want once per evaluation", n)
		}
		if revertFirst {
			w.standing("success", 1)
			w.wantSuperseded(edited, reverted)
			continue
		}
		w.standing("success", 2)
	}
}

// A read that shows neither title of the second (the pull request edited again since, in a
// later second, or read late) freezes both verdicts as stale: the tie tells nothing, and
// admission orders them. The later edit is newer by its time, and its verdict is the one left
// standing, whichever of the three was delivered first.
func TestAReadShowingNeitherTitleOfTheSecondLeavesTheLaterEditStanding(t *testing.T) {
	const laterTitle = "feat: the thing, renamed"
	for _, laterFirst := range []bool{true, false} {
		w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
		w.gh.AddPull(commitRepo, githubtest.HistoryPull{Number: 7, Title: laterTitle, Base: "main", Head: "feature", HeadSHA: headSHA})
		second := epoch.Add(-time.Minute)
		later := w.admitWebhook(githubPull("edited", laterTitle, goodTitle), second.Add(time.Second))
		w.clock.Advance(time.Second)
		reverted := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
		w.clock.Advance(time.Second)
		edited := w.admitWebhook(githubPull("edited", badTitle, goodTitle), second)
		r := w.wiredRunner()
		if laterFirst {
			// Newer by its time: the verdicts of the second are superseded, whatever their tie.
			w.process(r, later)
			w.wantSeen(later, ledger.SeenCurrent)
			w.process(r, reverted)
			w.process(r, edited)
			w.standing("success", 1)
			w.wantSuperseded(reverted, later)
			w.wantSuperseded(edited, later)
			continue
		}
		w.process(r, reverted)
		w.wantSeen(reverted, ledger.SeenStale)
		w.process(r, edited)
		w.wantSeen(edited, ledger.SeenStale)
		// The tie told nothing: the edit admitted last was posted over the revert.
		if got, _ := w.gh.Latest(commitRepo, headSHA, statusCtx); got.State != "failure" {
			t.Fatalf("both stale: the commit shows %q, want the verdict admitted last (admission decides)", got.State)
		}
		w.process(r, later)
		w.wantSeen(later, ledger.SeenCurrent)
		w.standing("success", 3)
	}
}

// A read made late, after the pull request was edited again in later seconds whose deliveries
// have not come yet, compares with the pull request as it is then: the verdict whose title it
// shows is called current and left standing, though its edit was the earlier of its second;
// what the commit shows is the verdict of the title the pull request has. The later edit is
// newer by its time, and its verdict stands once it comes.
func TestALateReadLeavesTheVerdictOfWhatThePullRequestShowsNow(t *testing.T) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	w.gh.AddPull(commitRepo, githubtest.HistoryPull{Number: 7, Title: badTitle, Base: "main", Head: "feature", HeadSHA: headSHA})
	second := epoch.Add(-time.Minute)
	edited := w.admitWebhook(githubPull("edited", badTitle, goodTitle), second)
	w.clock.Advance(time.Second) // delivered in order
	reverted := w.admitWebhook(githubPull("edited", goodTitle, badTitle), second)
	r := w.wiredRunner()
	w.process(r, edited)
	w.wantSeen(edited, ledger.SeenCurrent)
	w.process(r, reverted)
	w.wantSuperseded(reverted, edited)
	if got, _ := w.gh.Latest(commitRepo, headSHA, statusCtx); got.State != "failure" {
		t.Fatalf("the commit shows %q, want the verdict of the title the pull request shows now", got.State)
	}
	// The pull request was edited to another title and back to badTitle since.
	w.clock.Advance(time.Second)
	again := w.admitWebhook(githubPull("edited", badTitle, "wip: the thing"), second.Add(5*time.Second))
	w.process(r, again)
	w.wantSeen(again, ledger.SeenCurrent)
	if got, _ := w.gh.Latest(commitRepo, headSHA, statusCtx); got.State != "failure" {
		t.Fatalf("the commit shows %q, want the later edit's verdict", got.State)
	}
}

// wiredRunner is a runner whose routes are built from the configuration by functions/wiring, as
// the functions and amiss serve build them: route "r" publishes to the fake GitHub with a token
// and reads it with the same token.
func (w *commitWorld) wiredRunner() *runner.Runner {
	r := w.runner("a", nil, 5*time.Second)
	r.Routes = routesOf(w.t, "routes:"+spelledRoute("r", w.srv.URL))
	return r
}

// wantSeen checks that m's verdict, just processed, is the newest its subject's record holds,
// with what the read at its evaluation found.
func (w *commitWorld) wantSeen(m queue.Message, want ledger.Seen) {
	w.t.Helper()
	rec, err := w.l.InspectSubject(context.Background(), ledger.Subject{Publisher: "github " + w.srv.URL,
		Repository: commitRepo, SHA: headSHA, Context: statusCtx}.Key())
	if err != nil {
		w.t.Fatal(err)
	}
	if rec.Newest.Key != m.Key || rec.Newest.Tie.Seen != want {
		w.t.Fatalf("the newest verdict is %s, seen %d; want %s, seen %d", rec.Newest.Key.Short(), rec.Newest.Tie.Seen, m.Key.Short(), want)
	}
}

// The read of the pull request at evaluation may answer after the evaluation's lease was lost
// (the lease ran out while it was in flight, and another runner claimed the delivery), whatever
// the read's context says: the verdict, and what the read found, are dropped. Nothing is saved
// or published by the runner that lost the lease, and the other runner's lease stands.
func TestAPullRequestReadAnsweredAfterTheLeaseWasLostSavesNothing(t *testing.T) {
	raw, _ := json.Marshal(change.Change{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
		Event: change.PullRequest, Pull: &change.Pull{Number: 7, Title: goodTitle, TargetBranch: "main"}})
	w := newWorldWithChange(t, raw)
	r := w.runner("first", verdict("success", "ok"))
	routes := r.Routes
	reads := 0
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.PullNow = func(context.Context, change.Change) (change.PullState, error) {
				reads++
				// The lease runs out while the read is in flight; another runner takes it.
				w.clock.Advance(31 * time.Second)
				c, err := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "other", time.Minute)
				if err != nil || c.Outcome != ledger.Execute {
					t.Errorf("claim by another runner: %+v %v", c, err)
				}
				return change.PullState{Title: goodTitle, TargetBranch: "main"}, nil
			}
		}
		return rt, err
	}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if reads != 1 {
		t.Fatalf("the pull request was read %d times, want once", reads)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	if row.State != ledger.StateRunning || row.Owner != "other" || !row.Report.IsZero() {
		t.Fatalf("the row is %v owned by %q with report %+v; want running under the other runner's lease, nothing saved",
			row.State, row.Owner, row.Report)
	}
	if n := len(w.pub.statuses); n != 0 {
		t.Fatalf("%d statuses published by the runner that lost the lease", n)
	}
}

// only is the one change of a webhook that carries one (an error passes through as it is).
func only(cs []change.Change, err error) (change.Change, error) {
	if err != nil {
		return change.Change{}, err
	}
	if len(cs) != 1 {
		return change.Change{}, fmt.Errorf("the webhook gave %d changes, want 1", len(cs))
	}
	return cs[0], nil
}
