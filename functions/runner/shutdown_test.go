package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A runner stopped during an evaluation (its context cancelled, as at shutdown) releases its
// lease: the next claim executes at once instead of waiting for the lease to end.
func TestCancelledEvaluationReleasesTheLease(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	blocking := evalFunc(func(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
		close(entered)
		<-ctx.Done()
		return evaluate.Verdict{}, ctx.Err()
	})
	done := make(chan runner.Result)
	go func() { r, _ := w.runner("a", blocking).Process(ctx, w.msg); done <- r }()
	<-entered
	cancel()
	res := <-done
	if res.Done {
		t.Fatal("a cancelled evaluation reported done")
	}
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	if row.State != ledger.StatePending || row.Owner != "" {
		t.Fatalf("lease not released: %v owned by %q", row.State, row.Owner)
	}
}

// amiss serve is stopped (SIGTERM, grace ran out) three times while a slow evaluation runs; each
// cut hands the attempt back (Unclaim), so it is neither a failed nor a lost attempt. Then the
// evaluator fails once (a transient error) and would succeed on the next try: with MaxAttempts 3
// only one of three allowed failures has happened, so the delivery goes on to its real verdict.
// Counting every claim made that one failure "attempt 4 >= 3" and froze "evaluation failed 4
// times" for good.
func TestShutdownsDoNotSpendTheEvaluationAttempts(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	calls := 0
	ev := evalFunc(func(ectx context.Context, s change.Change) (evaluate.Verdict, error) {
		calls++
		switch {
		case calls <= 3: // a slow evaluation, cut by a shutdown
			<-ectx.Done()
			return evaluate.Verdict{}, ectx.Err()
		case calls == 4:
			return evaluate.Verdict{}, errors.New("evaluate: 502 from the evaluator (transient)")
		}
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	})
	r := w.runner("a", ev)
	r.MaxAttempts = 3
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < 3; i++ { // three shutdowns mid-evaluation
		pctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		res, err := r.Process(pctx, w.msg)
		if res.Done || err != nil {
			t.Fatalf("cut %d: %+v %v", i, res, err)
		}
		w.clock.Advance(time.Minute)
	}
	untilDone(w, r, 4) // the server runs again: messages come back until done
	got := w.pub.all()
	if len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("after 3 shutdowns and 1 transient evaluator failure (MaxAttempts 3): published %+v, want the real verdict (success)", got)
	}
}

// saveLands: a Save request that reached the ledger before the caller's context was cancelled.
type saveLands struct{ ledger.Ledger }

func (s saveLands) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	return s.Ledger.Save(context.WithoutCancel(ctx), l, report)
}

// A shutdown (the caller's context cancelled) during the last allowed attempt is no failed
// evaluation: it hands the row back for a later attempt as on earlier attempts, and never saves
// "evaluation failed 3 times: context canceled" as the delivery's verdict for good.
func TestAShutdownOnTheLastAttemptFreezesNoVerdict(t *testing.T) {
	for _, lands := range []bool{true, false} {
		name := "plain FileLedger"
		if lands {
			name = "save landed before the cancel"
		}
		t.Run(name, func(t *testing.T) {
			bad := 0
			for i := 0; i < 20; i++ {
				w := newWorld(t)
				ctx := context.Background()
				for range 2 { // two earlier attempts
					c, err := w.l.Claim(ctx, w.msg.Key, w.msg.Binding, "x", 30*time.Second)
					if err != nil || c.Outcome != ledger.Execute {
						t.Fatalf("claim %+v %v", c, err)
					}
					if err := w.l.Release(ctx, *c.Lease, time.Time{}); err != nil {
						t.Fatal(err)
					}
				}
				pctx, cancel := context.WithCancel(ctx)
				r := w.runner("a", evalFunc(func(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
					cancel() // the Lambda shuts down
					<-ctx.Done()
					return evaluate.Verdict{}, ctx.Err()
				}))
				if lands {
					r.Ledger = saveLands{w.l}
				}
				r.Process(pctx, w.msg)
				if row, err := w.l.Inspect(ctx, w.msg.Key); err == nil && (row.State == ledger.StateSaved || row.State == ledger.StateDone) {
					bad++
					if bad == 1 {
						t.Logf("row %v, published %+v", row.State, w.pub.all())
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of 20 shutdowns on the last attempt froze an error verdict", bad)
			}
		})
	}
}

type blocking struct{ entered chan struct{} }

func (b *blocking) Publish(ctx context.Context, s publish.Status) error {
	close(b.entered)
	<-ctx.Done()
	return &publish.Error{Class: publish.Transient, Err: ctx.Err()}
}

func (b *blocking) Standing(context.Context, publish.Status) (publish.Standing, error) {
	return publish.StandingNone, nil
}

// A publication cut by the caller (a shutdown) is not the provider's failure: the lease is
// given back at once, so the next claim publishes without waiting for the schedule.
func TestCancelledPublicationReleasesTheLease(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	p := &blocking{entered: entered}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	done := make(chan runner.Result)
	go func() { res, _ := r.Process(ctx, w.msg); done <- res }()
	<-entered
	cancel()
	if res := <-done; res.Done {
		t.Fatal("a cut publication reported done")
	}
	c, err := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "b", time.Minute)
	if err != nil || c.Outcome != ledger.Publish {
		t.Fatalf("claim after the cut: %v %v, want Publish at once", c.Outcome, err)
	}
}

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

// A shutdown (amiss serve stopping: the caller's context cancelled) lands while the route is being
// built for an Execute. The route lookup runs under the runner's context, so the secret read is
// cut and answers ctx.Err(): a route error, handed back with Unclaim under a context of its own,
// as every hand-back on a shutdown is. Under the caller's own, cancelled, context the hand-back
// never landed: the lease kept the row until it ran out, and the next amiss serve found it Busy.
//
// Promised (docs/runner.md, amiss serve): "what is still running then is cut (a cut evaluation or
// publication gives its lease back)"; a shutdown hands the row back with Unclaim
// (TestCancelledEvaluationReleasesTheLease).
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

// The same shutdown while the route of a saved verdict is being built (the claim answered
// Publish). The cut secret read is no failed publication: it is not counted as a publish failure
// nor as a refusal ("the provider refused the credentials ... fix the token or the route", at
// error level), and the row is handed back at once (Unclaim) instead of released for the back-off.
//
// Promised (docs/runner.md, publication): a publication cut by the caller (a shutdown) is not the
// provider's failure: the lease is given back at once with its attempt, so the next claim
// publishes without waiting for the schedule (TestCancelledPublicationReleasesTheLease).
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
