package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

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
	r.Routes = func(string) (*runner.Route, error) {
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
	r.Routes = func(string) (*runner.Route, error) { return nil, errors.New(`route "r" is not configured`) }
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
