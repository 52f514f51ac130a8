package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A delivery whose route cannot be built when it is claimed for evaluation (the route was
// removed from the configuration, or its evaluator secret or publish token cannot be read):
// execute hands the attempt back with Unclaim every time (runner.go, execute: "Nothing was
// evaluated, so the attempt is handed back"), so neither Attempts nor Failures ever grows,
// and nothing else bounds the wait. The row stays pending for ever: re-claimed every retry
// delay, never given a verdict, never abandoned, never cleaned (cleanup keeps pending rows
// however old), holding its capacity slot. The same failure on a saved verdict is retried on
// the publish budget and then abandoned (TestUnbuildableRouteIsRetriedOnThePublishSchedule).
//
// Promised (DESIGN 7; the brief's hard promise): no commit waits forever; "a dead publication
// cannot pin capacity forever" (DESIGN 3, Abandon). Here up to 200 hours of ledger time pass, far
// past the 72 h publish budget, and the row must have left pending/running.
func TestAnUnbuildableRouteAtExecuteDoesNotWaitForever(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", nil)
	r.RetryDelay = 30 * time.Minute
	r.PublishBudget = 72 * time.Hour
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return nil, errors.New(`route "r" is not configured`)
	}
	claims := followRetries(w, r, 400) // every 30 min: 200 hours, past twice the publish budget
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	if row.State == ledger.StatePending || row.State == ledger.StateRunning {
		t.Fatalf("after %d claims over %s of ledger time (publish budget 72h), the row is still %v with %d attempts and %d failures: "+
			"the delivery waits for ever; want it ended (an error verdict, abandoned with its reason)",
			claims, w.clock.Now().Sub(epoch), row.State, row.Attempts, row.Failures)
	}
}

// The verdict frozen for a route that could not be built carries the default context (there
// was no route to take one from); an operator who republishes it once the route exists again
// gets exactly that posted: what is frozen is what is published.
func TestAnUnroutableVerdictIsRepublishedAsFrozen(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", nil)
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := r.Routes
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return nil, errors.New(`route "r" is not configured`)
	}
	w.clock.Advance(145 * time.Hour) // twice the publish budget since admission
	untilDone(w, r, 1)
	if st := w.state(t); st != ledger.StateAbandoned {
		t.Fatalf("row %v: want abandoned twice the publish budget after admission", st)
	}
	if _, err := w.l.Revive(context.Background(), w.msg.Key, ""); err != nil {
		t.Fatal(err)
	}
	r.Routes = routes
	if res, err := r.Process(context.Background(), w.msg); err != nil || !res.Done {
		t.Fatalf("republish: %+v %v", res, err)
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].Context != runner.DefaultContext || got[0].State != "error" || got[0].TargetURL != "" {
		t.Fatalf("published %+v: want the error verdict as frozen, under the default context", got)
	}
}

// A secret read that hangs while the route is built (Secrets Manager accepting connections
// and never answering) used to run until the invocation died at its deadline: the attempt was
// lost, not handed back, and after 12 of them "the runner stopped while building it" froze an
// error verdict for a commit whose evaluation never ran. The route is built within the
// invocation's time (ending two margins before the deadline), so the hang is a route error:
// the attempt is handed back before the deadline, however many times, and once the secret
// can be read the evaluator's verdict is the one published.
func TestARouteHangingOnASecretIsHandedBackBeforeTheDeadline(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	r.Margin = 50 * time.Millisecond
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := r.Routes
	r.Routes = func(ctx context.Context, _ string) (*runner.Route, error) {
		<-ctx.Done() // the read hangs until the caller gives up
		return nil, fmt.Errorf("route r: publish token: %w", ctx.Err())
	}
	for i := range 15 {
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond) // the invocation's deadline
		dl, _ := ctx.Deadline()
		done := make(chan error, 1)
		go func() { _, err := r.Process(runner.FirstOfInvocation(ctx), w.msg); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("invocation %d: the runner is still building the route 5 s after its deadline (the Lambda would have been killed, the attempt lost)", i)
		}
		cancel()
		if over := time.Since(dl); over > -r.Margin {
			t.Fatalf("invocation %d: the runner was still building the route %s after the deadline's margin", i, over+r.Margin)
		}
		if err == nil {
			t.Fatalf("invocation %d: a route that could not be built answered no error", i)
		}
		row, ierr := w.l.Inspect(context.Background(), w.msg.Key)
		if ierr != nil {
			t.Fatal(ierr)
		}
		if lost := row.Attempts - row.Failures; row.State != ledger.StatePending || lost != 0 {
			t.Fatalf("invocation %d: row %v with %d attempts, %d failures: want the attempt handed back", i, row.State, row.Attempts, row.Failures)
		}
		w.clock.Advance(time.Minute)
	}
	r.Routes = routes
	untilDone(w, r, 1)
	if got := w.pub.all(); len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v: want the evaluator's verdict once the secret can be read", got)
	}
}
