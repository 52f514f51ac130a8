package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
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
		Routes: func(_ context.Context, name string) (*runner.Route, error) {
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
			if ra.Done || !res.Done {
				t.Fatalf("results %+v %+v: the paused worker hands its message back, the one that took over is done", ra, res)
			}
			// The handed-back message comes again and finds the delivery done.
			if again, err := a.Process(context.Background(), w.msg); err != nil || !again.Done {
				t.Fatalf("handed-back message: %+v %v", again, err)
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
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
			row, _ := w.l.Inspect(ctx, w.msg.Key)
			if d := row.LeaseUntil.Sub(w.clock.Now()); d > 15*time.Second {
				t.Errorf("lease of %s with 20s left and a 5s margin", d)
			}
			close(block)
			return evaluate.Verdict{State: "success"}, nil
		}), Publisher: w.pub, Context: "c"}, nil
	}
	r.Process(runner.FirstOfInvocation(ctx), w.msg) // less than a window left: claimed only as the first
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

// counter records the runner's metrics.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Count(name string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name] += n
}

func (c *counter) Latency(string, time.Duration) {}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// scripted is a publisher whose answer depends on the ledger's clock.
type scripted struct {
	mu       sync.Mutex
	clock    *ledger.ManualClock
	answer   func(now time.Time) error
	attempts []time.Time
	posted   []publish.Status
}

func (p *scripted) Publish(ctx context.Context, s publish.Status) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.attempts = append(p.attempts, now)
	if err := p.answer(now); err != nil {
		return err
	}
	p.posted = append(p.posted, s)
	return nil
}

// drive processes the message until it is done, moving the clock to each retry time.
func drive(t *testing.T, w *world, r *runner.Runner, limit int) {
	t.Helper()
	var out []runner.Result
	for i := 0; ; i++ {
		if i >= limit {
			t.Fatalf("not done after %d attempts: %+v", limit, out)
		}
		res, err := r.Process(context.Background(), w.msg)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		out = append(out, res)
		if res.Done {
			return
		}
		if res.RetryAt.After(w.clock.Now()) {
			w.clock.Set(res.RetryAt)
		}
	}
}

func outage(code int) error {
	class := publish.Transient
	if code == 401 || code == 403 || code == 404 {
		class = publish.Operator
	}
	return &publish.Error{Class: class, Status: code, Err: fmt.Errorf("POST /repos/acme/app/statuses answered %d", code)}
}

// An outage longer than any fixed number of attempts is ridden out: the verdict waits saved,
// retried on a growing schedule with jitter, and is published once the provider answers. It is
// abandoned only when the publish budget is spent.
func TestOutagesAreRiddenOutUntilTheBudget(t *testing.T) {
	for _, code := range []int{503, 401} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			w := newWorld(t)
			up := epoch.Add(time.Hour)
			p := &scripted{clock: w.clock, answer: func(now time.Time) error {
				if now.Before(up) {
					return outage(code)
				}
				return nil
			}}
			m := &counter{}
			r := w.runner("a", verdict("failure", "failed: pull request title"))
			r.Metrics = m
			r.Routes = func(context.Context, string) (*runner.Route, error) {
				return &runner.Route{Evaluator: verdict("failure", "failed: pull request title"), Publisher: p, Context: "amiss/verdict"}, nil
			}
			drive(t, w, r, 100)
			if len(p.posted) != 1 || p.posted[0].Description != "failed: pull request title" || w.state(t) != ledger.StateDone {
				t.Fatalf("posted %+v, row %v: want the verdict published once", p.posted, w.state(t))
			}
			// The schedule: each wait between half and all of 30 s doubled per attempt, capped at
			// 30 minutes; never past the next attempt's claim.
			for i := 1; i < len(p.attempts)-1; i++ {
				gap := p.attempts[i].Sub(p.attempts[i-1])
				full := min(30*time.Second<<(i-1), 30*time.Minute)
				if gap < full/2 || gap > full {
					t.Errorf("wait %d: %v, want within [%v, %v]", i, gap, full/2, full)
				}
			}
			if last := p.attempts[len(p.attempts)-1]; last.Before(up) || last.Sub(up) > 30*time.Minute {
				t.Errorf("published at %v, the provider was back at %v", last, up)
			}
			if code == 401 && m.get("publish_refused") != len(p.attempts)-1 {
				t.Errorf("publish_refused counted %d times for %d refusals", m.get("publish_refused"), len(p.attempts)-1)
			}
			t.Logf("%d: published after %d attempts, %v after the provider came back", code, len(p.attempts), p.attempts[len(p.attempts)-1].Sub(up))
		})
	}
	t.Run("budget spent", func(t *testing.T) {
		w := newWorld(t)
		p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
		r := w.runner("a", verdict("success", "ok")) // the default budget: 72 hours
		r.Routes = func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
		}
		drive(t, w, r, 1000)
		row, _ := w.l.Inspect(context.Background(), w.msg.Key)
		last := p.attempts[len(p.attempts)-1]
		if row.State != ledger.StateAbandoned || len(p.posted) != 0 || last.Before(epoch.Add(72*time.Hour)) ||
			!strings.Contains(row.Reason, "publish budget of 72h0m0s spent") || !strings.Contains(row.Reason, `verdict success: "ok"`) {
			t.Fatalf("row %v (%q), last attempt at %v", row.State, row.Reason, last.Sub(epoch))
		}
		if prev := p.attempts[len(p.attempts)-2]; prev.After(epoch.Add(72 * time.Hour)) {
			t.Fatalf("two attempts after the budget's end")
		}
		t.Logf("a 72h outage: %d attempts, abandoned at %v", len(p.attempts), last.Sub(epoch))
	})
}

// The provider's own wait is honoured, however long.
func TestRetryAfterIsHonoured(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(now time.Time) error {
		return &publish.Error{Class: publish.Transient, Status: 429, RetryAfter: 2 * time.Hour, Err: errors.New("429")}
	}}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || res.Done || res.RetryAt.Before(epoch.Add(2*time.Hour)) {
		t.Fatalf("%+v %v: want a retry no sooner than 2h", res, err)
	}
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	if row.State != ledger.StateSaved || row.NotBefore.Before(epoch.Add(2*time.Hour)) {
		t.Fatalf("row %v, not before %v", row.State, row.NotBefore)
	}
}

// The budget is measured on the ledger's clock: a runner whose own clock is days ahead does
// not give up on a verdict saved a minute ago.
func TestBudgetIgnoresTheRunnersClock(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
	r := w.runner("a", verdict("success", "ok"))
	r.Now = func() time.Time { return w.clock.Now().Add(100 * time.Hour) }
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	for range 3 {
		if res, _ := r.Process(context.Background(), w.msg); res.Done {
			t.Fatal("abandoned on the runner's clock")
		}
		w.clock.Advance(time.Hour)
	}
	if w.state(t) != ledger.StateSaved {
		t.Fatalf("row %v", w.state(t))
	}
}

// legacy hides PublishSince, as for a row saved by an older version.
type legacy struct{ ledger.Ledger }

func (l legacy) Claim(ctx context.Context, k ledger.Key, b ledger.Digest, o string, d time.Duration) (ledger.Claim, error) {
	c, err := l.Ledger.Claim(ctx, k, b, o, d)
	if c.Staged != nil {
		c.Staged.Lease.PublishSince = time.Time{}
	}
	return c, err
}

// A row saved by an older version records no start of its budget: it counts from admission.
func TestBudgetOfARowSavedByAnOlderVersion(t *testing.T) {
	w := newWorld(t)
	p := &scripted{clock: w.clock, answer: func(time.Time) error { return outage(503) }}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	if res, _ := r.Process(context.Background(), w.msg); res.Done {
		t.Fatal("abandoned at the first failure")
	}
	w.clock.Set(epoch.Add(73 * time.Hour))
	r.Ledger = legacy{w.l}
	if res, _ := r.Process(context.Background(), w.msg); !res.Done || w.state(t) != ledger.StateAbandoned {
		t.Fatalf("%+v, row %v: a budget counted from admission 73h ago is spent", res, w.state(t))
	}
}

// A holder paused past its lease, with nobody taking over, drops its result and hands the
// message back to come again when its lease ended; that message then finishes the delivery
// (it used to be acknowledged, leaving the row running until the stranded sweep).
func TestPausedHolderHandsTheMessageBack(t *testing.T) {
	w := newWorld(t)
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	paused := evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
		calls++
		if calls == 1 {
			close(entered)
			<-release // paused: does not notice anything
			return evaluate.Verdict{State: "success", Description: "by the paused holder"}, nil
		}
		return evaluate.Verdict{State: "failure", Description: "by the next claim"}, nil
	})
	a := w.runner("a", paused)
	a.RenewEvery = time.Hour
	done := make(chan runner.Result)
	go func() { r, _ := a.Process(context.Background(), w.msg); done <- r }()
	<-entered
	row, _ := w.l.Inspect(context.Background(), w.msg.Key)
	w.clock.Advance(31 * time.Second)
	close(release)
	res := <-done
	if res.Done || !res.RetryAt.Equal(row.LeaseUntil) {
		t.Fatalf("%+v: want the message handed back for %v, the lease's end", res, row.LeaseUntil)
	}
	if len(w.pub.all()) != 0 || w.state(t) != ledger.StateRunning {
		t.Fatalf("the paused holder's result was not dropped: %+v, row %v", w.pub.all(), w.state(t))
	}
	res, err := a.Process(context.Background(), w.msg)
	got := w.pub.all()
	if err != nil || !res.Done || len(got) != 1 || got[0].Description != "by the next claim" || w.state(t) != ledger.StateDone {
		t.Fatalf("%+v %v, published %+v, row %v", res, err, got, w.state(t))
	}
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

type blocking struct{ entered chan struct{} }

func (b *blocking) Publish(ctx context.Context, s publish.Status) error {
	close(b.entered)
	<-ctx.Done()
	return &publish.Error{Class: publish.Transient, Err: ctx.Err()}
}

// A route that cannot be built for a saved verdict (its token cannot be read) is the
// operator's to fix: retried on the publish schedule, counted, and bounded by the budget.
func TestUnbuildableRouteIsRetriedOnThePublishSchedule(t *testing.T) {
	// The verdict is saved (its first publication fails), then its route breaks.
	w2 := newWorld(t)
	p := &scripted{clock: w2.clock, answer: func(time.Time) error { return outage(503) }}
	r2 := w2.runner("a", verdict("success", "ok"))
	r2.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	res, _ := r2.Process(context.Background(), w2.msg)
	m := &counter{}
	r2.Metrics = m
	r2.Routes = func(context.Context, string) (*runner.Route, error) {
		return nil, errors.New("publish token: secret not found")
	}
	for i := 0; !res.Done; i++ {
		if i > 1000 {
			t.Fatal("never abandoned")
		}
		w2.clock.Set(res.RetryAt)
		res, _ = r2.Process(context.Background(), w2.msg)
	}
	row, _ := w2.l.Inspect(context.Background(), w2.msg.Key)
	if row.State != ledger.StateAbandoned || !strings.Contains(row.Reason, "secret not found") || m.get("publish_refused") < 10 ||
		row.UpdatedAt.Before(epoch.Add(72*time.Hour)) {
		t.Fatalf("row %v %q at %v, %d refusals counted", row.State, row.Reason, row.UpdatedAt.Sub(epoch), m.get("publish_refused"))
	}
}

// failingRelease is a ledger whose Release fails.
type failingRelease struct{ ledger.Ledger }

func (failingRelease) Release(context.Context, ledger.Lease, time.Time) error {
	return errors.New("release: disk unavailable")
}

func (failingRelease) Unclaim(context.Context, ledger.Lease, time.Time) error {
	return errors.New("unclaim: disk unavailable")
}

// A route that cannot be built for an Execute hands the lease back; when that release fails,
// the route's error is still the one returned and the failed release is logged.
func TestFailedReleaseAfterARouteErrorIsLogged(t *testing.T) {
	w := newWorld(t)
	var logs strings.Builder
	r := w.runner("a", verdict("success", "ok"))
	r.Ledger = failingRelease{w.l}
	r.Log = slog.New(slog.NewTextHandler(&logs, nil))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return nil, errors.New("evaluator secret: not found")
	}
	res, err := r.Process(context.Background(), w.msg)
	if err == nil || !strings.Contains(err.Error(), "evaluator secret") || res.Done {
		t.Fatalf("result %+v, err %v", res, err)
	}
	if !strings.Contains(logs.String(), "release failed") || !strings.Contains(logs.String(), "disk unavailable") {
		t.Fatalf("the failed release is not logged:\n%s", logs.String())
	}
}
