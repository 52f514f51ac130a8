package runner_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// An evaluation that never finishes within the invocation's time (the evaluator is slower
// than the Lambda's timeout) is a failed attempt, not a shutdown: on the last allowed one the
// error verdict is saved and published, in the time the invocation keeps for it, instead of
// the row being released for ever (each invocation cut, no verdict, the commit waiting).
func TestAnEvaluationOutOfTimeIsAFailedAttempt(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
		<-ctx.Done()
		return evaluate.Verdict{}, ctx.Err()
	}))
	r.MaxAttempts = 1
	r.Margin = 100 * time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the invocation's deadline
	defer cancel()
	res, err := r.Process(runner.FirstOfInvocation(ctx), w.msg)
	got := w.pub.all()
	if err != nil || !res.Done || len(got) != 1 || got[0].State != evaluate.Error {
		t.Fatalf("an evaluation cut by the invocation's deadline on its last attempt: result %+v, err %v, published %+v, row %v; "+
			"want the error verdict published", res, err, got, w.state(t))
	}
	if !strings.Contains(got[0].Description, "did not finish") {
		t.Fatalf("error verdict %q does not say the evaluation ran out of time", got[0].Description)
	}
}

// A message processed with just over two margins left in the invocation (the tail of a batch
// processed one message after another, or a Claim that waited on the row lock) is not the first of
// its invocation, so it is claimed only with a whole lease window left besides the two margins:
// here it goes back to the queue unclaimed three times, and an invocation with time to spare then
// publishes the evaluator's verdict. Claimed, its evaluation would have had 20 ms, and three such
// cuts would have frozen "did not finish within the invocation's time" for an evaluator that
// answers in 300 ms.
//
// Promised (docs/runner.md, invocation time): a message with no time for its evaluation spends no
// attempt; an error verdict stands for an evaluation that failed or timed out, not for the
// runner's own scheduling.
func TestAnAttemptGivenNoTimeToEvaluateFreezesNoErrorVerdict(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
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

// slowClaims is a ledger whose Claim answers after a delay (EFS out of burst credits, a
// DynamoDB throttle with SDK retries).
type slowClaims struct {
	ledger.Ledger
	delay time.Duration
}

func (s slowClaims) Claim(ctx context.Context, key ledger.Key, b ledger.Digest, owner string, leaseFor time.Duration) (ledger.Claim, error) {
	time.Sleep(s.delay)
	return s.Ledger.Claim(ctx, key, b, owner, leaseFor)
}

// The message is the first of every invocation, and its Claim takes a little more than a margin
// (EFS out of burst credits, a throttled store with SDK retries). Whether it had all the
// invocation's time is judged when the runner takes it up, not after the claim: the runner's own
// work spends none of its fairness. So an evaluator that never answers is cut at every invocation
// as a failed attempt, and the third freezes the error verdict. Judged after the claim, every cut
// was handed back and the commit never got a verdict. Scaled: margin 100 ms, claim 150 ms,
// invocations of 1.5 s.
//
// Promised: no commit waits forever; an evaluation that timed out with a fair time (the first of
// its invocation) is a failed attempt, and MaxAttempts of them freeze an error verdict.
func TestASlowClaimDoesNotMakeTheFirstMessageUnfair(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
		calls++
		<-ctx.Done() // never answers
		return evaluate.Verdict{}, ctx.Err()
	}))
	r.Ledger = slowClaims{Ledger: w.l, delay: 150 * time.Millisecond}
	r.Margin = 100 * time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		r.Process(runner.FirstOfInvocation(ctx), w.msg) // the first message of its invocation
		cancel()
		if len(w.pub.all()) > 0 {
			break
		}
		w.clock.Advance(time.Minute)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	got := w.pub.all()
	if len(got) == 0 || got[0].State != evaluate.Error {
		t.Fatalf("%d evaluations cut by the deadline, each the first message of its invocation: row %v, %d attempts, %d failures, "+
			"published %+v; want an error verdict after 3", calls, row.State, row.Attempts, row.Failures, got)
	}
}

// The route is built within the evaluation's own time (ending two margins before the deadline),
// and the evaluation gets what the route left. A secret read that hangs past that bound is a route
// error and the attempt is handed back, never counted. A read that is slow and answers just before
// the bound (Secrets Manager throttling, the SDK's retries with back-off) leaves the evaluation
// almost no time: a route build longer than a margin makes the message no longer fair, so its cut
// evaluation is handed back too, not counted. Counted, three such invocations froze "evaluation
// failed 3 times: ... did not finish within the invocation's time" for an evaluator that answers
// in 30 ms.
//
// Promised (docs/runner.md, invocation time): an evaluation that had all the time the deployment
// gives and has not finished is a failed attempt; an error verdict stands for an evaluation that
// failed or timed out, not for the runner's own work (the claim, the route). Scaled: margin 50 ms,
// invocations of 600 ms, the route answers 5 ms before its bound.
func TestASlowRouteBuildDoesNotCountTheCutEvaluation(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", nil)
	ev := evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
		calls++
		select {
		case <-time.After(30 * time.Millisecond): // a healthy evaluator
			return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
		case <-ctx.Done():
			return evaluate.Verdict{}, ctx.Err()
		}
	})
	r.Margin = 50 * time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.Routes = func(ctx context.Context, _ string) (*runner.Route, error) {
		if dl, ok := ctx.Deadline(); ok { // the secret read answers just before the bound
			time.Sleep(time.Until(dl) - 5*time.Millisecond)
		}
		return &runner.Route{Evaluator: ev, Publisher: w.pub, Context: "amiss/verdict"}, nil
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		r.Process(runner.FirstOfInvocation(ctx), w.msg)
		cancel()
		if len(w.pub.all()) > 0 {
			break
		}
		w.clock.Advance(time.Minute)
	}
	got := w.pub.all()
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	if len(got) > 0 && got[0].State != evaluate.Success || row.Failures > 0 {
		desc := ""
		if len(got) > 0 {
			desc = got[0].Description
		}
		t.Fatalf("published %d statuses (first %q); row %v, %d attempts, %d failures after %d evaluations: the route's slow "+
			"secret read took the evaluation's time, and its cut was counted as a failed evaluation", len(got), desc, row.State,
			row.Attempts, row.Failures, calls)
	}
}
