package ledgertest

import (
	"errors"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of admission: bindings, bounded work, the record cap, size limits.

func caseInvariant7BindingConflictOnAdmitAndClaim(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	other := d
	other.Binding.BodyDigest = ledger.SumBody([]byte("another body"))
	if other.Key() != d.Key() {
		e.t.Fatalf("body digest changed the key")
	}
	e.admit(other, ledger.BindingConflict)
	c, err := e.l.Claim(e.ctx, d.Key(), other.Binding.Digest(), "w", lease)
	if err != nil || c.Outcome != ledger.ClaimConflict {
		e.t.Fatalf("claim with another binding: %+v, %v", c, err)
	}
	r := e.row(d)
	if r.Binding != d.Binding || r.State != ledger.StatePending || r.Fence != 0 {
		e.t.Fatalf("conflict changed the row: %+v", r)
	}
	// The conflict holds after the row finishes too.
	cl := e.claim(d, "w", ledger.Execute)
	e.complete(e.save(*cl.Lease, "r"))
	e.admit(other, ledger.BindingConflict)
}

func caseInvariant10AdmissionIssuesNoListingAndBoundedOperations(e *env) {
	measure := func() OpCount {
		d := e.delivery(time.Time{})
		e.h.ResetOps()
		e.admit(d, ledger.Admitted)
		return e.h.Ops()
	}
	small := measure()
	for range 300 {
		e.admit(e.delivery(e.clock.Now()), ledger.Admitted)
	}
	large := measure()
	if small.Listings != 0 || large.Listings != 0 {
		e.t.Fatalf("admission listed the store: %d and %d listings", small.Listings, large.Listings)
	}
	if large.Ops > small.Ops || large.Ops > 24 {
		e.t.Fatalf("admission took %d operations with 300 rows, %d with 1 (bound 24)", large.Ops, small.Ops)
	}
	e.t.Logf("admission: %d operations with 1 row retained, %d with 301", small.Ops, large.Ops)
	last := e.delivery(time.Time{})
	e.admit(last, ledger.Admitted)
	e.h.ResetOps()
	e.admit(last, ledger.Pending)
	if f := e.h.Ops(); f.Listings != 0 || f.Ops > small.Ops {
		e.t.Fatalf("re-admission: %+v, more than a new admission's %d", f, small.Ops)
	}
}

func caseInvariant11FullRefusesNewKeysWhileWorkCompletes(e *env) {
	var inside []ledger.Delivery
	var leases []ledger.Lease
	for range 6 {
		d := e.delivery(time.Time{})
		e.admit(d, ledger.Admitted)
		inside = append(inside, d)
		leases = append(leases, *e.claim(d, "w", ledger.Execute).Lease)
	}
	a := e.admit(e.delivery(time.Time{}), ledger.Full)
	if !errors.Is(a.Err(), ledger.ErrFull) {
		e.t.Fatalf("full admission error %v", a.Err())
	}
	// Work inside the cap goes on: re-admission, claim, save, complete.
	e.admit(inside[0], ledger.Pending)
	for i, d := range inside {
		s := e.save(leases[i], "r")
		e.complete(s)
		e.admit(d, ledger.Duplicate)
	}
	e.admit(e.delivery(time.Time{}), ledger.Full)
	if st := e.stats(); st.CapacityUsed != 6 || st.Rows != 6 {
		e.t.Fatalf("stats %+v", st)
	}
}

func caseInvariant11FullOnlyWhenTheWholeCapIsUsed(e *env) {
	t0 := e.clock.Now()
	var first []ledger.Delivery
	for range 40 {
		first = append(first, e.finish(t0))
	}
	e.admit(e.delivery(time.Time{}), ledger.Full)
	e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
	e.cleanAll()
	// Every slot is free again: exactly the cap is admitted, however keys spread.
	for i := range 40 {
		d := e.delivery(time.Time{})
		if a, err := e.l.Admit(e.ctx, d); err != nil || a.Outcome != ledger.Admitted {
			e.t.Fatalf("admission %d of 40 after cleanup: %+v %v", i, a, err)
		}
	}
	e.admit(e.delivery(time.Time{}), ledger.Full)
	e.capacityHolds(true)
	_ = first
}

func caseInvariant13OversizedStateOrReportIsRefusedWhole(e *env) {
	d := e.delivery(time.Time{})
	d.Change = make([]byte, e.limits.MaxChangeBytes+1)
	_, err := e.l.Admit(e.ctx, d)
	wantErr(e.t, "admit of an oversized change", err, ledger.ErrTooLarge)
	if !e.gone(d) {
		e.t.Fatalf("oversized admission stored a row")
	}
	if st := e.stats(); st.CapacityUsed != 0 {
		e.t.Fatalf("oversized admission took capacity: %d", st.CapacityUsed)
	}
	d.Change = make([]byte, e.limits.MaxChangeBytes)
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	_, err = e.l.Save(e.ctx, *c.Lease, make([]byte, e.limits.MaxReportBytes+1))
	wantErr(e.t, "save of an oversized report", err, ledger.ErrTooLarge)
	if r := e.row(d); r.State != ledger.StateRunning || !r.Report.IsZero() {
		e.t.Fatalf("oversized save changed the row: %v", r.State)
	}
	s := e.save(*c.Lease, strings.Repeat("x", e.limits.MaxReportBytes))
	e.complete(s)
}
