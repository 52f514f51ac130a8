package runner_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A worker paused past its lease never saves or publishes; the one that took over publishes.
func TestPausedWorkerLosesItsLease(t *testing.T) {
	for _, ignoresCancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("evaluator-ignores-cancel=%v", ignoresCancel), func(t *testing.T) {
			w := newWorld(t)
			entered, release := make(chan struct{}), make(chan struct{})
			slow := evalFunc(func(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
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

// A holder paused past its lease, with nobody taking over, drops its result and hands the message
// back to come again when its lease ended; that message then finishes the delivery. Acknowledged,
// it left the row running until the stranded sweep.
func TestPausedHolderHandsTheMessageBack(t *testing.T) {
	w := newWorld(t)
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	paused := evalFunc(func(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
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

// The publishing lease is lost while the provider call is in flight (A stalled past its lease) and
// B claims Publish and posts (once A's grant on the commit has ended and its post has settled:
// B's loop moves the clock to each time it is told to come back). A's keeper sees the loss:
// A's provider call is cut (its context ends), and does not go on to post the same status a
// second time.
func TestALostPublishingLeaseStopsThePost(t *testing.T) {
	w := newWorld(t)
	stageSaved(t, w, `{"state":"success","description":"ok","context":"amiss/verdict"}`)
	var aPosts, bPosts atomic.Int32
	bDone := make(chan struct{})
	a := w.runner("a", nil)
	a.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Publisher: pubFunc(func(ctx context.Context, s publish.Status) error {
			w.clock.Advance(31 * time.Second) // A stalls in the provider call past its lease
			b := w.runner("b", nil)
			b.Routes = func(context.Context, string) (*runner.Route, error) {
				return &runner.Route{Publisher: pubFunc(func(context.Context, publish.Status) error {
					bPosts.Add(1)
					return nil
				})}, nil
			}
			go func() {
				defer close(bDone)
				for i := 0; i < 200; i++ {
					res, err := b.Process(context.Background(), w.msg)
					if err == nil && res.Done {
						return
					}
					if res.RetryAt.After(w.clock.Now()) {
						w.clock.Set(res.RetryAt)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			<-bDone
			select {
			case <-ctx.Done(): // what the keeper's loss should cause
				return ctx.Err()
			case <-time.After(300 * time.Millisecond): // A's keeper has long seen the loss
			}
			aPosts.Add(1)
			return nil
		})}, nil
	}
	res, err := a.Process(context.Background(), w.msg)
	t.Logf("A: %+v %v", res, err)
	if aPosts.Load()+bPosts.Load() != 1 {
		t.Fatalf("posts: A %d, B %d: A lost its publishing lease and posted anyway", aPosts.Load(), bPosts.Load())
	}
}

// slowBuildWithADuplicate makes r's next route build take 60 s by the ledger's clock, twice
// the 30 s lease, in steps a renewal (every 5 ms) can follow, and then has a duplicate
// message's runner claim the row. It returns what that claim got, once the build has run.
// After each step it waits for a renewal to land (the lease ending more than a step ahead),
// for at most two seconds: a keeper that does not renew is not waited for, and the duplicate
// then claims the row.
func slowBuildWithADuplicate(w *world, r *runner.Runner) func() (ledger.Claim, error) {
	build := r.Routes
	var once sync.Once
	var other ledger.Claim
	otherErr := errors.New("the route was never built")
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		once.Do(func() {
			for range 3 {
				w.clock.Advance(20 * time.Second)
				for waited := time.Duration(0); waited < 2*time.Second; waited += 5 * time.Millisecond {
					if row, err := w.l.Inspect(ctx, w.msg.Key); err == nil && row.LeaseUntil.Sub(w.clock.Now()) > 20*time.Second {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			other, otherErr = w.l.Claim(ctx, w.msg.Key, w.msg.Binding, "b", time.Minute)
		})
		return build(ctx, name)
	}
	return func() (ledger.Claim, error) { return other, otherErr }
}

// Building the route (a secret read) may take longer than the lease, up to two margins before the
// invocation's deadline. The lease is renewed while the route is built, so a duplicate message's
// claim meanwhile is answered Busy, and the first runner's verdict is saved and published once.
// Before, nothing renewed it until the evaluation began: the duplicate claimed the row, and the
// first runner's attempt was lost.
func TestALongRouteBuildKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	duplicate := slowBuildWithADuplicate(w, r)
	res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg)
	if other, otherErr := duplicate(); otherErr != nil || other.Outcome != ledger.Busy {
		t.Fatalf("a duplicate's claim while the route was built: %v %v, want Busy: the lease ran out under the build",
			other.Outcome, otherErr)
	}
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if got := w.pub.all(); len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v, want one success", got)
	}
}

// The same for a saved verdict whose publication is retried: the lease is renewed while the route
// is built, so a duplicate message's claim is answered Busy and the verdict is published once.
func TestALongRouteBuildKeepsThePublishingLease(t *testing.T) {
	w := newWorld(t)
	w.pub.fail = []error{outage(503)}
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	if res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg); err != nil || res.Done {
		t.Fatalf("first attempt (the provider answers 503): %+v %v", res, err)
	}
	if len(w.pub.all()) != 0 {
		t.Fatal("published although the provider failed")
	}
	w.clock.Advance(time.Hour) // past the publication's retry time
	duplicate := slowBuildWithADuplicate(w, r)
	res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg)
	if other, otherErr := duplicate(); otherErr != nil || other.Outcome != ledger.Busy {
		t.Fatalf("a duplicate's claim while the publishing route was built: %v %v, want Busy", other.Outcome, otherErr)
	}
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if got := w.pub.all(); len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v, want one success", got)
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
		return &runner.Route{Evaluator: evalFunc(func(ctx context.Context, s change.Change) (evaluate.Verdict, error) {
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

// renewLog records every renewal's window and when it was asked for (the host's real time,
// which invocation deadlines are set in).
type renewLog struct {
	ledger.Ledger
	mu   sync.Mutex
	ends []time.Time
}

func (l *renewLog) Renew(ctx context.Context, ls ledger.Lease, d time.Duration) (ledger.Lease, error) {
	l.mu.Lock()
	l.ends = append(l.ends, time.Now().Add(d))
	l.mu.Unlock()
	return l.Ledger.Renew(ctx, ls, d)
}

// A lease never outlives the invocation that holds it: renewals ask for at most the time left
// before the deadline less the margin, as the claim does. Otherwise a Lambda killed at its
// deadline leaves the row leased for up to a whole window, and the next claim waits for it.
func TestRenewalsDoNotOutliveTheInvocation(t *testing.T) {
	w := newWorld(t)
	rl := &renewLog{Ledger: w.l}
	r := w.runner("a", evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
		<-ctx.Done()
		return evaluate.Verdict{State: evaluate.Success, Description: "late"}, nil
	}))
	r.Ledger = rl
	r.Lease, r.RenewEvery, r.Margin = time.Second, 20*time.Millisecond, 100*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	r.Process(runner.FirstOfInvocation(ctx), w.msg)
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.ends) == 0 {
		t.Fatal("no renewal")
	}
	for i, end := range rl.ends {
		if over := end.Sub(dl.Add(-r.Margin)); over > 10*time.Millisecond {
			t.Fatalf("renewal %d of %d asks for a lease ending %v past the invocation's deadline less the margin", i+1, len(rl.ends), over)
		}
	}
}

// A lease window too short to divide into renewals (a runner configured with a lease of a
// few nanoseconds) must not crash the process: the keeper's ticker needs a positive interval.
// The lease simply runs out and the result is dropped, as for any lost lease.
func TestATinyLeaseDoesNotCrashTheKeeper(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict("success", "ok"))
	r.Lease, r.RenewEvery = 2*time.Nanosecond, 0
	if _, err := r.Process(context.Background(), w.msg); err != nil {
		t.Logf("process: %v", err)
	}
}

// Without an invocation deadline (amiss serve) the margin kept before a deadline does not
// apply: a lease shorter than it still runs the delivery to its verdict.
func TestALeaseShorterThanTheMarginRunsWithoutADeadline(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict("success", "ok"))
	r.Lease = 2 * time.Second // the default margin is 5 s
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || !res.Done || len(w.pub.all()) != 1 {
		t.Fatalf("result %+v, err %v, published %v", res, err, w.pub.all())
	}
}
