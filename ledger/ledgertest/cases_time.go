package ledgertest

import (
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of time: freshness, retention, clocks that move back.

func caseInvariant9RouteCannotWidenAcceptance(e *env) {
	now := e.clock.Now()
	ceiling := e.limits.SignedAgeCeiling
	// Older than the ceiling: refused whatever the route says.
	d := e.delivery(now.Add(-ceiling - time.Second))
	d.MaxAge = 10 * ceiling
	e.admit(d, ledger.Stale)
	// A route may narrow.
	d = e.delivery(now.Add(-2 * time.Minute))
	d.MaxAge = time.Minute
	e.admit(d, ledger.Stale)
	d.MaxAge = 0
	e.admit(d, ledger.Admitted)
	// Too far in the future.
	e.admit(e.delivery(now.Add(e.limits.FutureSkew+time.Second)), ledger.Stale)
	e.admit(e.delivery(now.Add(e.limits.FutureSkew)), ledger.Admitted)
	if e.stats().Rows != 2 {
		e.t.Fatalf("stale deliveries were stored")
	}
}

func caseInvariant9LaterSignedTimeLengthensRetention(e *env) {
	t0 := e.clock.Now()
	d := e.delivery(t0)
	a := e.admit(d, ledger.Admitted)
	if want := t0.Add(e.limits.SignedAgeCeiling + e.limits.QueueCeiling); !a.RetainUntil.Equal(want) {
		e.t.Fatalf("retain until %v, want %v", a.RetainUntil, want)
	}
	// The sender re-signs its retry a little later: same id and body, later time.
	e.clock.Advance(2 * time.Minute)
	retry := d
	retry.SignedAt = e.clock.Now()
	a2 := e.admit(retry, ledger.Pending)
	if !a2.RetainUntil.Equal(a.RetainUntil.Add(2 * time.Minute)) {
		e.t.Fatalf("re-admission retain until %v, want %v", a2.RetainUntil, a.RetainUntil.Add(2*time.Minute))
	}
	// An earlier signed time never shortens it.
	e.admit(d, ledger.Pending)
	if r := e.row(d); !r.RetainUntil.Equal(a2.RetainUntil) {
		e.t.Fatalf("earlier signed time moved retention to %v", r.RetainUntil)
	}
	c := e.claim(d, "w", ledger.Execute)
	e.complete(e.save(*c.Lease, "r"))
	e.clock.Advance(2 * time.Minute)
	again := d
	again.SignedAt = e.clock.Now()
	a3 := e.admit(again, ledger.Duplicate)
	e.clock.Set(a2.RetainUntil.Add(e.tick()))
	if removedKeys(e.cleanAll())[d.Key()] {
		e.t.Fatalf("row removed before the latest signature went stale")
	}
	e.clock.Set(a3.RetainUntil.Add(e.tick()))
	if !removedKeys(e.cleanAll())[d.Key()] {
		e.t.Fatalf("row kept after every signature went stale")
	}
}

func caseEndInstantOfReplayLifetimeIsInsideTheWindow(e *env) {
	t0 := e.clock.Now()
	// Freshness: signed exactly the accepted age ago is still fresh.
	e.admit(e.delivery(t0.Add(-e.limits.SignedAgeCeiling)), ledger.Admitted)
	e.admit(e.delivery(t0.Add(-e.limits.SignedAgeCeiling-time.Nanosecond)), ledger.Stale)
	// Retention: at the end instant the row stays; one tick later it goes.
	d := e.finish(t0)
	r := e.row(d)
	e.clock.Set(r.RetainUntil)
	if removedKeys(e.cleanAll())[d.Key()] || e.gone(d) {
		e.t.Fatalf("row removed at the end instant of its retention")
	}
	e.admit(d, ledger.Stale) // the signature itself went stale long ago
	e.clock.Set(r.RetainUntil.Add(e.tick()))
	if !removedKeys(e.cleanAll())[d.Key()] || !e.gone(d) {
		e.t.Fatalf("row kept past its retention")
	}
}

func caseInvariant12ClockMovedBackwardsReopensNothing(e *env) {
	// An ended lease stays ended when the clock steps back, across reopen.
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	e.clock.Advance(lease + time.Second)
	_, err := e.l.Save(e.ctx, *c.Lease, []byte("r"))
	wantErr(e.t, "save after expiry", err, ledger.ErrLeaseLost)
	e.clock.Advance(-lease)
	e.reopen()
	_, err = e.l.Save(e.ctx, *c.Lease, []byte("r"))
	wantErr(e.t, "save after the clock stepped back", err, ledger.ErrLeaseLost)
	_, err = e.l.Renew(e.ctx, *c.Lease, lease)
	wantErr(e.t, "renew after the clock stepped back", err, ledger.ErrLeaseLost)

	// A removed row does not come back as live, and an ended row stays ended.
	t0 := e.clock.Now()
	ended := e.finish(t0)
	r := e.row(ended)
	e.clock.Set(r.RetainUntil.Add(time.Second))
	if !removedKeys(e.cleanAll())[ended.Key()] {
		e.t.Fatalf("ended row not removed")
	}
	e.clock.Set(t0)
	e.reopen()
	e.admit(ended, ledger.Stale)
	if !e.gone(ended) {
		e.t.Fatalf("stale re-admission re-created a forgotten row")
	}
	// A running row's lease granted before the step back is not extended by it.
	d2 := e.delivery(time.Time{})
	e.admit(d2, ledger.Admitted)
	c2 := e.claim(d2, "w", ledger.Execute)
	if !c2.Lease.Expires.After(r.RetainUntil) {
		e.t.Fatalf("lease granted at %v expiring %v: the ledger used the stepped-back clock", e.clock.Now(), c2.Lease.Expires)
	}
}

func caseStaleStaysRefusedAfterCleanupAndClockStepBack(e *env) {
	t0 := e.clock.Now()
	d := e.finish(t0)
	r := e.row(d)
	// Past retention the signature is stale: refused, and cleanup forgets the row.
	e.clock.Set(r.RetainUntil.Add(time.Minute))
	e.admit(d, ledger.Stale)
	if !removedKeys(e.cleanAll())[d.Key()] {
		e.t.Fatalf("ended row not removed")
	}
	// The clock steps back to when the signature was fresh, and the process restarts.
	e.clock.Set(t0)
	e.reopen()
	e.admit(d, ledger.Stale)
	if !e.gone(d) {
		e.t.Fatalf("replayed request re-created its row")
	}
	st := e.stats()
	if st.HighWater.Before(r.RetainUntil) {
		e.t.Fatalf("high-water %v not persisted past %v", st.HighWater, r.RetainUntil)
	}
}
