package runner_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/subject"
)

// An evaluation that never returns to the runner: the process dies under it (a panic in the
// evaluator, which aws-lambda-go turns into "the process should exit", an OOM kill, or an
// evaluator that ignores its context and is killed at the Lambda's timeout). Every claim
// counts an attempt (nothing is handed back: nobody is left to Unclaim), yet the error
// verdict is only ever decided after an evaluation returns, so a claim at an attempt past
// MaxAttempts evaluates again, and the crash loop never ends: the commit waits for ever.
//
// Promised (DESIGN 7, docs/runner.md "Failures"): after the configured number of Execute
// attempts (evaluation failed or timed out) the delivery gets an error verdict saved and
// published, so no commit waits forever.
func TestACrashLoopingEvaluationEndsInAnErrorVerdict(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		calls++
		panic("evaluator: the process dies here")
	}))
	r.MaxAttempts = 3
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	crash := func() {
		defer func() { recover() }() // the process is gone: nothing after Evaluate runs
		r.Process(context.Background(), w.msg)
	}
	for i := 0; i < 15; i++ {
		crash()
		if len(w.pub.all()) > 0 {
			break
		}
		// The dead process's lease runs out; the message comes back (queue, stranded sweep).
		w.clock.Advance(time.Minute)
	}
	// A lost attempt cannot be told from a pause or a hand-back that did not land, so the
	// runner gives up after three times MaxAttempts of them, not after MaxAttempts.
	if calls != 9 {
		t.Fatalf("evaluated %d times before giving up, want 9 (3 x MaxAttempts lost attempts)", calls)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	got := w.pub.all()
	if len(got) == 0 || got[0].State != evaluate.Error {
		t.Fatalf("after 10 claims whose evaluation killed the process (MaxAttempts 3): evaluated %d times, published %+v, row %v with %d attempts; "+
			"want an error verdict once the attempts are spent", calls, got, row.State, row.Attempts)
	}
}

// A message processed with just over two margins left in the invocation (the tail of an SQS
// batch of 10 processed one after another in one 180 s invocation, or a Claim that waited on
// the row lock) is claimed: the guard in Process lets it through. Its evaluation is then given
// what is left less two margins (here 20 ms), runs out of it, and the attempt is counted as a
// failed one. Three such invocations freeze an error verdict "did not finish within the
// invocation's time" for an evaluator that answers in 300 ms every time it is given the time.
//
// Promised (docs/runner.md): a message with no time for its evaluation spends no attempt ("A
// message that arrives with two margins or less left is not claimed (no attempt is spent on
// it)"; runner.go: "Claiming now would count an attempt whose evaluation has no time to
// run"); an error verdict stands for an evaluation that failed or timed out, not for the
// runner's own scheduling.
func TestAnAttemptGivenNoTimeToEvaluateFreezesNoErrorVerdict(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
		select {
		case <-time.After(300 * time.Millisecond): // a healthy evaluator
			return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
		case <-ctx.Done():
			return evaluate.Verdict{}, ctx.Err()
		}
	}))
	r.MaxAttempts = 3
	r.Margin = 100 * time.Millisecond
	r.Lease = time.Second // a later message of an invocation is claimed with a window and two margins left
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < 3; i++ { // three invocations reach the message with 2 margins + 20 ms left
		ctx, cancel := context.WithTimeout(context.Background(), 2*r.Margin+20*time.Millisecond)
		res, err := r.Process(ctx, w.msg)
		cancel()
		t.Logf("tight invocation %d: %+v %v", i+1, res, err)
		if res.Done {
			break
		}
		w.clock.Advance(time.Minute)
	}
	for i := 0; i < 3 && len(w.pub.all()) == 0; i++ { // invocations with time to spare
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.Process(ctx, w.msg)
		cancel()
		w.clock.Advance(time.Minute)
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].State != evaluate.Success {
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		desc := ""
		if len(got) > 0 {
			desc = got[0].Description
		}
		t.Fatalf("published %d statuses (first %q), row %v after %d attempts; want the evaluator's own verdict (success): "+
			"20 ms of evaluation time is no attempt", len(got), strings.TrimSpace(desc), row.State, row.Attempts)
	}
}
