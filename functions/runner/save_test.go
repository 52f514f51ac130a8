package runner_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/ledger"
)

// A verdict over the ledger's report ceiling still ends in a published verdict. An operator's HTTP
// evaluator answers within what the evaluator reads (64 KiB), but the runner re-encodes the
// verdict as JSON, which writes each '<' as the six bytes \u003c: a 20 KB description becomes a
// 120 KB report, which Save refuses (ErrTooLarge) before writing anything. The description is cut
// before it is frozen, and an error verdict saying so is saved when the verdict still does not
// fit. Before, the row was evaluated again at every delivery of its message and nothing was ever
// published; the same held for the error verdict that quotes an invalid 20 KB state after the last
// attempt. The message is redelivered as the queue would, ten times, past the lease each time.
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

// busySave is a ledger whose first n Saves answer ErrBusy (a row lock held past LockWait, an
// S3 write that lost its compare-and-swap race too often, an EFS hiccup): nothing is written.
type busySave struct {
	ledger.Ledger
	mu sync.Mutex
	n  int
}

func (s *busySave) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	s.mu.Lock()
	fail := s.n > 0
	s.n--
	s.mu.Unlock()
	if fail {
		return ledger.Staged{}, fmt.Errorf("save %s: %w: waited 10s for the row lock", l.Key.Short(), ledger.ErrBusy)
	}
	return s.Ledger.Save(ctx, l, report)
}

// The evaluator answers "success" at every attempt; the ledger's Save answers Busy for the first
// three (a transient ledger fault, nothing written). Each of those attempts is handed back
// (Unclaim), so none is counted, and the fourth claim evaluates again and publishes the
// evaluator's verdict. Left counted, the fourth claim froze "evaluation did not finish" for a
// commit whose evaluation answered three times.
//
// Promised (DESIGN 7; docs/runner.md, attempts): the error verdict comes after MaxAttempts Execute
// attempts whose evaluation failed or timed out, or a crash loop.
func TestATransientSaveFailureIsNoFailedEvaluation(t *testing.T) {
	w := newWorld(t)
	calls := 0
	r := w.runner("a", evalFunc(func(context.Context, change.Change) (evaluate.Verdict, error) {
		calls++
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	}))
	r.MaxAttempts = 3
	r.Ledger = &busySave{Ledger: w.l, n: 3}
	r.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < 8; i++ {
		res, err := r.Process(context.Background(), w.msg)
		t.Logf("delivery %d: %+v %v", i+1, res, err)
		if res.Done {
			break
		}
		w.clock.Advance(time.Minute) // the message comes back once the lease has ended
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].State != evaluate.Success {
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		t.Fatalf("evaluator answered success %d times, the ledger's Save was busy 3 times: published %+v (row %v, %d attempts); "+
			"want the evaluator's verdict (success): no evaluation failed", calls, got, row.State, row.Attempts)
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
	r := w.runner("a", evalFunc(func(context.Context, change.Change) (evaluate.Verdict, error) {
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
