package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// A verdict over the ledger's report ceiling must still end in a published verdict. An
// operator's HTTP evaluator answers within what the evaluator reads (64 KiB), but the runner
// re-encodes the verdict as JSON, which writes each '<' as the six bytes \u003c: a 20 KB
// description becomes a 120 KB report, which Save refuses (ErrTooLarge) before writing
// anything. Before the fix the row was evaluated again at every delivery of its message and
// nothing was ever published; the same held for the error verdict that quotes an invalid
// 20 KB state after the last attempt. The message is redelivered as the queue would, ten
// times, past the lease each time.
func TestAnOversizedVerdictEndsInAPublishedVerdict(t *testing.T) {
	for name, answer := range map[string]string{
		"description":                       fmt.Sprintf(`{"state":"failure","description":%q}`, strings.Repeat("<", 20_000)),
		"state quoted by the error verdict": fmt.Sprintf(`{"state":%q,"description":"d"}`, strings.Repeat("<", 20_000)),
	} {
		t.Run(name, func(t *testing.T) {
			ev := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, answer)
			}))
			defer ev.Close()
			w := newWorld(t)
			r := w.runner("a", &evaluate.HTTP{URL: ev.URL, Secret: []byte("s"), Client: ev.Client()})
			r.MaxAttempts = 3
			r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			for i := 0; i < 10; i++ {
				if res, _ := r.Process(context.Background(), w.msg); res.Done {
					break
				}
				w.clock.Advance(time.Minute)
			}
			row, err := w.l.Inspect(context.Background(), w.msg.Key)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.pub.all(); len(got) == 0 || (row.State != ledger.StateDone && row.State != ledger.StateAbandoned) {
				t.Fatalf("after 10 deliveries of the message (max 3 attempts before an error verdict): %d statuses published, row %v, %d Execute attempts",
					len(got), row.State, row.Attempts)
			}
		})
	}
}

// amiss serve is stopped (SIGTERM, grace ran out) three times while
// a slow evaluation runs. Each cut releases the row, and the docs say a shutdown "is no failed
// attempt". Then the evaluator fails once (a transient error) and would succeed on the next
// try. With MaxAttempts 3 only one of three allowed failures has happened, so the delivery
// must go on to its real verdict. Observed: every Claim counts an attempt, cuts included, so
// the one transient failure lands on "attempt 4 >= 3" and an error verdict ("evaluation
// failed 4 times") is saved and published for good instead of the real one.
func TestShutdownsDoNotSpendTheEvaluationAttempts(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	calls := 0
	ev := evalFunc(func(ectx context.Context, s subject.Subject) (evaluate.Verdict, error) {
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

// An evaluation that never finishes within the invocation's time (the evaluator is slower
// than the Lambda's timeout) is a failed attempt, not a shutdown: on the last allowed one the
// error verdict is saved and published, in the time the invocation keeps for it, instead of
// the row being released for ever (each invocation cut, no verdict, the commit waiting).
func TestAnEvaluationOutOfTimeIsAFailedAttempt(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
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

// ctxLedger answers every call made with an ended context with the context's error, as a
// ledger over the network (S3) does.
type ctxLedger struct{ ledger.Ledger }

func (l ctxLedger) Save(ctx context.Context, ls ledger.Lease, report []byte) (ledger.Staged, error) {
	if err := ctx.Err(); err != nil {
		return ledger.Staged{}, err
	}
	return l.Ledger.Save(ctx, ls, report)
}

// A shutdown that lands just as the evaluation answers must not drop the verdict in hand: it
// is saved (with a bounded context of its own), so the attempt is not spent for nothing and
// the next runner publishes it without evaluating again.
func TestAShutdownAfterTheAnswerKeepsTheVerdict(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := w.runner("a", evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		cancel() // the shutdown lands as the evaluator answers
		return evaluate.Verdict{State: evaluate.Failure, Description: "failed: pull request title"}, nil
	}))
	r.Ledger = ctxLedger{w.l}
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.Process(ctx, w.msg)
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	if row.State != ledger.StateSaved && row.State != ledger.StateDone {
		t.Fatalf("row %v after a shutdown that landed with the verdict in hand: the verdict was dropped", row.State)
	}
}
