package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// Before evaluating, the runner reads from the provider's API what the route's rules need and
// the webhook did not carry whole, and only that; what cannot be read fails the rules that need
// it closed; the provider's outage is retried, never turned into a verdict early.

// fakeReader is a provider's API as an InputReader: the pull requests' files and commits by
// number, the push's by commit; it records every read.
type fakeReader struct {
	mu    sync.Mutex
	reads []fakeRead
	// pulls are the pull requests by number: title, commits, files.
	pulls map[int]change.Change
	// fail, while above zero, answers that many reads with the provider's outage.
	fail int
	// refuse marks every read unread with this reason (a permission the credential lacks).
	refuse string
}

type fakeRead struct {
	s    change.Change
	need change.Inputs
}

func (f *fakeReader) Read(_ context.Context, s change.Change, need change.Inputs) (change.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, fakeRead{s: s, need: need})
	if f.fail > 0 {
		f.fail--
		return s, &publish.Error{Class: publish.Transient, Status: 502, Err: errors.New("GET /pulls answered 502")}
	}
	if f.refuse != "" {
		s.MarkUnread(need, f.refuse)
		return s, nil
	}
	if s.Pull == nil {
		s.MarkUnread(need, "the re-run names no pull request")
		return s, nil
	}
	pr, ok := f.pulls[s.Pull.Number]
	if !ok {
		s.MarkUnread(need, "no such pull request")
		return s, nil
	}
	p := *s.Pull
	if need.Has(change.TitleInput) { // a title the webhook carried is the event's
		p.Title = pr.Pull.Title
	}
	s.Pull = &p
	s.Commits, s.Paths = pr.Commits, pr.Paths
	s.Whole |= need
	s.Read = append(s.Read, "fake: the pull request")
	return s, nil
}

func (f *fakeReader) all() []fakeRead {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRead(nil), f.reads...)
}

// prRules are a route's rules: a conventional title, no secrets, capitalised messages.
func prRules(t *testing.T, r config.Rules) evaluate.Evaluator {
	t.Helper()
	ev, err := evaluate.NewRules(r)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// inputsRunner is the world's runner with ev and reader (nil: the route has none).
func (w *world) inputsRunner(ev evaluate.Evaluator, reader runner.InputReader) *runner.Runner {
	r := w.runner("a", ev)
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		route, err := routes(ctx, name)
		if err == nil && reader != nil {
			route.Inputs = reader
		}
		return route, err
	}
	return r
}

// admit admits another delivery of s on the world's route (body names it) and returns its
// message.
func (w *world) admit(t *testing.T, s change.Change, body string) queue.Message {
	t.Helper()
	b, _ := json.Marshal(s)
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: body,
		BodyDigest: ledger.SumBody([]byte(body))}, Change: b}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

// pullRequestWorld is a world whose row is a pull request's webhook (#5, "feat: add it"): its
// title and branches, no files, no commits.
func pullRequestWorld(t *testing.T) *world {
	s, _ := json.Marshal(pullRequest5())
	return newWorldWithChange(t, s)
}

func pullRequest5() change.Change {
	return change.Change{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
		Event: change.PullRequest, Pull: &change.Pull{Number: 5, Title: "feat: add it", TargetBranch: "main"},
		Whole: change.TitleInput | change.PullInput}
}

// posted is the one status the world's publisher holds.
func (w *world) posted(t *testing.T) publish.Status {
	t.Helper()
	all := w.pub.all()
	if len(all) != 1 {
		t.Fatalf("%d statuses posted, want 1: %+v", len(all), all)
	}
	return all[0]
}

// A pull request that adds a forbidden file fails, though its webhook names no file: the
// runner reads the files (and only what the rules need) from the provider; the verdict's record
// says what was read.
func TestAPullRequestAddingAForbiddenFileFails(t *testing.T) {
	w := pullRequestWorld(t)
	reader := &fakeReader{pulls: map[int]change.Change{5: {Pull: &change.Pull{Title: "feat: add it"},
		Paths: []string{"src/a.go", "secrets/prod.env"}}}}
	r := w.inputsRunner(prRules(t, config.Rules{ForbiddenPaths: []string{"secrets/**"}}), reader)
	saves := &savedReports{Ledger: w.l}
	r.Ledger = saves
	drive(t, w, r, 5)
	if got := w.posted(t); got.State != evaluate.Failure || !strings.Contains(got.Description, "forbidden path secrets/prod.env") {
		t.Fatalf("posted %+v", got)
	}
	reads := reader.all()
	if len(reads) != 1 || reads[0].need != change.PathsInput {
		t.Fatalf("reads %+v, want one of the paths alone", reads)
	}
	var rep runner.Report
	if len(saves.reports) != 1 {
		t.Fatalf("%d reports saved", len(saves.reports))
	}
	if err := json.Unmarshal(saves.reports[0], &rep); err != nil || len(rep.Read) != 1 || rep.Read[0] != "fake: the pull request" {
		t.Fatalf("the verdict's record %s (%v) does not say what was read", saves.reports[0], err)
	}
}

// savedReports is a ledger that keeps a copy of every report saved.
type savedReports struct {
	ledger.Ledger
	reports [][]byte
}

func (s *savedReports) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	st, err := s.Ledger.Save(ctx, l, report)
	if err == nil {
		s.reports = append(s.reports, append([]byte(nil), report...))
	}
	return st, err
}

// A route whose rules need nothing the webhook lacks reads nothing: a title rule on a pull
// request, or any rule on a push whose webhook listed everything.
func TestRulesThatNeedNothingTheWebhookLacksReadNothing(t *testing.T) {
	w := pullRequestWorld(t)
	reader := &fakeReader{}
	drive(t, w, w.inputsRunner(prRules(t, config.Rules{PullRequestTitle: "^feat: "}), reader), 5)
	if got := w.posted(t); got.State != evaluate.Success {
		t.Fatalf("posted %+v", got)
	}
	push := change.Change{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
		Event: change.Push, Whole: change.AllInputs, Paths: []string{"a.go"}, Commits: []change.Commit{{ID: "c1", Message: "Fine"}}}
	b, _ := json.Marshal(push)
	w = newWorldWithChange(t, b)
	drive(t, w, w.inputsRunner(prRules(t, config.Rules{PullRequestTitle: "^feat: ", CommitMessage: "^[A-Z]",
		ForbiddenPaths: []string{"secrets/**"}}), reader), 5)
	if got := w.posted(t); got.State != evaluate.Success {
		t.Fatalf("posted %+v", got)
	}
	if n := len(reader.all()); n != 0 {
		t.Fatalf("%d reads where the webhook held everything the rules need", n)
	}
}

// A route with no credential to read its provider's API fails the rules that need a read
// closed, saying so, rather than passing what it could not see.
func TestARouteThatCannotReadFailsClosedSayingWhy(t *testing.T) {
	w := pullRequestWorld(t)
	drive(t, w, w.inputsRunner(prRules(t, config.Rules{ForbiddenPaths: []string{"secrets/**"}}), nil), 5)
	got := w.posted(t)
	if got.State != evaluate.Failure || !strings.Contains(got.Description, "changed paths (could not be read: the route has no credential") {
		t.Fatalf("posted %+v", got)
	}
}

// A read the provider refuses (a permission the credential lacks) fails the rules closed,
// naming what to grant.
func TestARefusedReadFailsClosedNamingWhatToGrant(t *testing.T) {
	w := pullRequestWorld(t)
	grant := "GitHub answered 403; grant the GitHub App the Pull requests: read permission"
	reader := &fakeReader{refuse: grant}
	drive(t, w, w.inputsRunner(prRules(t, config.Rules{CommitMessage: "^[A-Z]"}), reader), 5)
	if got := w.posted(t); got.State != evaluate.Failure || !strings.Contains(got.Description, grant) {
		t.Fatalf("posted %+v", got)
	}
}

// The provider's outage while reading is no failed evaluation: the attempt is handed back
// uncounted, after the retry delay, as many times as the outage lasts, and the verdict is the
// one the inputs give once they can be read.
func TestAnOutageWhileReadingIsRetriedNeverAVerdict(t *testing.T) {
	w := pullRequestWorld(t)
	reader := &fakeReader{fail: 7, pulls: map[int]change.Change{5: {Pull: &change.Pull{Title: "feat: add it"}, Paths: []string{"a.go"}}}}
	r := w.inputsRunner(prRules(t, config.Rules{ForbiddenPaths: []string{"secrets/**"}}), reader)
	r.MaxAttempts = 3
	start := w.clock.Now()
	drive(t, w, r, 20)
	if got := w.posted(t); got.State != evaluate.Success {
		t.Fatalf("posted %+v after an outage of 7 reads (3 attempts would have made an error verdict)", got)
	}
	if n := len(reader.all()); n != 8 {
		t.Fatalf("%d reads, want 8", n)
	}
	if waited := w.clock.Now().Sub(start); waited < 7*r.RetryDelay {
		t.Fatalf("the retries came back after %s, want the retry delay after each of 7", waited)
	}
}

// An outage that outlasts the publish budget since admission ends in an error verdict naming
// it: no commit waits forever.
func TestAnOutageOutlastingThePublishBudgetEndsInAnErrorVerdict(t *testing.T) {
	w := pullRequestWorld(t)
	reader := &fakeReader{fail: 1 << 30}
	r := w.inputsRunner(prRules(t, config.Rules{ForbiddenPaths: []string{"secrets/**"}}), reader)
	r.PublishBudget, r.RetryDelay = time.Hour, 10*time.Minute
	drive(t, w, r, 20)
	if got := w.posted(t); got.State != evaluate.Error || !strings.Contains(got.Description, "could not read the provider's API") {
		t.Fatalf("posted %+v", got)
	}
}

// A Re-run of a fork's pull request names no pull request in its webhook: the runner finds it
// through the delivery its check run was published for (the check run's external_id), also
// through a re-run of that re-run, and the verdict is the one the pull request got.
func TestAForkRerunIsEvaluatedAsItsPullRequest(t *testing.T) {
	w := pullRequestWorld(t)
	reader := &fakeReader{pulls: map[int]change.Change{5: {Pull: &change.Pull{Title: pullRequest5().Pull.Title},
		Paths: []string{"a.go", "secrets/prod.env"}, Commits: []change.Commit{{ID: "c1", Message: "Fine"}}}}}
	ev := prRules(t, config.Rules{PullRequestTitle: "^feat: ", ForbiddenPaths: []string{"secrets/**"}})
	r := w.inputsRunner(ev, reader)
	drive(t, w, r, 5)
	first := w.posted(t)
	if first.State != evaluate.Failure || !strings.Contains(first.Description, "forbidden path secrets/prod.env") {
		t.Fatalf("the pull request's verdict %+v", first)
	}
	fork := change.Change{Provider: "github", Repository: "acme/app", SHA: pullRequest5().SHA, Event: change.Rerun,
		RerunOf: w.msg.Key.String()}
	w.clock.Advance(time.Minute) // a user presses Re-run later: the re-runs are the newer verdicts
	again := w.admit(t, fork, "rerun-1")
	second := change.Change{Provider: "github", Repository: "acme/app", SHA: pullRequest5().SHA, Event: change.Rerun,
		RerunOf: again.Key.String()}
	w.clock.Advance(time.Minute)
	twice := w.admit(t, second, "rerun-2")
	for _, m := range []queue.Message{again, twice} {
		w.msg = m
		drive(t, w, r, 5)
	}
	all := w.pub.all()
	if len(all) != 3 {
		t.Fatalf("%d statuses, want 3: %+v", len(all), all)
	}
	for i, s := range all[1:] {
		if s.State != first.State || s.Description != first.Description {
			t.Fatalf("re-run %d: %s %q, the pull request's was %s %q", i+1, s.State, s.Description, first.State, first.Description)
		}
	}
	for i, rd := range reader.all()[1:] {
		if rd.s.Pull == nil || rd.s.Pull.Number != 5 {
			t.Fatalf("re-run %d was read as %+v, not as pull request 5", i+1, rd.s.Pull)
		}
	}
}

// A re-run whose pull request can be identified neither by its webhook nor by its check run
// fails the pull-request rules closed.
func TestARerunWhosePullRequestCannotBeFoundFailsClosed(t *testing.T) {
	orphan := change.Change{Provider: "github", Repository: "acme/app", SHA: pullRequest5().SHA, Event: change.Rerun,
		RerunOf: strings.Repeat("ab", 32)}
	b, _ := json.Marshal(orphan)
	w := newWorldWithChange(t, b)
	reader := &fakeReader{}
	drive(t, w, w.inputsRunner(prRules(t, config.Rules{PullRequestTitle: "^feat: "}), reader), 5)
	if got := w.posted(t); got.State != evaluate.Failure ||
		!strings.Contains(got.Description, "pull request title (could not be read: the re-run names no pull request") {
		t.Fatalf("posted %+v", got)
	}
}
