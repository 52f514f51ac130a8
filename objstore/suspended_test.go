package objstore_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Suspended hosts: a host that is suspended (a paused VM, a frozen Lambda) counts none of that
// time on its monotonic clock, so its estimate of the store's time lags by the whole
// suspension. Every decision that depends on time is made at the Date of a fresh answer.

// suspendedClock is a host's monotonic clock that does not count the time the host was
// suspended (Linux CLOCK_MONOTONIC, which Go's time.Now reads for elapsed time, stops while the
// machine sleeps): it follows the store's clock less the time spent suspended.
type suspendedClock struct {
	store *ledger.ManualClock
	mu    sync.Mutex
	slept time.Duration
}

func (c *suspendedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.store.Now().Add(-c.slept)
}

// Wall is the host's wall clock, which goes on while the host is suspended: the store's.
func (c *suspendedClock) Wall() time.Time { return c.store.Now() }

func (c *suspendedClock) sleep(d time.Duration) {
	c.mu.Lock()
	c.slept += d
	c.mu.Unlock()
}

// TestSuspendedHostCannotSaveAfterItsLeaseEnded: the store-clock estimate adds the host's
// elapsed monotonic time to the last Date seen, and a decision on a cached row makes no
// request before it decides. A host that was suspended (a VM paused, a laptop asleep) counts
// none of that time: its estimate is behind the store by the whole suspension, not "a second
// plus one answer's transit". Interleaving:
//
//	T      worker: Claim -> Execute, lease 30s (the row is cached)
//	       the host is suspended for 10 minutes; nobody else claims
//	T+10m  worker: Save under the lease that ended 9.5 minutes ago: decided on the cached row
//	       at "T" and written (If-Match holds: nobody wrote the row). Invariant 4: an owner
//	       whose lease expired cannot Save, even if no one else claimed.
func TestSuspendedHostCannotSaveAfterItsLeaseEnded(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	worker, _ := w.handle("worker", 0, func(c *objstore.Config) { c.Clock = host })
	d := w.delivery(time.Time{})
	w.admit(worker, d, ledger.Admitted)
	c, err := worker.Claim(w.ctx, d.Key(), d.Binding.Digest(), "worker", 30*time.Second)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	w.store.Advance(10 * time.Minute)
	host.sleep(10 * time.Minute)
	if _, err := worker.Save(w.ctx, *c.Lease, []byte("late verdict")); !errors.Is(err, ledger.ErrLeaseLost) {
		row, _ := worker.Inspect(w.ctx, d.Key())
		t.Fatalf("save 10 minutes (store time) after a 30s lease ended: %v, want ErrLeaseLost; the row is %v "+
			"(lease until %s, store now %s)", err, row.State, c.Lease.Expires.Format(time.TimeOnly), w.store.Now().Format(time.TimeOnly))
	}
}

// TestSuspendedIngressDoesNotReadmitAForgottenDelivery: admission decides freshness on the
// estimate before its first request, and the estimate of a host that was suspended is behind
// by the whole suspension (see above). No request is held here. Interleaving (accepted age 5m,
// queue ceiling 2m, so retention ends at S+7m):
//
//	S+1m   ingress-a answers something (its estimate is S+1m), then its host is suspended
//	S+1m   ingress-b admits d; it is run, saved and completed
//	S+7m+1 cleanup forgets the row; the high-water says d is stale
//	S+8m   ingress-a wakes; the sender's replay of d arrives: decided fresh at "S+1m", the key
//	       is empty, d is Admitted again and evaluated a second time.
func TestSuspendedIngressDoesNotReadmitAForgottenDelivery(t *testing.T) {
	w := newWorld(t)
	w.limits.QueueCeiling = 2 * time.Minute
	host := &suspendedClock{store: w.store}
	a, _ := w.handle("ingress-a", 0, func(c *objstore.Config) { c.Clock = host })
	b, _ := w.handle("ingress-b", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	w.store.Advance(time.Minute)
	w.admit(a, w.delivery(time.Time{}), ledger.Admitted) // ingress-a's last answer before it sleeps
	ledgertest.MustComplete(t, b, w.saved(b, d, "first verdict"))
	row, err := b.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	asleep := ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute).Sub(w.store.Now())
	w.store.Advance(asleep)
	host.sleep(asleep)
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	got, err := a.Admit(w.ctx, d)
	if err == nil && got.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a delivery forgotten as stale was admitted again (evaluation %s, first %s) by an ingress "+
			"whose host had been suspended: it is evaluated and published twice", got.EvaluationID, row.EvaluationID)
	}
}

// TestSuspendedIngressAdmitsAFreshDelivery: the first decision of an admission
// is made before any request, on the store-clock estimate, which after the host was suspended
// is behind the store by the whole suspension. A delivery signed a second ago by the store's
// clock then looks minutes ahead of that estimate and was refused as Stale (401: the sender
// does not retry it), though it is fresh by the store's time. Found by the S3 history soak.
//
//	T      ingress: answers something (its estimate is T), then its host is suspended 2 minutes
//	T+2m   a sender signs d at T+2m; ingress admits it: its estimate still says T
func TestSuspendedIngressAdmitsAFreshDelivery(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	ingress, _ := w.handle("ingress", 0, func(c *objstore.Config) { c.Clock = host })
	w.admit(ingress, w.delivery(time.Time{}), ledger.Admitted)
	w.store.Advance(2 * time.Minute)
	host.sleep(2 * time.Minute)
	d := w.delivery(w.store.Now().Add(-time.Second))
	a, err := ingress.Admit(w.ctx, d)
	if err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("a delivery signed a second ago by the store's clock, admitted by a host that was suspended: %v %v, want Admitted", a.Outcome, err)
	}
}

// TestSuspendedOldPolicyHandleDoesNotReadmitAForgottenBody: a handle opened under the older
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
func TestSuspendedOldPolicyHandleDoesNotReadmitAForgottenBody(t *testing.T) {
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

// TestSuspendedCleanerTakesALiveMaintenanceLease: takeMaintenance decided its lease
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
func TestSuspendedCleanerTakesALiveMaintenanceLease(t *testing.T) {
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

// TestFutureDeliveryThroughALaggingHostTakesNoSlot (held): a delivery signed minutes ahead of the
// store's time reaches a host whose estimate lags by a suspension. The first decision (at the
// signed time) lets it through to the reservation; the second, at the reservation's Date,
// refuses it as Stale and voids the reservation; no slot is taken or kept, a delivery signed
// within the skew of the store's time is admitted, and cleanup tidies the void reservation
// after the life of a request.
func TestFutureDeliveryThroughALaggingHostTakesNoSlot(t *testing.T) {
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

// TestSuspendedRunnerReportsAtTheStoresTime: a report follows its grant on the version the
// grant wrote, without reading the record again, while the host's estimate of the store's time
// can be trusted. A runner host suspended between its grant and its report (its clock for
// elapsed time stopped, its wall clock went on) must not decide the report at its lagging
// estimate: a post whose outcome is unknown may land until the settle time after the report,
// and a settle time counted from minutes ago would let another verdict post over it meanwhile.
func TestSuspendedRunnerReportsAtTheStoresTime(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	runner, _ := w.handle("runner", 0, func(c *objstore.Config) { c.Clock = host })
	d := w.delivery(w.store.Now())
	s := w.saved(runner, d, "verdict")
	const settle = time.Minute
	q := ledger.SubjectRequest{Subject: ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app",
		SHA: "0123456789012345678901234567890123456789", Context: "amiss"}, Order: s.Lease.Order(),
		EvaluationID: s.Lease.EvaluationID, HoldFor: time.Hour, Settle: settle}
	g, err := runner.AcquireSubject(w.ctx, q)
	if err != nil || g.Outcome != ledger.SubjectPost {
		t.Fatalf("acquire: %+v %v", g, err)
	}
	w.store.Advance(10 * time.Minute)
	host.sleep(10 * time.Minute)
	a, err := runner.ReportSubject(w.ctx, g, ledger.PostUnknown)
	if err != nil || a.Outcome != ledger.SubjectRetry {
		t.Fatalf("report: %+v %v", a, err)
	}
	if want := w.store.Now().Add(settle); a.RetryAt.Before(want) {
		t.Fatalf("a post of unknown outcome reported 10 minutes after the grant settles at %s, want no sooner than %s (the store's time plus the settle time)",
			a.RetryAt.Format(time.TimeOnly), want.Format(time.TimeOnly))
	}
}
