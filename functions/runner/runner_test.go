package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// recorder is a publisher that records statuses and fails as scripted.
type recorder struct {
	mu       sync.Mutex
	statuses []publish.Status
	fail     []error
}

func (p *recorder) Publish(ctx context.Context, s publish.Status) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.fail) > 0 {
		err := p.fail[0]
		p.fail = p.fail[1:]
		if err != nil {
			return err
		}
	}
	p.statuses = append(p.statuses, s)
	return nil
}

func (p *recorder) all() []publish.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]publish.Status(nil), p.statuses...)
}

// evalFunc adapts a function to an Evaluator.
type evalFunc func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error)

func (f evalFunc) Evaluate(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
	return f(ctx, s)
}

type world struct {
	l     *localfs.Ledger
	clock *ledger.ManualClock
	pub   *recorder
	msg   queue.Message
}

func newWorld(t *testing.T) *world {
	t.Helper()
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: clock, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s, _ := json.Marshal(subject.Subject{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
		Event: "push"})
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: "i", BodyDigest: ledger.SumBody([]byte("b"))},
		Subject: s}
	if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	return &world{l: l, clock: clock, pub: &recorder{}, msg: queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}}
}

func (w *world) runner(owner string, ev evaluate.Evaluator) *runner.Runner {
	return &runner.Runner{Ledger: w.l, Owner: owner, Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond,
		RetryDelay: time.Second, Now: w.clock.Now,
		Routes: func(name string) (*runner.Route, error) {
			if name != "r" {
				return nil, fmt.Errorf("no route %s", name)
			}
			return &runner.Route{Evaluator: ev, Publisher: w.pub, Context: "amiss/verdict", TargetURL: "https://ci.example.com"}, nil
		}}
}

func verdict(state, desc string) evaluate.Evaluator {
	return evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		return evaluate.Verdict{State: state, Description: desc}, nil
	})
}

func (w *world) state(t *testing.T) ledger.State {
	r, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

func TestExecutePublishComplete(t *testing.T) {
	w := newWorld(t)
	res, err := w.runner("a", verdict("failure", "failed: pull request title")).Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("%+v %v", res, err)
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].State != "failure" || got[0].Repository != "acme/app" || got[0].Context != "amiss/verdict" {
		t.Fatalf("statuses %+v", got)
	}
	if w.state(t) != ledger.StateDone {
		t.Fatalf("row %v", w.state(t))
	}
	// A redelivered message is a duplicate: nothing more is posted.
	if res, _ := w.runner("b", verdict("success", "x")).Process(context.Background(), w.msg); !res.Done || len(w.pub.all()) != 1 {
		t.Fatalf("redelivery posted again")
	}
}

// A worker paused past its lease never saves or publishes; the one that took over publishes.
func TestPausedWorkerLosesItsLease(t *testing.T) {
	for _, ignoresCancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("evaluator-ignores-cancel=%v", ignoresCancel), func(t *testing.T) {
			w := newWorld(t)
			entered, release := make(chan struct{}), make(chan struct{})
			slow := evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
				close(entered)
				if ignoresCancel {
					<-release // paused: does not notice the cancel
				} else {
					select {
					case <-ctx.Done():
						return evaluate.Verdict{}, ctx.Err()
					case <-release:
					}
				}
				return evaluate.Verdict{State: "success", Description: "by the paused worker"}, nil
			})
			a := w.runner("a", slow)
			if ignoresCancel {
				a.RenewEvery = time.Hour // paused: its keeper does not get to run either
			}
			done := make(chan runner.Result)
			go func() { r, _ := a.Process(context.Background(), w.msg); done <- r }()
			<-entered
			w.clock.Advance(31 * time.Second) // the lease ends by the ledger's clock
			b := w.runner("b", verdict("failure", "by the worker that took over"))
			var res runner.Result
			for i := 0; ; i++ { // a's keeper may still hold the row lock for an instant
				r, err := b.Process(context.Background(), w.msg)
				if err == nil && r.Done {
					res = r
					break
				}
				if i > 100 {
					t.Fatalf("takeover: %+v %v", r, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			close(release)
			ra := <-done
			if !ra.Done || !res.Done {
				t.Fatalf("results %+v %+v", ra, res)
			}
			got := w.pub.all()
			if len(got) != 1 || got[0].Description != "by the worker that took over" {
				t.Fatalf("published %+v: want only the takeover's verdict", got)
			}
			row, _ := w.l.Inspect(context.Background(), w.msg.Key)
			if row.State != ledger.StateDone || row.Attempts != 2 {
				t.Fatalf("row %v, %d attempts", row.State, row.Attempts)
			}
		})
	}
}

func TestFailedEvaluationsBecomeAnErrorVerdict(t *testing.T) {
	w := newWorld(t)
	failing := evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		return evaluate.Verdict{}, errors.New("evaluator endpoint unreachable")
	})
	r := w.runner("a", failing)
	r.MaxAttempts = 3
	for i := 1; i <= 3; i++ {
		res, err := r.Process(context.Background(), w.msg)
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if res.Done || len(w.pub.all()) != 0 || w.state(t) != ledger.StatePending {
				t.Fatalf("attempt %d: %+v, %d published, row %v", i, res, len(w.pub.all()), w.state(t))
			}
			w.clock.Set(res.RetryAt)
			continue
		}
		got := w.pub.all()
		if !res.Done || len(got) != 1 || got[0].State != "error" {
			t.Fatalf("after %d attempts: %+v %+v", i, res, got)
		}
	}
}

func TestPublishFailures(t *testing.T) {
	t.Run("permanent refusal abandons", func(t *testing.T) {
		w := newWorld(t)
		w.pub.fail = []error{fmt.Errorf("%w: 404", publish.ErrPermanent)}
		res, err := w.runner("a", verdict("success", "ok")).Process(context.Background(), w.msg)
		if err != nil || !res.Done || w.state(t) != ledger.StateAbandoned {
			t.Fatalf("%+v %v, row %v", res, err, w.state(t))
		}
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		if row.Reason == "" {
			t.Fatal("no reason kept")
		}
	})
	t.Run("transient failures then success publish the frozen verdict", func(t *testing.T) {
		w := newWorld(t)
		w.pub.fail = []error{errors.New("503"), errors.New("503")}
		r := w.runner("a", verdict("success", "first evaluation"))
		res, _ := r.Process(context.Background(), w.msg)
		for i := 0; !res.Done && i < 5; i++ {
			w.clock.Set(res.RetryAt)
			// Another runner with another evaluator: it must publish the frozen verdict.
			res, _ = w.runner("b", verdict("failure", "second evaluation")).Process(context.Background(), w.msg)
		}
		got := w.pub.all()
		if !res.Done || len(got) != 1 || got[0].Description != "first evaluation" || w.state(t) != ledger.StateDone {
			t.Fatalf("%+v %+v %v", res, got, w.state(t))
		}
	})
	t.Run("too many attempts abandons", func(t *testing.T) {
		w := newWorld(t)
		w.pub.fail = []error{errors.New("503"), errors.New("503"), errors.New("503")}
		r := w.runner("a", verdict("success", "ok"))
		r.MaxPublishAttempts = 3
		res, _ := r.Process(context.Background(), w.msg)
		for i := 0; !res.Done && i < 5; i++ {
			w.clock.Set(res.RetryAt)
			res, _ = r.Process(context.Background(), w.msg)
		}
		if !res.Done || w.state(t) != ledger.StateAbandoned || len(w.pub.all()) != 0 {
			t.Fatalf("%+v %v %d", res, w.state(t), len(w.pub.all()))
		}
	})
}

func TestBusyComesBackAtRetryAt(t *testing.T) {
	w := newWorld(t)
	c, _ := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "other", time.Minute)
	res, err := w.runner("a", verdict("success", "x")).Process(context.Background(), w.msg)
	if err != nil || res.Done || !res.RetryAt.Equal(c.Lease.Expires) {
		t.Fatalf("%+v %v, want retry at %v", res, err, c.Lease.Expires)
	}
}

func TestLeaseFitsTheDeadline(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := w.runner("a", verdict("success", "x"))
	r.Margin = 5 * time.Second
	block := make(chan struct{})
	r.Routes = func(string) (*runner.Route, error) {
		return &runner.Route{Evaluator: evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
			row, _ := w.l.Inspect(ctx, w.msg.Key)
			if d := row.LeaseUntil.Sub(w.clock.Now()); d > 15*time.Second {
				t.Errorf("lease of %s with 20s left and a 5s margin", d)
			}
			close(block)
			return evaluate.Verdict{State: "success"}, nil
		}), Publisher: w.pub, Context: "c"}, nil
	}
	r.Process(ctx, w.msg)
	<-block
}

// A runner stopped during an evaluation (its context cancelled, as at shutdown) releases its
// lease: the next claim executes at once instead of waiting for the lease to end.
func TestCancelledEvaluationReleasesTheLease(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	blocking := evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
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
