package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

type world struct {
	l     *localfs.Ledger
	clock *ledger.ManualClock
	pub   *recorder
	msg   queue.Message
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

func (w *world) state(t *testing.T) ledger.State {
	r, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

// newWorld is a FileLedger on a manual clock at epoch, holding one admitted push delivery on
// route "r", with a recording publisher.
func newWorld(t *testing.T) *world {
	t.Helper()
	s, _ := json.Marshal(change.Change{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
		Event: "push"})
	return newWorldWithChange(t, s)
}

// newWorldWithChange is newWorld with the row's change given as raw bytes (such as one the
// ingress wrote and the runner cannot read back).
func newWorldWithChange(t *testing.T, raw []byte) *world {
	t.Helper()
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: "i", BodyDigest: ledger.SumBody([]byte("b"))},
		Change: raw}
	if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	return &world{l: l, clock: clock, pub: &recorder{}, msg: queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}}
}

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

// Standing reads back the last status recorded for s's commit and context.
func (p *recorder) Standing(_ context.Context, s publish.Status) (publish.Standing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return standingIn(p.statuses, s), nil
}

// standingIn is what a provider holding posted (in order) shows for s's commit and context.
func standingIn(posted []publish.Status, s publish.Status) publish.Standing {
	for i := len(posted) - 1; i >= 0; i-- {
		if p := posted[i]; p.Repository == s.Repository && p.SHA == s.SHA && p.Context == s.Context {
			if p.State == s.State && p.Description == s.Description && p.TargetURL == s.TargetURL { // what a status shows
				return publish.StandingOurs
			}
			return publish.StandingOther
		}
	}
	return publish.StandingNone
}

func (p *recorder) all() []publish.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]publish.Status(nil), p.statuses...)
}

// evalFunc adapts a function to an Evaluator.
type evalFunc func(ctx context.Context, s change.Change) (evaluate.Verdict, error)

func (f evalFunc) Evaluate(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
	return f(ctx, s)
}

func verdict(state, desc string) evaluate.Evaluator {
	return evalFunc(func(context.Context, change.Change) (evaluate.Verdict, error) {
		return evaluate.Verdict{State: state, Description: desc}, nil
	})
}

type pubFunc func(context.Context, publish.Status) error

func (f pubFunc) Publish(ctx context.Context, s publish.Status) error { return f(ctx, s) }

// Standing implements publish.Publisher: a function keeps no statuses.
func (f pubFunc) Standing(context.Context, publish.Status) (publish.Standing, error) {
	return publish.StandingNone, nil
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

// Standing reads back the last status posted for s's commit and context.
func (p *scripted) Standing(_ context.Context, s publish.Status) (publish.Standing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return standingIn(p.posted, s), nil
}

func outage(code int) error {
	class := publish.Transient
	if code == 401 || code == 403 || code == 404 {
		class = publish.Operator
	}
	return &publish.Error{Class: class, Status: code, Err: fmt.Errorf("POST /repos/acme/app/statuses answered %d", code)}
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

// untilDone processes the world's message until it is done, at most n times, the clock moved
// a minute after each.
func untilDone(w *world, r *runner.Runner, n int) {
	for range n {
		if res, _ := r.Process(context.Background(), w.msg); res.Done {
			return
		}
		w.clock.Advance(time.Minute)
	}
}

// followRetries processes the world's message until it is done, at most n times, moving the
// clock to each result's retry time (a minute on when that is not later); it reports the
// claims made.
func followRetries(w *world, r *runner.Runner, n int) int {
	for i := 1; i <= n; i++ {
		res, _ := r.Process(context.Background(), w.msg)
		if res.Done {
			return i
		}
		if res.RetryAt.After(w.clock.Now()) {
			w.clock.Set(res.RetryAt)
		} else {
			w.clock.Advance(time.Minute)
		}
	}
	return n
}

// shutDown processes the world's message n times, each cut by a shutdown (its context
// cancelled) 50 ms in, the clock moved a minute after each (past a lease not handed back).
func shutDown(w *world, r *runner.Runner, n int) {
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		r.Process(ctx, w.msg)
		w.clock.Advance(time.Minute)
	}
}

// slowAtFirst is an evaluator that runs until its context ends for its first n calls (slow
// evaluations a shutdown cuts) and answers success after; *calls counts the calls.
func slowAtFirst(n int, calls *int) evaluate.Evaluator {
	return evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
		*calls++
		if *calls <= n {
			<-ctx.Done()
			return evaluate.Verdict{}, ctx.Err()
		}
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	})
}

// stageSaved puts the world's row in the saved state, released for an immediate claim.
func stageSaved(t *testing.T, w *world, report string) {
	t.Helper()
	ctx := context.Background()
	c, err := w.l.Claim(ctx, w.msg.Key, w.msg.Binding, "x", 30*time.Second)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim %+v %v", c, err)
	}
	st, err := w.l.Save(ctx, *c.Lease, []byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.l.Release(ctx, st.Lease, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until cond holds, polling every millisecond; after 30 s of real time the test
// fails, naming what it waited for (a premise that never came, not a slow machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
	}
}
