package runner_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

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

// The message is the first of every invocation: Process finds it fresh (nothing of the
// invocation spent) and claims it with what is left. The claim itself takes a little more
// than a margin, so when execute asks again (fair := r.fresh(ctx), runner.go) it is no longer
// fresh: an evaluation cut by the deadline is then "cut by the runner's scheduling" and handed
// back with Unclaim, attempt and all, to come again at once. An evaluator that never answers
// is cut at every invocation, always as the first message, and never counted: the commit
// never gets its error verdict. Scaled: margin 100 ms, claim 150 ms, invocations of 1.5 s.
//
// Promised: no commit waits forever; an evaluation that timed out with a fair time (the first
// of its invocation, given all the time the deployment gives any message but for the
// runner's own claim) is a failed attempt, and MaxAttempts of them freeze an error verdict.
func TestASlowClaimDoesNotMakeTheFirstMessageUnfair(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
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
