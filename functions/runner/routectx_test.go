package runner_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// hangingRoutes is a route lookup whose secret read hangs until its context ends (the
// wiring passes the lookup's ctx to secrets.Get); entered is closed on the first call.
func hangingRoutes(entered chan struct{}) func(context.Context, string) (*runner.Route, error) {
	var once bool
	return func(ctx context.Context, name string) (*runner.Route, error) {
		if !once {
			once = true
			close(entered)
		}
		<-ctx.Done()
		return nil, fmt.Errorf("route %s: publish token: secrets: get arn: %w", name, ctx.Err())
	}
}

// shutdownWhileBuilding has r process w's message with a route build that hangs, and shuts
// down (cancels the invocation's context) once the build has begun.
func shutdownWhileBuilding(t *testing.T, r *runner.Runner, w *world) {
	t.Helper()
	entered := make(chan struct{})
	r.Routes = hangingRoutes(entered)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := r.Process(ctx, w.msg); done <- err }()
	<-entered
	cancel() // the shutdown
	t.Logf("Process answered: %v", <-done)
}

// A shutdown (amiss serve stopping: the caller's context cancelled) lands while the route is
// being built for an Execute. Since the route lookup takes the runner's context (change 2),
// the secret read is cut and answers ctx.Err(): a route error. execute then hands the attempt
// back with Unclaim(ctx, ...) under the caller's own, cancelled, context, not a detached one
// as every other hand-back on a shutdown does, so the hand-back never lands: the lease keeps
// the row until it runs out, and the next `amiss serve` finds it Busy.
//
// Promised (docs/runner.md, amiss serve): "what is still running then is cut (a cut evaluation
// or publication gives its lease back)"; a shutdown "hands the row back with Unclaim"
// (TestCancelledEvaluationReleasesTheLease). Before change 2 the route lookup had no context
// and a shutdown could not cut it.
func TestAShutdownWhileBuildingTheRouteGivesTheLeaseBack(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict(evaluate.Success, "ok"))
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	shutdownWhileBuilding(t, r, w)
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	c, cerr := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "b", time.Minute)
	if cerr != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim right after a shutdown cut the route build: %v %v (row %v owned by %q); want Execute at once: "+
			"the cut attempt's lease was not given back (Unclaim ran under the cancelled context)", c.Outcome, cerr, row.State, row.Owner)
	}
}

// The same shutdown while the route of a saved verdict is being built (claim answered
// Publish). The cut secret read becomes a publish.Operator error and goes through
// publishFailed: counted as a publish failure and a refusal ("the provider refused the
// credentials ... fix the token or the route", at error level), the attempt spent, and the row
// Released (under the cancelled context, so not even that lands) for the backoff instead of
// Unclaimed at once.
//
// Promised (docs/runner.md, Failures): "A publication cut by the caller (a shutdown) is not the
// provider's failure: the lease is given back at once with its attempt (Unclaim), so the next
// claim publishes without waiting for the schedule" (TestCancelledPublicationReleasesTheLease).
func TestAShutdownWhileBuildingTheRouteOfASavedVerdictIsNoPublishFailure(t *testing.T) {
	w := newWorld(t)
	stageSaved(t, w, `{"state":"success","description":"ok","context":"amiss/verdict"}`)
	r := w.runner("a", verdict(evaluate.Success, "ok"))
	var logs strings.Builder
	r.Log = slog.New(slog.NewTextHandler(&logs, nil))
	m := &counter{}
	r.Metrics = m
	shutdownWhileBuilding(t, r, w)
	var problems []string
	if n := m.get("publish_failures"); n != 0 {
		problems = append(problems, fmt.Sprintf("counted %d publish_failures", n))
	}
	if n := m.get("publish_refused"); n != 0 {
		problems = append(problems, fmt.Sprintf("counted %d publish_refused", n))
	}
	if strings.Contains(logs.String(), "provider refused the credentials") {
		problems = append(problems, "logged an operator error (\"the provider refused the credentials ...\")")
	}
	c, cerr := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "b", time.Minute)
	if cerr != nil || c.Outcome != ledger.Publish {
		problems = append(problems, fmt.Sprintf("the next claim answered %v %v, want Publish at once (lease not given back)", c.Outcome, cerr))
	}
	if len(problems) > 0 {
		t.Fatalf("a shutdown during the route build of a saved verdict: %s", strings.Join(problems, "; "))
	}
}

// The route is built within the evaluation's own time (evaluationContext, ending two margins
// before the deadline), and the evaluation gets what the route left. A secret read that hangs
// past that bound is a route error and the attempt is handed back, never counted. But a read
// that is slow and answers just before the bound (Secrets Manager throttling, the SDK's
// retries with backoff) leaves the evaluation no time: the message is the first of its
// invocation ("fair": the runner's own route building "spends none of it"), so the cut is a
// failed attempt, and three such invocations freeze "evaluation failed 3 times: ... did not
// finish within the invocation's time" for an evaluator that answers in 30 ms. The same slow
// Secrets Manager a few milliseconds slower would have been handed back every time.
//
// Promised (docs/runner.md): "in Lambda an evaluation is given the time left less two margins
// ... one that has not finished by then is a failed attempt"; an error verdict stands for an
// evaluation that failed or timed out, not for the runner's own work (the claim, the route).
// Scaled: margin 50 ms, invocations of 600 ms, the route answers 5 ms before its bound.
func TestASlowRouteBuildDoesNotCountTheCutEvaluation(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", nil)
	ev := evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
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
