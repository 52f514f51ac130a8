package ledgertest

import (
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of body times: a provider-set time inside a signed body bounds a body-only delivery's
// replay memory, with the recorded body-age ceiling.

// bodyDelivery makes a new body-only delivery (identity: the body's digest, as for GitHub)
// whose body carries the provider-set time bodyAt.
func (e *env) bodyDelivery(bodyAt time.Time) ledger.Delivery {
	e.seq++
	body := []byte(fmt.Sprintf(`{"n":%d,"repository":{"pushed_at":%d}}`, e.seq, bodyAt.Unix()))
	digest := ledger.SumBody(body)
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "main", Scheme: "github-sha256", Identity: digest.String(), BodyDigest: digest},
		Change:  []byte(fmt.Sprintf(`{"repo":"acme/app","sha":"%040d"}`, e.seq)),
		BodyAt:  bodyAt,
	}
}

// A body-time delivery is admitted, answered from its row while fresh (Pending, then
// Duplicate), retained to the end instant of the body-age ceiling, forgotten one tick later,
// and a replay after that is Stale by the ledger's own now: after a reopen, and after the
// clock steps back to when the body was fresh (the persisted high-water decides).
func caseBodyTimeBoundsReplayMemory(e *env) {
	t0 := e.clock.Now()
	ceiling := e.limits.BodyAgeCeiling
	if ceiling <= 0 {
		e.t.Fatalf("the suite's limits record no body-age ceiling")
	}
	bodyAt := t0.Add(-time.Hour)
	d := e.bodyDelivery(bodyAt)
	a := e.admit(d, ledger.Admitted)
	if want := bodyAt.Add(ceiling); !a.RetainUntil.Equal(want) || a.Lifetime != ledger.LifetimeBody {
		e.t.Fatalf("admission retains until %v (%v), want %v (body)", a.RetainUntil, a.Lifetime, want)
	}
	if r := e.row(d); r.Permanent || !r.BodyTime || !r.SignedAt.Equal(bodyAt) {
		e.t.Fatalf("row permanent=%v body=%v at %v", r.Permanent, r.BodyTime, r.SignedAt)
	}
	// A redelivery while the row is unfinished is Pending; once done, Duplicate.
	e.clock.Advance(time.Minute)
	e.admit(d, ledger.Pending)
	c := e.claim(d, "w", ledger.Execute)
	e.complete(e.save(*c.Lease, "verdict:success"))
	e.clock.Set(bodyAt.Add(ceiling)) // the end instant: still acceptable, still retained
	e.admit(d, ledger.Duplicate)
	if removedKeys(e.cleanAll())[d.Key()] || e.gone(d) {
		e.t.Fatalf("row removed at the end instant of its retention")
	}
	e.clock.Set(bodyAt.Add(ceiling).Add(e.tick()))
	e.admit(d, ledger.Stale)
	if !removedKeys(e.cleanAll())[d.Key()] || !e.gone(d) {
		e.t.Fatalf("row kept past its retention")
	}
	// Forgotten: the replay is Stale, never a new row, across a reopen and a clock step back.
	e.reopen()
	e.admit(d, ledger.Stale)
	e.clock.Set(bodyAt.Add(time.Minute))
	e.reopen()
	e.admit(d, ledger.Stale)
	if !e.gone(d) {
		e.t.Fatalf("a replay after the row was forgotten re-created it")
	}
}

// No route setting and no body time widens what is accepted: a route asking for more than the
// ceiling is clamped to it, a narrower route refuses older bodies, a body time too far ahead is
// refused, and nothing refused is stored.
func caseInvariant9BodyAgeRouteCannotWiden(e *env) {
	now := e.clock.Now()
	ceiling := e.limits.BodyAgeCeiling
	d := e.bodyDelivery(now.Add(-ceiling - e.tick()))
	d.MaxBodyAge = 10 * ceiling
	e.admit(d, ledger.Stale)
	d = e.bodyDelivery(now.Add(-2 * time.Hour))
	d.MaxBodyAge = time.Hour
	e.admit(d, ledger.Stale)
	d.MaxBodyAge = 0
	e.admit(d, ledger.Admitted)
	e.admit(e.bodyDelivery(now.Add(e.limits.FutureSkew+e.tick())), ledger.Stale)
	e.admit(e.bodyDelivery(now.Add(e.limits.FutureSkew)), ledger.Admitted)
	if e.stats().Rows != 2 {
		e.t.Fatalf("stale deliveries were stored")
	}
}

// Permanent, signed and body-time rows live side by side: stats count them by lifetime and by
// the day's admissions, and cleanup forgets the bounded ones after their retention while the
// permanent one stays.
func caseRowsOfEveryLifetimeSideBySide(e *env) {
	t0 := e.clock.Now()
	perm := e.finish(time.Time{})
	signed := e.finish(t0)
	body := e.bodyDelivery(t0)
	e.admit(body, ledger.Admitted)
	e.finishRow(body, "body-time row")
	st := e.stats()
	for k, want := range map[ledger.Lifetime]int64{ledger.LifetimePermanent: 1, ledger.LifetimeSigned: 1, ledger.LifetimeBody: 1} {
		if st.ByLifetime[k] != want {
			e.t.Fatalf("%v rows: %d, want %d (%v)", k, st.ByLifetime[k], want, st.ByLifetime)
		}
	}
	if st.AdmittedLastDay != 3 {
		e.t.Fatalf("admitted in the last day: %d, want 3", st.AdmittedLastDay)
	}
	end := ledger.MaxTime(e.row(signed).RetainUntil, e.row(body).RetainUntil)
	e.clock.Set(end.Add(e.tick()))
	removed := removedKeys(e.cleanAll())
	if !removed[signed.Key()] || !removed[body.Key()] || removed[perm.Key()] {
		e.t.Fatalf("cleanup removed %v", removed)
	}
	if st := e.stats(); st.Rows != 1 || st.ByLifetime[ledger.LifetimePermanent] != 1 {
		e.t.Fatalf("after cleanup: %d rows, %v", st.Rows, st.ByLifetime)
	}
	e.admit(perm, ledger.Duplicate)
}
