package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/ledger"
)

// A runner killed at each point of a publication: after its grant to post, after its post,
// after the subject's record called its verdict standing. The next runner finishes the
// delivery, and the verdict is posted once: a post that may have landed is read back, never
// sent again blindly, and a verdict called standing is not posted again.

// dieAfter is a ledger handle whose process dies right after the named call returned: the call
// took effect, and the runner hears only that its process is gone.
type dieAfter struct {
	killable
	call string
}

func (d *dieAfter) AcquireSubject(ctx context.Context, q ledger.SubjectRequest) (ledger.SubjectGrant, error) {
	if d.dead() {
		return ledger.SubjectGrant{}, errKilled
	}
	g, err := d.killable.Ledger.AcquireSubject(ctx, q)
	if err == nil && d.call == "acquire" && g.Outcome == ledger.SubjectPost {
		d.kill()
		return ledger.SubjectGrant{}, errKilled
	}
	return g, err
}

func (d *dieAfter) ReportSubject(ctx context.Context, g ledger.SubjectGrant, o ledger.PostOutcome) (ledger.SubjectGrant, error) {
	if d.dead() {
		return ledger.SubjectGrant{}, errKilled
	}
	if d.call == "post" { // the post was made; the process dies before it reports
		d.kill()
		return ledger.SubjectGrant{}, errKilled
	}
	a, err := d.killable.Ledger.ReportSubject(ctx, g, o)
	if err == nil && d.call == "report" {
		d.kill()
		return ledger.SubjectGrant{}, errKilled
	}
	return a, err
}

func TestARunnerKilledAtAnyPointOfAPublicationLeavesOneStatus(t *testing.T) {
	for _, c := range []struct {
		call  string
		posts int // POSTs the dead runner made
	}{{"acquire", 0}, {"post", 1}, {"report", 1}} {
		t.Run("after "+c.call, func(t *testing.T) {
			gh := githubtest.New(githubtest.Token(ghToken))
			w := newCommitWorld(t, gh)
			edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
			dying := &dieAfter{killable: killable{Ledger: w.l}, call: c.call}
			a := w.runner("a", dying, 5*time.Second)
			if res, err := a.Process(context.Background(), edited); res.Done {
				t.Fatalf("the killed runner's message was done: %+v %v", res, err)
			}
			if !dying.dead() {
				t.Fatal("the runner never reached the point it is killed at")
			}
			if gh.Posts() != c.posts {
				t.Fatalf("the killed runner made %d POSTs, want %d", gh.Posts(), c.posts)
			}
			w.process(w.runner("b", nil, 5*time.Second), edited)
			w.standing("success", 1)
			if gh.Posts() != 1 {
				t.Fatalf("%d POSTs for one verdict", gh.Posts())
			}
			if r := w.row(edited); r.State != ledger.StateDone {
				t.Fatalf("row %v", r.State)
			}
		})
	}
}
