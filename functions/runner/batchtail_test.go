package runner_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
)

// The deployed runner (template.yaml) has a 180 s timeout, batches of 10, a 60 s lease window
// (AMISS_LEASE) and a 5 s margin; a route's HTTP evaluator may be given up to 5 minutes
// (config: evaluator.timeout in [0, 5m]). Take an evaluator that answers in 90 s every time,
// well inside its configured 120 s. As the first message of an invocation it has 170 s: it
// answers. As a later message of a batch (SQSHandler: not FirstOfInvocation) it is claimed
// as soon as a window and two margins are left (70 s), and its evaluation is then cut two
// margins before the deadline, after as little as 60 s: a failed attempt. A delivery whose
// three attempts land late in busy batches gets "evaluation failed 3 times: the evaluation did
// not finish within the invocation's time", though its evaluator answers every time it is
// given the time any invocation gives its first message. Scaled down here by 100: window
// 600 ms, margin 50 ms, evaluator 900 ms; a late message reached with 800 ms left.
//
// Promised (DESIGN 7; docs/runner.md "Leases"): an error verdict stands only for MaxAttempts
// evaluations that really failed or timed out; "so that running out of time means the
// evaluation had a fair time" a message is claimed late in a batch only with "a whole lease
// window more besides", i.e. the runner's own scheduling must not make the failures
// (TestAnAttemptGivenNoTimeToEvaluateFreezesNoErrorVerdict). The lease window is no measure
// of how long an evaluation takes: the evaluator's own time (up to 5 min) is.
func TestABatchTailCutsAnEvaluationThatNeedsMoreThanAWindow(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
		calls++
		select {
		case <-time.After(900 * time.Millisecond): // a healthy, slow evaluator (90 s scaled)
			return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
		case <-ctx.Done():
			return evaluate.Verdict{}, ctx.Err()
		}
	}))
	r.MaxAttempts = 3
	r.Margin = 50 * time.Millisecond
	r.Lease = 600 * time.Millisecond
	r.RenewEvery = 50 * time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < 3; i++ { // three batches reach the message late: a window + 2 margins + 100 ms left
		ctx, cancel := context.WithTimeout(context.Background(), r.Lease+2*r.Margin+100*time.Millisecond)
		res, err := r.Process(ctx, w.msg) // a later record of the batch: not FirstOfInvocation
		cancel()
		t.Logf("late in batch %d: %+v %v", i+1, res, err)
		if res.Done {
			break
		}
		w.clock.Advance(time.Minute)
	}
	for i := 0; i < 3 && len(w.pub.all()) == 0; i++ { // then the first record of an invocation (180 s scaled)
		ctx, cancel := context.WithTimeout(context.Background(), 1800*time.Millisecond)
		r.Process(runner.FirstOfInvocation(ctx), w.msg)
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
		t.Fatalf("evaluator (answers in 900 ms each time) called %d times; published %d statuses (first %q), row %v, %d attempts, %d failures; "+
			"want its own verdict (success): being reached late in a batch is the runner's scheduling, not a failed evaluation",
			calls, len(got), strings.TrimSpace(desc), row.State, row.Attempts, row.Failures)
	}
}
