package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/runner"
)

// Two deliveries for one commit and context in one batch (the pull request opened with a
// title that breaks the rule, then edited to one that follows it) are processed side by side
// in one process: the subject record decides which posts, and the edit's verdict is the one
// left standing, whatever becomes of the first. Each record that comes back is handed in again
// (with its batch's other records) once its time has come.
func TestTwoVerdictsForOneCommitInOneBatchLeaveTheNewestStanding(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	w.clock.Set(time.Now())
	opened := w.pullRequest(badTitle, w.clock.Now().Add(-time.Minute))
	edited := w.pullRequest(goodTitle, w.clock.Now())
	r := w.runner("a", nil, 5*time.Second)
	h := &runner.SQSHandler{Runner: r}
	pending := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "opened", Body: opened.Body()}, {MessageId: "edited", Body: edited.Body()}}}
	for round := 0; len(pending.Records) > 0; round++ {
		if round > 20 {
			t.Fatalf("records %v still coming back after 20 batches", pending.Records)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := h.Handle(ctx, pending)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		back := map[string]bool{}
		for _, f := range out.BatchItemFailures {
			back[f.ItemIdentifier] = true
		}
		var next events.SQSEvent
		for _, rec := range pending.Records {
			if back[rec.MessageId] {
				next.Records = append(next.Records, rec)
			}
		}
		pending = next
		w.clock.Advance(5 * time.Minute) // past any hold-off, grant and settle time
	}
	created := len(gh.Created(commitRepo, headSHA))
	if created != 1 && created != 2 {
		t.Fatalf("%d statuses created: want the edit's, and the first's at most once before it", created)
	}
	w.standing("success", created)
}
