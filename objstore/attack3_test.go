package objstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Attacks of a third review round on the S3 ledger's one clock, around the change that lets an
// admission's first decision (made before any request, on an estimate that lags after the host
// was suspended) refuse only a delivery too old for it. Helpers: the world of safety_test.go,
// suspendedClock of adversary_test.go.

// TestAttack3SuspendedOldPolicyHandleReadmitsAForgottenBody: a handle opened under the older
// body-time policy (a root without a body-age ceiling, the handle configured without one) is
// meant to stop at its next re-read of the root, which it makes "once a minute", before any row
// bounded by a body time can be forgotten (ledger.BodyPolicyGrace, an hour). But the minute
// was measured on the host's monotonic clock (time.Since of the handle's start), which, like
// the store-clock estimate, counts nothing while the host is suspended (a paused VM, a frozen
// Lambda). Interleaving (body-age ceiling 4h):
//
//	T0       old: opens (reads the root: no body-age ceiling), answers; its host is suspended
//	T0       adopter: opens with a 4h ceiling: the root records it, BodyTimesSince T0
//	T0       adopter: admits d, bounded by its body time T0 (retention T0+4h); run, saved, done
//	T0+4h1m  cleanup forgets d's row: every copy of its body is stale
//	T0+4h1m  old wakes; its monotonic clock says well under a minute since it read the root, so
//	         it does not re-read it; the sender's replay of d arrives: under the older policy
//	         the body time means nothing, d is a new permanent delivery, the key is empty:
//	         Admitted, evaluated and published a second time (the invariant: a request whose
//	         row was forgotten is Stale, never admitted again).
//
// Fixed: an admission re-reads the root when its last read is a minute old by the store's time
// as of the reservation's answer (a fresh Date), before it takes a slot.
func TestAttack3SuspendedOldPolicyHandleReadmitsAForgottenBody(t *testing.T) {
	w := newWorld(t)
	w.limits.BodyAgeCeiling = 0 // the root is created under the older policy
	host := &suspendedClock{store: w.store}
	old, _ := w.handle("old-policy", 0, func(c *objstore.Config) { c.Clock = host })
	w.admit(old, w.delivery(time.Time{}), ledger.Admitted) // its last answer before it sleeps

	withBody := func(c *objstore.Config) { c.Limits.BodyAgeCeiling = 4 * time.Hour }
	adopter, _ := w.handle("adopter", 0, withBody)
	cleaner, _ := w.handle("cleaner", 0, withBody)
	d := w.delivery(time.Time{})
	d.BodyAt = w.store.Now()
	first := w.saved(adopter, d, "first verdict")
	ledgertest.MustComplete(t, adopter, first)
	row, err := adopter.Inspect(w.ctx, d.Key())
	if err != nil || row.Lifetime() != ledger.LifetimeBody {
		t.Fatalf("d after adoption: %+v %v, want a row bounded by its body time", row, err)
	}

	asleep := ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute).Sub(w.store.Now())
	w.store.Advance(asleep)
	host.sleep(asleep)
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	if a, err := adopter.Admit(w.ctx, d); err != nil || a.Outcome != ledger.Stale {
		t.Fatalf("replay through the adopting handle: %v %v, want stale", a.Outcome, err)
	}
	a, err := old.Admit(w.ctx, d)
	if err == nil && a.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a body delivery forgotten as stale was admitted again as %v (evaluation %s, first %s) "+
			"by a handle of the older policy whose host had been suspended %s: it never re-read the root",
			a.Lifetime, a.EvaluationID, row.EvaluationID, asleep)
	}
	if err != nil && !errors.Is(err, ledger.ErrRootMismatch) {
		t.Fatalf("replay through the handle of the older policy: %v, want ErrRootMismatch (or Stale)", err)
	}
	// Whatever it answered, the capacity record still counts the rows exactly.
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	w.exact(cleaner)
}

// TestAttack3SuspendedCleanerTakesAnEndedMaintenanceLease: takeMaintenance decided its lease
// on the store-clock estimate read before its first request. On a host that was suspended
// longer than the lease (15 minutes), the lease it writes has already ended by the store's
// time: the pass then finds its own lease lost before its first delete and fails, and meanwhile
// any other cleaner may take maintenance. (On a shorter suspension the lease is shorter than
// configured by the suspension; and another owner's lease, ended by the store's time, looks
// live and the pass answers ErrBusy.) Safety never rests on the lease, progress does: a host
// woken from a suspension fails its first pass. Interleaving (queue ceiling 2m):
//
//	S        cleaner answers something; its host is suspended
//	S        worker admits d (signed at S), runs and completes it: retention ends at S+7m
//	S+32m    cleaner wakes and runs a pass: its lease says "until S+15m"; the pass judges d
//	         removable and checks its lease before deleting: lost.
//
// Fixed: the lease is decided at the store's time of the maintenance object's answer.
func TestAttack3SuspendedCleanerTakesAnEndedMaintenanceLease(t *testing.T) {
	w := newWorld(t)
	w.limits.QueueCeiling = 2 * time.Minute
	host := &suspendedClock{store: w.store}
	cleaner, _ := w.handle("cleaner", 0, func(c *objstore.Config) { c.Clock = host })
	worker, _ := w.handle("worker", 0, nil)
	w.admit(cleaner, w.delivery(time.Time{}), ledger.Admitted) // its last answer before it sleeps

	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, worker, w.saved(worker, d, "verdict"))
	row, err := worker.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	asleep := ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute).Sub(w.store.Now())
	w.store.Advance(asleep)
	host.sleep(asleep)
	rep, err := cleaner.Cleanup(w.ctx, "")
	if err != nil || len(rep.Removed) != 1 {
		t.Fatalf("the first pass of a cleaner woken from a %s suspension: removed %d, %v; want d removed", asleep, len(rep.Removed), err)
	}
}

// TestAttack3FutureDeliveryThroughALaggingHost (held): a delivery signed minutes ahead of the
// store's time reaches a host whose estimate lags by a suspension. The first decision (at the
// signed time) lets it through to the reservation; the second, at the reservation's Date,
// refuses it as Stale and voids the reservation; no slot is taken or kept, a delivery signed
// within the skew of the store's time is admitted, and cleanup tidies the void reservation
// after the life of a request.
func TestAttack3FutureDeliveryThroughALaggingHost(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	host := &suspendedClock{store: w.store}
	ingress, _ := w.handle("ingress", 0, func(c *objstore.Config) { c.Clock = host })
	cleaner, _ := w.handle("cleaner", 0, nil)
	w.admit(ingress, w.delivery(time.Time{}), ledger.Admitted)
	w.store.Advance(10 * time.Minute)
	host.sleep(10 * time.Minute)

	// Too old by the store's time but ahead of the lagging estimate (signed 8m ago, accepted
	// age 5m), then ahead of the store's time by more than the skew (3m, 21m): each passes the
	// first decision and is refused by the second.
	for _, ahead := range []time.Duration{-9 * time.Minute, 2 * time.Minute, 20 * time.Minute} {
		d := w.delivery(w.store.Now().Add(ahead + w.limits.FutureSkew))
		w.admit(ingress, d, ledger.Stale)
		if _, err := cleaner.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
			t.Fatalf("a delivery %s past the skew left a row: %v", ahead+w.limits.FutureSkew, err)
		}
	}
	// Within the skew of the store's time: admitted, and it takes the last slot.
	w.admit(ingress, w.delivery(w.store.Now().Add(w.limits.FutureSkew)), ledger.Admitted)
	w.admit(ingress, w.delivery(time.Time{}), ledger.Full)
	w.exact(cleaner)
	w.store.Advance(objstore.RequestLife + 5*time.Minute)
	w.cleanLap(cleaner)
	w.cleanLap(cleaner)
	st := w.exact(cleaner)
	if st.Rows != 2 {
		t.Fatalf("%d rows, want 2", st.Rows)
	}
}
