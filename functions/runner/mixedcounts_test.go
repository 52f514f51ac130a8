package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// flakyRoutes wraps r.Routes: the first n calls fail to build the route, later ones build it.
func flakyRoutes(r *runner.Runner, n int) *int {
	calls := 0
	good := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		calls++
		if calls <= n {
			return nil, errors.New("route r: publish token: secrets manager unreachable")
		}
		return good(ctx, name)
	}
	return &calls
}

// Past the publish budget since admission, a route that cannot be built is released as a
// failed attempt (Release: row.Failures++), and the evaluation's error verdict counts the same
// Failures. Two route failures past the budget, then the route is back and the evaluator fails
// once (a transient error): the runner freezes "evaluation failed 3 times" after one
// evaluation that really failed.
//
// Promised: an error verdict only stands for MaxAttempts (3) evaluations that really failed or
// timed out (docs/runner.md: "Only failed evaluations count towards the 3"), or a route that
// could not be built at 3 attempts past the budget. Neither happened here.
func TestRouteFailuresPastTheBudgetAreNotCountedAsFailedEvaluations(t *testing.T) {
	w := newWorld(t)
	evals := 0
	r := w.runner("a", evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		evals++
		if evals == 1 {
			return evaluate.Verdict{}, errors.New("evaluator endpoint: 503")
		}
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	}))
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.PublishBudget = 72 * time.Hour
	flakyRoutes(r, 2)
	w.clock.Advance(73 * time.Hour) // the route was unbuildable (handed back) until past the budget
	untilDone(w, r, 10)
	got := w.pub.all()
	if len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v after %d evaluation(s), one of which failed: want the success verdict of the retry, "+
			"not an error verdict counting two route failures as failed evaluations", got, evals)
	}
}

// The other way round: two evaluations really failed early on; then the route could not be
// built (its token unreadable) for longer than the publish budget, handed back each time. The
// first attempt past the budget that cannot build the route freezes the error verdict and
// abandons the row at once, because Failures (2, from the evaluations) + 1 reaches 3: one
// route failure past the budget, not three. The route is back a minute later, too late.
//
// Promised: a route error verdict only after the route could not be built at 3 attempts past
// the publish budget; one failure after a long outage is just retried
// (TestOneTransientRouteFailureLongAfterAdmissionFreezesNoErrorVerdict).
func TestEarlierEvaluationFailuresDoNotShortenTheRouteBudget(t *testing.T) {
	w := newWorld(t)
	evals := 0
	r := w.runner("a", evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		evals++
		if evals <= 2 {
			return evaluate.Verdict{}, errors.New("evaluator endpoint: 503")
		}
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	}))
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.PublishBudget = 72 * time.Hour
	good := r.Routes
	for range 2 { // two real evaluation failures
		r.Process(context.Background(), w.msg)
		w.clock.Advance(time.Minute)
	}
	broken := true
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		if broken {
			return nil, errors.New("route r: publish token: access denied")
		}
		return good(ctx, name)
	}
	w.clock.Advance(73 * time.Hour) // the route stays broken past the budget
	r.Process(context.Background(), w.msg)
	w.clock.Advance(time.Minute)
	broken = false // fixed: the one attempt past the budget was all that failed
	untilDone(w, r, 10)
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("row %v (%q), published %+v: one route failure past the budget (after two failed evaluations) "+
			"froze the route error verdict; want it retried and the success verdict published", row.State, row.Reason, got)
	}
}

// A runner that dies while building the route (a secret read that hangs past the Lambda's
// deadline: the EFS variant in a VPC without a NAT gateway or endpoint; a panic in the
// wiring). Each claim counts an attempt nobody hands back, as for a crash under the
// evaluator, but the lost-attempts check runs only after the route is built, so it is never
// reached, and the route-error rule never fires either (nothing is returned): the row is
// claimed and lost for ever.
//
// Promised: a crash loop ends once 9 attempts are lost without an answer (docs/runner.md,
// TestACrashLoopingEvaluationEndsInAnErrorVerdict); no commit waits forever.
func TestACrashLoopWhileBuildingTheRouteEnds(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	builds := 0
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		builds++
		runtime.Goexit() // the invocation dies here: nothing after runs, nothing is handed back
		return nil, nil
	}
	for range 20 {
		done := make(chan struct{})
		go func() { defer close(done); r.Process(context.Background(), w.msg) }()
		<-done
		w.clock.Advance(time.Minute) // the dead invocation's lease runs out
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	if row.State == ledger.StatePending || row.State == ledger.StateRunning {
		t.Fatalf("after 20 claims that died building the route (%d builds), the row is %v with %d attempts, %d failures: "+
			"want the crash loop ended after 9 lost attempts", builds, row.State, row.Attempts, row.Failures)
	}
}
