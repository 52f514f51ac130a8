package objstore_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Held requests: a request held in flight (a paused Lambda, a slow connection) lands after
// other handles have moved on. Each test holds one request through the handle's transport, runs
// other handles meanwhile, lets the held request land, and checks what the contract promises.

// TestLateDeleteCannotRemoveALiveRow: a cleaner judges a row removable and its DELETE is held
// in flight; its maintenance lease ends, another cleaner finishes the batch, the same identity
// is admitted again, claimed and saved; then the held DELETE lands. The new row and its saved
// verdict must survive.
func TestLateDeleteCannotRemoveALiveRow(t *testing.T) {
	w := newWorld(t)
	lease := 5 * time.Minute
	slow, slowTr := w.handle("cleaner-slow", 0, func(c *objstore.Config) { c.MaintenanceLease = lease })
	other, _ := w.handle("cleaner-other", 0, func(c *objstore.Config) { c.MaintenanceLease = lease })
	worker, _ := w.handle("worker", 0, nil)

	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, worker, w.saved(worker, d, "first life"))
	w.store.Advance(2 * time.Hour)
	held := slowTr.holdNext(rowRequest(d, http.MethodDelete))
	slowDone := make(chan error, 1)
	go func() { _, err := slow.Cleanup(w.ctx, ""); slowDone <- err }()
	held.waitHeld(t)

	w.store.Advance(lease + time.Minute) // the slow cleaner's lease has ended
	w.cleanLap(other)
	if _, err := worker.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("the other cleaner did not finish the batch: %v", err)
	}
	again := d
	again.SignedAt = w.store.Now()
	s := w.saved(worker, again, "second life")

	held.land(t)
	<-slowDone // the slow cleaner may report its lost lease; it must not have removed anything
	if err := worker.Complete(w.ctx, s); err != nil {
		t.Fatalf("complete of the second life after the late DELETE: %v", err)
	}
	row, err := worker.Inspect(w.ctx, d.Key())
	if err != nil || row.State != ledger.StateDone || row.Report.Digest != ledger.SumBody([]byte("second life")) {
		t.Fatalf("second life after the late DELETE: %+v %v", row, err)
	}
	w.exact(worker)
}

// TestDeleteRacingRetentionExtensionLetsNoReplayIn: cleanup decides to remove a signed row and
// its DELETE is held; a re-signed retry of the same identity is answered Duplicate and
// lengthens retention; the DELETE lands. The re-signed request replayed must still be
// Duplicate, never admitted and evaluated again (invariant 9).
func TestDeleteRacingRetentionExtensionLetsNoReplayIn(t *testing.T) {
	w := newWorld(t)
	cleaner, tr := w.handle("cleaner", 0, nil)
	ingress, _ := w.handle("ingress", 0, nil)

	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, ingress, w.saved(ingress, d, "verdict"))
	row, _ := ingress.Inspect(w.ctx, d.Key())
	w.store.Set(row.RetainUntil.Add(time.Second))
	held := tr.holdNext(rowRequest(d, http.MethodDelete))
	done := make(chan error, 1)
	go func() { _, err := cleaner.Cleanup(w.ctx, ""); done <- err }()
	held.waitHeld(t)

	resigned := d
	resigned.SignedAt = w.store.Now()
	w.admit(ingress, resigned, ledger.Duplicate)
	held.land(t)
	<-done
	w.admit(ingress, resigned, ledger.Duplicate)
	w.cleanLap(cleaner)
	w.admit(ingress, resigned, ledger.Duplicate)
	w.exact(ingress)
}

// TestHeldAdmissionCannotCreateARowWithoutASlot: an admission's row write is held past the
// pending grace; another admission recounts its pending entry; then the held write lands. No
// row may exist that no slot counts: with a cap of 2, never 3 rows.
func TestHeldAdmissionCannotCreateARowWithoutASlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	grace := 2 * time.Minute
	slow, slowTr := w.handle("ingress-slow", 0, func(c *objstore.Config) { c.PendingGrace = grace })
	fast, _ := w.handle("ingress-fast", 0, func(c *objstore.Config) { c.PendingGrace = grace })

	w.admit(fast, w.delivery(time.Time{}), ledger.Admitted)
	b := w.delivery(time.Time{})
	held := slowTr.holdNext(rowWrite(b, ledger.StatePending))
	type result struct {
		a   ledger.Admission
		err error
	}
	done := make(chan result, 1)
	go func() { a, err := slow.Admit(w.ctx, b); done <- result{a, err} }()
	held.waitHeld(t)

	w.store.Advance(grace + time.Minute)
	c := w.delivery(time.Time{})
	w.admit(fast, c, ledger.Admitted)
	held.land(t)
	res := <-done
	st, err := fast.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows > 2 {
		t.Fatalf("%d rows under a cap of 2 (capacity records %d): the held admission (%v %v) made a row no slot counts",
			st.Rows, st.CapacityUsed, res.a.Outcome, res.err)
	}
	if res.err == nil && res.a.Outcome == ledger.Admitted {
		t.Fatalf("the held admission was answered Admitted although the cap was in use")
	}
	w.cleanLap(fast)
	w.exact(fast)
}

// TestDoneRowIsForgottenAfterCleanupRacedItsCompletion: cleanup runs while Complete's row write
// is held in flight, and finds the row unfinished. Once the row is done and its retention
// over, a later cleanup must still forget it and give its slot back.
func TestDoneRowIsForgottenAfterCleanupRacedItsCompletion(t *testing.T) {
	w := newWorld(t)
	l, tr := w.handle("worker", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	s := w.saved(l, d, "verdict")
	row, _ := l.Inspect(w.ctx, d.Key())
	held := tr.holdNext(rowWrite(d, ledger.StateDone))
	done := make(chan error, 1)
	go func() { done <- l.Complete(w.ctx, s) }()
	held.waitHeld(t)

	w.store.Set(row.RetainUntil.Add(time.Second))
	w.cleanLap(cleaner)
	held.land(t)
	if err := <-done; err != nil {
		t.Fatalf("complete: %v", err)
	}
	w.store.Advance(16 * time.Minute) // cleanup's next look at a row it found unfinished
	rep := w.cleanLap(cleaner)
	if len(rep.Removed) != 1 {
		t.Fatalf("the done row past its retention was not forgotten (removed %d)", len(rep.Removed))
	}
	if st := w.exact(cleaner); st.Rows != 0 {
		t.Fatalf("%d rows left", st.Rows)
	}
}

// TestHeldReservationDoesNotReadmitAForgottenDelivery: admission decides freshness once, at the
// store time it read before its first request, and never again. Interleaving (store time, the
// hold is 3 minutes, well inside SigV4's 15):
//
//	S+4m   ingress-slow: Admit(d) decides "fresh" (accepted age 5m); its reservation PUT
//	       (If-None-Match: *) is held in flight
//	S+4m   ingress-fast: Admit(d) (the sender's retry) is Admitted, run, saved, completed
//	S+7m+1 cleanup: retention (S + 5m + 2m queue ceiling) is over; the row is forgotten and
//	       the high-water says d is stale
//	       the held reservation PUT lands on the now empty key; ingress-slow takes a slot and
//	       creates a row: d is Admitted a second time, with a new evaluation id, and is run
//	       and published again.
//
// The same happens with no hold at all when the ingress is paused between reading the store's
// time and signing its first PUT (then the 15-minute bound does not apply either).
//
// Fixed: admission decides again at the store's time of its reservation's answer.
func TestHeldReservationDoesNotReadmitAForgottenDelivery(t *testing.T) {
	w := newWorld(t)
	w.limits.QueueCeiling = 2 * time.Minute
	slow, slowTr := w.handle("ingress-slow", 0, nil)
	fast, _ := w.handle("ingress-fast", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	w.store.Advance(4 * time.Minute)
	held := slowTr.holdNext(rowRequest(d, http.MethodPut))
	done := make(chan admitResult, 1)
	go func() { a, err := slow.Admit(w.ctx, d); done <- admitResult{a, err} }()
	held.waitHeld(t)

	first := w.saved(fast, d, "first verdict")
	ledgertest.MustComplete(t, fast, first)
	row, err := fast.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	// Past its retention, and past the life of any request that could write its reservation
	// again (the key is not emptied sooner; its reservation landed a second or so after the
	// row's creation time).
	w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute))
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	if a, err := fast.Admit(w.ctx, d); err != nil || a.Outcome != ledger.Stale {
		t.Fatalf("replay after cleanup: %v %v, want stale", a.Outcome, err)
	}
	if err := held.land(t); err != nil {
		t.Logf("held reservation PUT: %v", err)
	}
	res := <-done
	if res.err == nil && res.a.Outcome == ledger.Admitted {
		c, cerr := fast.Claim(w.ctx, d.Key(), d.Binding.Digest(), "second-runner", time.Minute)
		t.Fatalf("delivery admitted a second time after its row was forgotten as stale (evaluation %s, first %s); "+
			"a claim now answers %v %v: the delivery is evaluated and published twice",
			res.a.EvaluationID, row.EvaluationID, c.Outcome, cerr)
	}
}
