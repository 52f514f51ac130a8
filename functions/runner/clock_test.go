package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// The ledger judges time by its own clock; a runner whose host clock is hours off still parks a
// retry for the wait it means, measured on the ledger's clock: a clock ahead does not park a 30 s
// retry for hours, and a clock behind does not turn a provider's Retry-After (or a failed
// evaluation's delay) into an immediate claim.
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
					return &runner.Route{Evaluator: evalFunc(func(context.Context, change.Change) (evaluate.Verdict, error) {
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

// lossyRenew: renewals land in the ledger but their answers are lost (a timeout after the
// write), so the keeper keeps its older lease and sent.
type lossyRenew struct {
	ledger.Ledger
	lose atomic.Bool
	lost atomic.Int32
}

func (s *lossyRenew) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	nl, err := s.Ledger.Renew(ctx, l, d)
	if err == nil && s.lose.Load() {
		s.lost.Add(1)
		return ledger.Lease{}, errors.New("renew: i/o timeout")
	}
	return nl, err
}

// Renewals land but their answers are lost, so the keeper keeps its older grant and the time it
// sent that request; Save answers the row's expiry, which those renewals moved. The publish retry
// is reckoned from the grant heard with its own request's time, so it is parked for the wait meant
// (30 s), not up to a lease later.
func TestALostRenewalAnswerDoesNotMoveTheRetryTime(t *testing.T) {
	w := newWorld(t)
	lr := &lossyRenew{Ledger: w.l}
	w.pub.fail = []error{&publish.Error{Class: publish.Transient, Err: errors.New("503")}}
	r := w.runner("a", nil)
	r.Ledger = lr
	r.Jitter = func() float64 { return 0.999 }
	r.PublishRetry = 30 * time.Second
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: evalFunc(func(context.Context, change.Change) (evaluate.Verdict, error) {
			lr.lose.Store(true)
			w.clock.Advance(20 * time.Second)
			// Renewals land, their answers are lost: two of them, however late the keeper runs.
			for deadline := time.Now().Add(5 * time.Second); lr.lost.Load() < 2 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if lr.lost.Load() < 2 {
				t.Errorf("the keeper renewed %d times during the evaluation, want 2 (the premise)", lr.lost.Load())
			}
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

// A message that finds the row leased by another runner comes back when that lease ends. The
// lease's end is the ledger's time; a runner whose clock is off turns it into its own time (the
// queue's delay is reckoned by the runner's clock): a clock ahead does not bring the message back
// at once (a claim a second for the rest of the lease), a clock behind does not park it for hours.
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
				return &runner.Route{Evaluator: evalFunc(func(ctx context.Context, _ change.Change) (evaluate.Verdict, error) {
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
