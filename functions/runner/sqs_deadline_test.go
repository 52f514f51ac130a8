package runner_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/runner"
)

// deadlineVisibility records, for each visibility change, whether the invocation's context had
// already ended when it was asked for (SQS would then never hear of it).
type deadlineVisibility struct {
	mu    sync.Mutex
	got   []*sqs.ChangeMessageVisibilityInput
	ended []string
}

func (v *deadlineVisibility) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.got = append(v.got, in)
	if ctx.Err() != nil {
		v.ended = append(v.ended, *in.ReceiptHandle)
		return nil, ctx.Err()
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// A full batch whose every evaluation hangs runs side by side until the evaluations are cut
// two margins before the invocation's deadline: each record's attempt is then counted, its
// lease handed back and its message's visibility set inside the invocation, all ten at once.
// Scaled: invocation 3 s, margin 250 ms (ten records handing back at once on a loaded machine
// outlasted a 50 ms margin), window 1 s.
func TestAFullBatchCutByTheDeadlineHandsEveryRecordBackInTime(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	w.clock.Set(time.Now())
	msgs := w.admitPushes(nil, "acme/app", 10)
	r := w.runner("a", nil, 5*time.Second)
	r.Now = time.Now
	r.Margin, r.Lease, r.RenewEvery = 250*time.Millisecond, time.Second, 50*time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Evaluator = evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
				<-ctx.Done() // an endpoint that accepts and never answers
				return evaluate.Verdict{}, ctx.Err()
			})
		}
		return rt, err
	}
	batch := sqsBatch(msgs)
	vis := &deadlineVisibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := h.Handle(ctx, batch)
	if err != nil || len(out.BatchItemFailures) != len(msgs) {
		t.Fatalf("%+v %v: want every record back", out, err)
	}
	vis.mu.Lock()
	defer vis.mu.Unlock()
	if len(vis.got) != len(msgs) || len(vis.ended) != 0 {
		t.Fatalf("%d visibility changes, %d of them asked after the invocation ended (%v): want one for each record, each inside it",
			len(vis.got), len(vis.ended), vis.ended)
	}
	for _, m := range msgs {
		if row := w.row(m); row.Attempts != 1 || row.Failures != 1 || row.Owner != "" {
			t.Errorf("row %s: %v, %d attempts, %d failures, owner %q: want one failed attempt counted and the lease handed back",
				m.Key.Short(), row.State, row.Attempts, row.Failures, row.Owner)
		}
	}
}
