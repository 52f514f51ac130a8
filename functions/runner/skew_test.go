package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

// TestARunnerClockOffDecidesNoRetryTime: the ledger judges time by its own clock; a runner
// whose host clock is hours off must still park a retry for the wait it means, measured on
// the ledger's clock: a clock ahead must not park a 30 s retry for hours, and a clock behind
// must not turn a provider's Retry-After (or a failed evaluation's delay) into an immediate
// claim.
func TestARunnerClockOffDecidesNoRetryTime(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		for _, c := range []struct {
			name string
			want time.Duration // the wait, on the ledger's clock
			set  func(w *world, r *runner.Runner)
		}{
			{"publish retry", 30 * time.Second, func(w *world, r *runner.Runner) {
				w.pub.fail = []error{&publish.Error{Class: publish.Transient, Err: errors.New("503")}}
				r.PublishRetry = 30 * time.Second
			}},
			{"provider's Retry-After", 10 * time.Minute, func(w *world, r *runner.Runner) {
				w.pub.fail = []error{&publish.Error{Class: publish.Transient, Status: 429, RetryAfter: 10 * time.Minute, Err: errors.New("429")}}
				r.PublishRetry = 30 * time.Second
			}},
			{"failed evaluation", 20 * time.Second, func(w *world, r *runner.Runner) {
				r.RetryDelay = 20 * time.Second
				r.Routes = func(context.Context, string) (*runner.Route, error) {
					return &runner.Route{Evaluator: evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
						return evaluate.Verdict{}, errors.New("evaluator down")
					}), Publisher: w.pub, Context: "amiss/verdict"}, nil
				}
			}},
		} {
			t.Run(c.name+" "+skew.String(), func(t *testing.T) {
				w := newWorld(t)
				r := w.runner("skewed", verdict("success", "ok"))
				r.Jitter = func() float64 { return 0.999 }
				c.set(w, r)
				r.Now = func() time.Time { return w.clock.Now().Add(skew) }
				if _, err := r.Process(context.Background(), w.msg); err != nil {
					t.Fatal(err)
				}
				row, err := w.l.Inspect(context.Background(), w.msg.Key)
				if err != nil {
					t.Fatal(err)
				}
				wait := row.NotBefore.Sub(w.clock.Now())
				if wait < c.want-time.Second || wait > c.want+time.Second {
					t.Fatalf("runner clock %v off: the row may be claimed again %v after the ledger's now, want %v", skew, wait, c.want)
				}
			})
		}
	}
}

// slowSave answers Save a moment after it landed (a slow response) and counts the renewals
// the ledger refused.
type slowSave struct {
	ledger.Ledger
	refused atomic.Int32
}

func (s *slowSave) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	st, err := s.Ledger.Save(ctx, l, report)
	time.Sleep(40 * time.Millisecond)
	return st, err
}

func (s *slowSave) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	nl, err := s.Ledger.Renew(ctx, l, d)
	if errors.Is(err, ledger.ErrLeaseLost) {
		s.refused.Add(1)
	}
	return nl, err
}

type pubFunc func(context.Context, publish.Status) error

func (f pubFunc) Publish(ctx context.Context, s publish.Status) error { return f(ctx, s) }

// TestARenewalRacingSaveKeepsThePublishingLease: the keeper renews the lease while Save is in
// flight. A renewal of the executing lease that lands after Save finds the row saved and is
// refused; the keeper must not take that for a lost lease and stop, or the publishing lease
// runs out during a slow publication and a second runner posts while the first is posting.
func TestARenewalRacingSaveKeepsThePublishingLease(t *testing.T) {
	w := newWorld(t)
	sl := &slowSave{Ledger: w.l}
	var posts, second atomic.Int32
	r := w.runner("a", verdict("success", "ok"))
	r.Ledger = sl
	slow := pubFunc(func(ctx context.Context, s publish.Status) error {
		posts.Add(1)
		// A slow provider: 40 s pass on the ledger's clock, the keeper renewing meanwhile.
		for range 4 {
			w.clock.Advance(10 * time.Second)
			time.Sleep(30 * time.Millisecond)
		}
		c, err := w.l.Claim(ctx, w.msg.Key, w.msg.Binding, "b", 30*time.Second)
		if err != nil {
			t.Errorf("claim by another runner: %v", err)
		} else if c.Outcome == ledger.Publish {
			second.Add(1)
		}
		return nil
	})
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: slow, Context: "amiss/verdict"}, nil
	}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if second.Load() != 0 {
		t.Fatalf("another runner claimed the publication while the first was posting (renewals refused: %d)", sl.refused.Load())
	}
}

// slowLanding: the Save request is in flight 40 s (ledger clock) before it lands; the lease
// is 30 s and was being renewed every 5 ms until Save started.
type slowLanding struct {
	ledger.Ledger
	clock *ledger.ManualClock
}

func (s *slowLanding) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	for range 4 {
		s.clock.Advance(10 * time.Second)
		time.Sleep(20 * time.Millisecond) // the keeper would renew here, if it were free to
	}
	return s.Ledger.Save(ctx, l, report)
}

// TestASlowSaveKeepsItsLease: holding the keeper across Save stops renewals for the
// whole Save, so a Save that takes longer than what is left of the lease always loses it: the
// verdict is dropped and the delivery re-evaluated, again and again while Save stays slow.
func TestASlowSaveKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict("success", "ok"))
	r.Ledger = &slowLanding{Ledger: w.l, clock: w.clock}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v; row %v, published %d: a renewed lease ran out during Save", res, err, w.state(t), len(w.pub.all()))
	}
}

// lossyRenew: renewals land in the ledger but their answers are lost (a timeout after the
// write), so the keeper keeps its older lease and sent.
type lossyRenew struct {
	ledger.Ledger
	lose atomic.Bool
}

func (s *lossyRenew) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	nl, err := s.Ledger.Renew(ctx, l, d)
	if err == nil && s.lose.Load() {
		return ledger.Lease{}, errors.New("renew: i/o timeout")
	}
	return nl, err
}

// TestALostRenewalAnswerDoesNotMoveTheRetryTime: Save answers the row's expiry (set by a
// renewal whose answer was lost) while the clock keeps the kept lease's sent: the publish
// retry is parked up to a lease later than meant.
func TestALostRenewalAnswerDoesNotMoveTheRetryTime(t *testing.T) {
	w := newWorld(t)
	lr := &lossyRenew{Ledger: w.l}
	w.pub.fail = []error{&publish.Error{Class: publish.Transient, Err: errors.New("503")}}
	r := w.runner("a", nil)
	r.Ledger = lr
	r.Jitter = func() float64 { return 0.999 }
	r.PublishRetry = 30 * time.Second
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
			lr.lose.Store(true)
			w.clock.Advance(20 * time.Second)
			time.Sleep(50 * time.Millisecond) // renewals land, their answers are lost
			return evaluate.Verdict{State: "success", Description: "ok"}, nil
		}), Publisher: w.pub, Context: "amiss/verdict"}, nil
	}
	if _, err := r.Process(context.Background(), w.msg); err != nil {
		t.Fatal(err)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil {
		t.Fatal(err)
	}
	wait := row.NotBefore.Sub(w.clock.Now())
	if wait < 29*time.Second || wait > 31*time.Second {
		t.Fatalf("the row may be claimed again %v after the ledger's now, want 30s", wait)
	}
}

// TestAWaitForAnotherLeaseIsTimedOnTheLedgersClock: a message that finds the row leased by
// another runner comes back when that lease ends. The lease's end is the ledger's time; a
// runner whose clock is off must turn it into its own time (the queue's delay is reckoned by
// the runner's clock): a clock ahead must not bring the message back at once (a claim a
// second for the rest of the lease), a clock behind must not park it for hours.
func TestAWaitForAnotherLeaseIsTimedOnTheLedgersClock(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run("busy "+skew.String(), func(t *testing.T) {
			w := newWorld(t)
			c, err := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "holder", time.Minute)
			if err != nil || c.Outcome != ledger.Execute {
				t.Fatalf("claim by the holder: %+v %v", c, err)
			}
			w.clock.Advance(20 * time.Second)
			r := w.runner("skewed", verdict("success", "ok"))
			r.Now = func() time.Time { return w.clock.Now().Add(skew) }
			res, err := r.Process(context.Background(), w.msg)
			if err != nil || res.Done {
				t.Fatalf("process: %+v %v", res, err)
			}
			if wait := res.RetryAt.Sub(r.Now()); wait < 40*time.Second || wait > 41*time.Second {
				t.Fatalf("runner clock %v off: the message comes back in %v by the runner's clock, want the 40s left of the lease", skew, wait)
			}
		})
		t.Run("lease lost during evaluation "+skew.String(), func(t *testing.T) {
			w := newWorld(t)
			r := w.runner("skewed", nil)
			r.Now = func() time.Time { return w.clock.Now().Add(skew) }
			r.Routes = func(context.Context, string) (*runner.Route, error) {
				return &runner.Route{Evaluator: evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
					// The lease runs out while the evaluation is stalled; another runner takes it.
					w.clock.Advance(31 * time.Second)
					c, err := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "other", time.Minute)
					if err != nil || c.Outcome != ledger.Execute {
						t.Errorf("claim by another runner: %+v %v", c, err)
					}
					<-ctx.Done()
					return evaluate.Verdict{}, ctx.Err()
				}), Publisher: w.pub, Context: "amiss/verdict"}, nil
			}
			res, err := r.Process(context.Background(), w.msg)
			if err != nil || res.Done {
				t.Fatalf("process: %+v %v", res, err)
			}
			// The other runner's lease ends a minute after it was granted; this runner's lease
			// (the one it knew) ended a second before that claim. Either way the message must
			// come back within a minute by the runner's clock, not hours off.
			if wait := res.RetryAt.Sub(r.Now()); wait < -time.Second || wait > time.Minute+time.Second {
				t.Fatalf("runner clock %v off: the message comes back in %v by the runner's clock, want within the minute the new lease lasts", skew, wait)
			}
		})
	}
}
