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

// An operator's HTTP evaluator answers a verdict whose description,
// as the runner freezes it, is over the ledger's report ceiling. The evaluator's answer is
// within what the evaluator reads (64 KiB), but the runner re-encodes it as JSON, and
// encoding/json writes each '<' as the six bytes \u003c, so a 20 KB description becomes a
// 120 KB report; Save refuses it (ErrTooLarge) before writing anything.
//
// The promise: a delivery is never lost: after the configured attempts it gets an error
// verdict saved and published ("so no commit waits forever"), or some verdict is published.
// Here the message is redelivered as the in-process queue would (after the lease ends), ten
// times: no status is ever posted and the row never leaves pending/running, each attempt
// evaluated again, with no end.
func TestAnOversizedVerdictEndsInAPublishedVerdict(t *testing.T) {
	desc := strings.Repeat("<", 20_000)
	ev := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"state":"failure","description":%q}`, desc)
	}))
	defer ev.Close()
	w := newWorld(t)
	r := w.runner("a", &evaluate.HTTP{URL: ev.URL, Secret: []byte("s"), Client: ev.Client()})
	for i := 0; i < 10; i++ {
		res, err := r.Process(context.Background(), w.msg)
		t.Logf("attempt %d: %+v err=%v", i+1, res, err)
		if res.Done {
			break
		}
		// The queue brings the message back at its RetryAt; the lease the failed Save kept
		// must end first, so move past both.
		w.clock.Advance(time.Minute)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.pub.all(); len(got) == 0 {
		t.Fatalf("no verdict published after 10 deliveries of the message: row %v, %d Execute attempts (max 3 before an error verdict)",
			row.State, row.Attempts)
	}
	if row.State != ledger.StateDone && row.State != ledger.StateAbandoned {
		t.Fatalf("row %v after 10 deliveries", row.State)
	}
}

// The same hole through the fallback: an evaluator that keeps answering a state it may not
// ("<<<…", 20 KB) fails each attempt, and after the third the runner freezes an error
// verdict whose description quotes the evaluator's error, state included, unbounded. That
// report is over the ceiling too, so even the error verdict meant to end the wait is never
// saved: the delivery is evaluated again forever and nothing is published.
func TestAnOversizedErrorVerdictEndsInAPublishedVerdict(t *testing.T) {
	state := strings.Repeat("<", 20_000) // JSON writes each as \u003c
	ev := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"state":%q,"description":"d"}`, state)
	}))
	defer ev.Close()
	w := newWorld(t)
	r := w.runner("a", &evaluate.HTTP{URL: ev.URL, Secret: []byte("s"), Client: ev.Client()})
	r.MaxAttempts = 3
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < 10; i++ {
		res, err := r.Process(context.Background(), w.msg)
		t.Logf("attempt %d: done=%v err=%.160v", i+1, res.Done, err)
		if res.Done {
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
	for i := 0; i < 4; i++ { // the server runs again: messages come back until done
		res, _ := r.Process(ctx, w.msg)
		if res.Done {
			break
		}
		w.clock.Advance(time.Minute)
	}
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
