package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// Revived verdicts. An operator revives abandoned verdicts after a newer one was published on
// the same commit and context, while the subject's record still holds the newer one, or long
// after, once cleanup forgot the record. The newer status must keep standing: the revived
// verdicts are older, and none of them may post over it, whatever order they come in and
// whatever fails on the way.

// refusingFailures answers GitHub's 422 to every "failure" status while refuse is set.
func refusingFailures(refuse *atomic.Bool) func(int, githubtest.Created) githubtest.Behavior {
	return func(_ int, s githubtest.Created) githubtest.Behavior {
		if s.State == "failure" && refuse.Load() {
			return githubtest.Behavior{Code: http.StatusUnprocessableEntity}
		}
		return githubtest.Behavior{}
	}
}

// forgetSubject moves the clock past the subject horizon and cleans until cleanup forgot the
// commit's subject record.
func (w *commitWorld) forgetSubject() {
	w.t.Helper()
	w.clock.Advance(ledger.DefaultLimits().SubjectHorizon() + time.Hour)
	removed := 0
	for cur, i := ledger.Cursor(""), 0; ; i++ {
		if i > 10_000 {
			w.t.Fatal("cleanup never finished a lap")
		}
		rep, err := w.l.Cleanup(context.Background(), cur)
		if err != nil {
			w.t.Fatalf("cleanup: %v", err)
		}
		removed += rep.RemovedSubjects
		if rep.Done {
			break
		}
		cur = rep.Next
	}
	if removed != 1 {
		w.t.Fatalf("cleanup forgot %d subject records, want the commit's one", removed)
	}
}

func (w *commitWorld) revive(m queue.Message) {
	w.t.Helper()
	if _, err := w.l.Revive(context.Background(), m.Key, ""); err != nil {
		w.t.Fatalf("revive %s: %v", m.Key.Short(), err)
	}
}

func (w *commitWorld) wantState(m queue.Message, want ledger.State) {
	w.t.Helper()
	if r := w.row(m); r.State != want {
		w.t.Fatalf("delivery %s: %v (%q), want %v", m.Key.Short(), r.State, r.Reason, want)
	}
}

// timeless admits a pull request event whose signature proves no time (a token scheme): it
// is ordered at its admission, and its row is permanent (an abandoned one can be revived at any
// time).
func (w *commitWorld) timeless(title string) queue.Message {
	w.t.Helper()
	s, _ := json.Marshal(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: title, TargetBranch: "main"}, Whole: change.TitleInput | change.PullInput})
	body := []byte(fmt.Sprintf(`{"action":"edited","title":%q}`, title))
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "token", Identity: ledger.SumBody(body).String(),
		BodyDigest: ledger.SumBody(body)}, Change: s}
	a, err := w.l.Admit(context.Background(), d)
	if err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit %q: %+v %v", title, a, err)
	}
	w.clock.Advance(time.Second)
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

// olderAbandonedNewestPublished makes a world whose runner r has seen two failing verdicts and
// a newer passing one on the commit: GitHub refused the failing ones for good (abandoned), and
// the newer one stands. When forget is set, cleanup has forgotten the subject's record since.
// It returns the older two, oldest first, and the newest.
func olderAbandonedNewestPublished(t *testing.T, forget bool) (w *commitWorld, r *runner.Runner, oldest, older, newest queue.Message) {
	t.Helper()
	var refuse atomic.Bool
	gh := githubtest.New(githubtest.Token(ghToken))
	gh.Post = refusingFailures(&refuse)
	w = newCommitWorld(t, gh)
	r = w.runner("a", nil, 5*time.Second)
	oldest = w.timeless(badTitle)
	older = w.timeless("more stuff")
	newest = w.timeless(goodTitle)
	refuse.Store(true)
	for _, m := range []queue.Message{oldest, older} {
		if res, err := r.Process(context.Background(), m); err != nil || !res.Done {
			t.Fatalf("a verdict GitHub refuses with 422: %+v %v", res, err)
		}
		w.wantState(m, ledger.StateAbandoned)
	}
	w.process(r, newest)
	w.standing("success", 1)
	if forget {
		w.forgetSubject()
	}
	refuse.Store(false)
	return w, r, oldest, older, newest
}

// Revived while the subject's record holds the newer verdict: each is superseded by it, never
// posted.
func TestRevivedOlderVerdictsAreSupersededByTheNewestStanding(t *testing.T) {
	w, r, oldest, older, newest := olderAbandonedNewestPublished(t, false)
	w.revive(older)
	w.revive(oldest)
	w.process(r, older)
	w.process(r, oldest)
	w.standing("success", 1)
	for _, m := range []queue.Message{oldest, older} {
		if row := w.row(m); row.State != ledger.StateSuperseded || row.SupersededBy != newest.Key {
			t.Fatalf("revived verdict: %v superseded by %s, want superseded by the newest %s", row.State, row.SupersededBy.Short(), newest.Key.Short())
		}
	}
}

// Revived oldest first, after the record was forgotten: the oldest reads back, finds the newer
// status and gives way; the next one must too, although the record it finds is the one the
// oldest brought back.
func TestRevivedVerdictsOnAForgottenSubjectNeverPostOverTheNewest(t *testing.T) {
	w, r, oldest, older, _ := olderAbandonedNewestPublished(t, true)
	w.revive(oldest)
	w.revive(older)
	w.process(r, oldest)
	w.process(r, older)
	w.standing("success", 1)
	w.wantState(oldest, ledger.StateSuperseded)
	w.wantState(older, ledger.StateSuperseded)
}

// failingReadBacks fails the combined-status reads (GitHub's 502) while fail is set.
type failingReadBacks struct {
	base http.RoundTripper
	fail *atomic.Bool
}

func (f failingReadBacks) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && f.fail.Load() {
		return &http.Response{StatusCode: http.StatusBadGateway, Status: "502 Bad Gateway", Header: http.Header{},
			Body: http.NoBody, Request: req}, nil
	}
	return f.base.RoundTrip(req)
}

// A revived verdict whose read-back fails is tried again: it must read back again then, not
// post over the newer status because the record now exists.
func TestARevivedVerdictWhoseReadBackFailedNeverPostsOverTheNewest(t *testing.T) {
	w, _, oldest, _, _ := olderAbandonedNewestPublished(t, true)
	var failReads atomic.Bool
	w.client.Transport = failingReadBacks{base: w.client.Transport, fail: &failReads}
	r := w.runner("b", nil, 5*time.Second) // on the failing transport
	w.revive(oldest)
	failReads.Store(true)
	res, _ := r.Process(context.Background(), oldest)
	if res.Done {
		t.Fatal("a late verdict was done although it could not read back what stands")
	}
	failReads.Store(false)
	w.clock.Set(res.RetryAt)
	w.process(r, oldest)
	w.standing("success", 1)
	w.wantState(oldest, ledger.StateSuperseded)
}
