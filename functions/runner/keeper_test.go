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
	"github.com/amiss-ci/amiss/ledger"
)

// slowSave answers Save a moment after it landed (a slow response), counts the renewals the
// ledger refused, and tells a waiter on renewed of each renewal it granted.
type slowSave struct {
	ledger.Ledger
	refused atomic.Int32
	renewed chan struct{}
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
	if err == nil {
		select {
		case s.renewed <- struct{}{}:
		default:
		}
	}
	return nl, err
}

// awaitRenewal waits for the keeper's next granted renewal, if the keeper renews at all (a
// second of real time at most: a loaded machine may run the keeper late, never that late).
func awaitRenewal(renewed <-chan struct{}) {
	select {
	case <-renewed:
	case <-time.After(time.Second):
	}
}

// The keeper renews the lease while Save is in flight. A renewal of the executing lease that lands
// after Save finds the row saved and is refused; the keeper does not take that for a lost lease
// and stop, or the publishing lease would run out during a slow publication and a second runner
// would post while the first is posting.
func TestARenewalRacingSaveKeepsThePublishingLease(t *testing.T) {
	w := newWorld(t)
	sl := &slowSave{Ledger: w.l, renewed: make(chan struct{})}
	var posts, second atomic.Int32
	r := w.runner("a", verdict("success", "ok"))
	r.Ledger = sl
	slow := pubFunc(func(ctx context.Context, s publish.Status) error {
		posts.Add(1)
		// A slow provider: 40 s pass on the ledger's clock, the keeper renewing meanwhile.
		for range 4 {
			w.clock.Advance(10 * time.Second)
			awaitRenewal(sl.renewed)
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
// is 30 s and was being renewed every 5 ms until Save started. After each 10 s it waits for
// the keeper's next renewal to land, if the keeper is free to renew at all (a second of real
// time at most: a loaded machine may run the keeper late, never that late).
type slowLanding struct {
	ledger.Ledger
	clock   *ledger.ManualClock
	renewed chan struct{}
}

func (s *slowLanding) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	nl, err := s.Ledger.Renew(ctx, l, d)
	if err == nil {
		select {
		case s.renewed <- struct{}{}:
		default:
		}
	}
	return nl, err
}

func (s *slowLanding) Save(ctx context.Context, l ledger.Lease, report []byte) (ledger.Staged, error) {
	for range 4 {
		s.clock.Advance(10 * time.Second)
		awaitRenewal(s.renewed)
	}
	return s.Ledger.Save(ctx, l, report)
}

// The keeper goes on renewing during Save: a Save that takes longer than what is left of the lease
// keeps it. Holding the keeper across Save stopped renewals for the whole Save, so a slow Save
// always lost the lease: the verdict was dropped and the delivery re-evaluated, again and again
// while Save stayed slow.
func TestASlowSaveKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict("success", "ok"))
	r.Ledger = &slowLanding{Ledger: w.l, clock: w.clock, renewed: make(chan struct{})}
	res, err := r.Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v; row %v, published %d: a renewed lease ran out during Save", res, err, w.state(t), len(w.pub.all()))
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

// A renewal that would land after Complete is refused; a clean publication does not count it as a
// lost lease (the keeper stops once the provider has answered).
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

// slowAbandon is a ledger whose Abandon answer arrives late (the write has landed; its answer
// is slow to come back, as a remote ledger's can be), and which counts the renewals sent once
// the row was abandoned and once Process returned.
type slowAbandon struct {
	ledger.Ledger
	abandoned     atomic.Bool
	returned      atomic.Bool
	renewsAfter   atomic.Int32 // renewals sent after the Abandon landed
	renewsAfterPr atomic.Int32 // renewals sent after Process returned
}

func (s *slowAbandon) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	if s.abandoned.Load() {
		s.renewsAfter.Add(1)
	}
	if s.returned.Load() {
		s.renewsAfterPr.Add(1)
	}
	return s.Ledger.Renew(ctx, l, d)
}

func (s *slowAbandon) Abandon(ctx context.Context, st ledger.Staged, reason string) error {
	err := s.Ledger.Abandon(ctx, st, reason)
	s.abandoned.Store(true)
	time.Sleep(60 * time.Millisecond) // the answer is slow; renewals (every 5 ms) go on
	return err
}

// A row whose change cannot be read back gets an error verdict, saved and then abandoned (the
// publication cannot decode the change either). The keeper runs from the route build on, so it
// must stop before the ledger hears of the abandonment: a renewal of the publishing lease landing
// after the Abandon is refused (the row has no owner) and would be counted as a lost lease, with
// the work's context cancelled, on a clean, finished delivery. The same rule as
// TestARenewalAfterCompleteCountsNoLostLease.
func TestAnUndecodableChangeCountsNoLostLease(t *testing.T) {
	w := newWorldWithChange(t, []byte(`[1]`)) // JSON, but not a change
	abandonedUnderItsLease(t, w, "a delivery whose change does not decode")
}

// The same in the publish phase: a saved report that does not decode is abandoned while the keeper
// (started before the route build) still renews; the keeper stops before the Abandon, so no
// renewal after it counts a lost lease.
func TestAnUndecodableSavedReportCountsNoLostLease(t *testing.T) {
	w := newWorld(t)
	stageSaved(t, w, `[1]`)
	abandonedUnderItsLease(t, w, "a saved report that does not decode")
}

// abandonedUnderItsLease processes w's message, which ends abandoned, through a ledger whose
// Abandon answers late, and checks that no lease was counted lost and no renewal outlived
// the attempt.
func abandonedUnderItsLease(t *testing.T, w *world, what string) {
	t.Helper()
	var m counter
	sl := &slowAbandon{Ledger: w.l}
	r := w.runner("a", verdict(evaluate.Success, "never published"))
	r.Metrics = &m
	r.Ledger = sl
	res, err := r.Process(context.Background(), w.msg)
	sl.returned.Store(true)
	if err != nil || !res.Done {
		t.Fatalf("%s: process: %+v %v", what, res, err)
	}
	if st := w.state(t); st != ledger.StateAbandoned {
		t.Fatalf("%s: row %v, want abandoned", what, st)
	}
	time.Sleep(30 * time.Millisecond)
	if n := sl.renewsAfterPr.Load(); n != 0 {
		t.Errorf("%s: %d renewals sent after Process returned: the keeper outlived the attempt", what, n)
	}
	if n := m.get("lease_lost"); n != 0 {
		t.Fatalf("%s: lease_lost counted %d on a delivery abandoned under its own lease "+
			"(%d renewals sent after the Abandon landed): the keeper ran on past the ledger's answer", what, n, sl.renewsAfter.Load())
	}
}
