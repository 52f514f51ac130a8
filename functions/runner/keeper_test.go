package runner_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
)

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

// TestALostPublishingLeaseStopsThePost: the publishing lease is lost while the provider call
// is in flight (A stalled past its lease) and B claims Publish and posts. A's keeper sees the
// loss: A's provider call must be cut (its context ends), not go on to post the same status
// a second time.
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
					if res, err := b.Process(context.Background(), w.msg); err == nil && res.Done {
						return
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

// saveLands: a Save request that reached the ledger before the caller's context was cancelled.
type saveLands struct{ ledger.Ledger }

func (s saveLands) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	return s.Ledger.Save(context.WithoutCancel(ctx), l, report)
}

// TestAShutdownOnTheLastAttemptFreezesNoVerdict: a shutdown (the caller's context cancelled)
// during the last allowed attempt is no failed evaluation: it must release the row for a
// later attempt as on earlier attempts, never save "evaluation failed 3 times: context
// canceled" as the delivery's verdict for good.
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
				r := w.runner("a", evalFunc(func(ctx context.Context, s subject.Subject) (evaluate.Verdict, error) {
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

// renewAfter holds one renewal of a publishing lease until the row is done, as a slow
// renewal request would land.
type renewAfter struct {
	ledger.Ledger
	completed chan struct{}
	once      atomic.Bool
}

func (s *renewAfter) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	if l.Phase == ledger.PhasePublish && s.once.CompareAndSwap(false, true) {
		<-s.completed
	}
	return s.Ledger.Renew(ctx, l, d)
}

func (s *renewAfter) Complete(ctx context.Context, st ledger.Staged) error {
	err := s.Ledger.Complete(ctx, st)
	close(s.completed)
	return err
}

// TestARenewalAfterCompleteCountsNoLostLease: a renewal that would land after Complete is
// refused; a clean publication must not count it as a lost lease (the keeper stops once the
// provider has answered).
func TestARenewalAfterCompleteCountsNoLostLease(t *testing.T) {
	w := newWorld(t)
	var m counter
	r := w.runner("a", nil)
	r.Metrics = &m
	r.Ledger = &renewAfter{Ledger: w.l, completed: make(chan struct{})}
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: pubFunc(func(context.Context, publish.Status) error {
			time.Sleep(30 * time.Millisecond) // the keeper starts a renewal meanwhile
			return nil
		}), Context: "amiss/verdict"}, nil
	}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("%+v %v", res, err)
	}
	if n := m.get("lease_lost"); n != 0 {
		t.Fatalf("lease_lost counted %d on a clean publication", n)
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
	r := w.runner("a", evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
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
