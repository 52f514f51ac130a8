package ledger_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

func bodyDelivery(body string, bodyAt time.Time) ledger.Delivery {
	return ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: "digest-of-" + body,
		BodyDigest: ledger.SumBody([]byte(body))}, Change: []byte(`{"sha":"0"}`), BodyAt: bodyAt}
}

// A body time bounds the replay lifetime like a signed time: accepted while within the body
// age of the ledger's now (the end instant inside, FutureSkew ahead at most), retained until
// every copy has gone stale, and a route can only narrow the age.
func TestBodyTimeBoundsAcceptanceAndRetention(t *testing.T) {
	l := ledger.DefaultLimits()
	ceiling := l.BodyAgeCeiling
	for _, c := range []struct {
		name   string
		bodyAt time.Time
		route  time.Duration
		want   ledger.AdmitOutcome
	}{
		{"at the end instant", t0.Add(-ceiling), 0, ledger.Admitted},
		{"a nanosecond older", t0.Add(-ceiling - time.Nanosecond), 0, ledger.Stale},
		{"a route asking for more is clamped", t0.Add(-ceiling - time.Second), 10 * ceiling, ledger.Stale},
		{"a route narrows", t0.Add(-2 * time.Hour), time.Hour, ledger.Stale},
		{"within the narrowed age", t0.Add(-30 * time.Minute), time.Hour, ledger.Admitted},
		{"future skew ahead", t0.Add(l.FutureSkew), 0, ledger.Admitted},
		{"further ahead", t0.Add(l.FutureSkew + time.Nanosecond), 0, ledger.Stale},
	} {
		d := bodyDelivery(c.name, c.bodyAt)
		d.MaxBodyAge = c.route
		r, o, err := ledger.NewRow(d, l, t0, "e")
		if err != nil || o != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, o, err, c.want)
			continue
		}
		if o != ledger.Admitted {
			continue
		}
		if r.Permanent || !r.BodyTime || r.Lifetime() != ledger.LifetimeBody || !r.RetainUntil.Equal(c.bodyAt.Add(ceiling)) {
			t.Errorf("%s: row permanent=%v body=%v retain until %v, want %v", c.name, r.Permanent, r.BodyTime, r.RetainUntil, c.bodyAt.Add(ceiling))
		}
		if err := r.Check(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		// A redelivery of the same body: the same answer as long as it is fresh, Stale after.
		if o, _ := r.Readmit(d, l, t0); o != ledger.Pending {
			t.Errorf("%s: redelivery %v", c.name, o)
		}
		if o, _ := r.Readmit(d, l, c.bodyAt.Add(ceiling+time.Nanosecond)); o != ledger.Stale {
			t.Errorf("%s: redelivery past the window %v", c.name, o)
		}
	}
}

// A root with no body-age ceiling ignores body times: every such row is permanent, as before.
func TestBodyTimeIgnoredWithoutCeiling(t *testing.T) {
	l := ledger.DefaultLimits()
	l.BodyAgeCeiling = 0
	r, o, err := ledger.NewRow(bodyDelivery("b", t0.Add(-1000*time.Hour)), l, t0, "e")
	if err != nil || o != ledger.Admitted || !r.Permanent || r.BodyTime || r.Lifetime() != ledger.LifetimePermanent {
		t.Fatalf("row %+v %v %v", r, o, err)
	}
}

// A row keeps the lifetime it was written with: a permanent row (admitted before body times)
// stays permanent when the same body comes back with a body time, and a body time never turns
// into a signed one.
func TestRowKeepsItsLifetime(t *testing.T) {
	off := ledger.DefaultLimits()
	off.BodyAgeCeiling = 0
	d := bodyDelivery("b", t0)
	r, _, _ := ledger.NewRow(d, off, t0, "e")
	on := ledger.DefaultLimits()
	if o, changed := r.Readmit(d, on, t0.Add(time.Minute)); o != ledger.Pending || changed || !r.Permanent || r.BodyTime {
		t.Fatalf("readmit of a permanent row: %v changed=%v %+v", o, changed, r)
	}
	// A body time too old for the window is Stale even on a permanent row: freshness is the
	// delivery's, whatever the row.
	if o, _ := r.Readmit(d, on, t0.Add(on.BodyAgeCeiling+time.Second)); o != ledger.Stale {
		t.Fatalf("stale body on a permanent row: %v", o)
	}
	both := d
	both.SignedAt = t0
	if _, _, err := ledger.NewRow(both, on, t0, "e"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a delivery with both times: %v", err)
	}
	neg := d
	neg.MaxBodyAge = -time.Second
	if _, _, err := ledger.NewRow(neg, on, t0, "e"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("negative body age: %v", err)
	}
}

// A root created before body times adopts a configured ceiling once, recording when; every
// other change of a recorded policy fails closed, naming what to do.
func TestReconcileAdoptsOnceAndRefusesOtherChanges(t *testing.T) {
	configured := ledger.DefaultLimits()
	old := configured
	old.BodyAgeCeiling = 0
	got, adopt, err := old.Reconcile(configured, t0)
	if err != nil || !adopt || got.BodyAgeCeiling != configured.BodyAgeCeiling || !got.BodyTimesSince.Equal(t0) {
		t.Fatalf("adoption: %+v %v %v", got, adopt, err)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	// Recorded, it opens as it is with the configuration that adopted it.
	if again, adopt, err := got.Reconcile(configured, t0.Add(time.Hour)); err != nil || adopt || again != got {
		t.Fatalf("reopen after adoption: %+v %v %v", again, adopt, err)
	}
	for name, c := range map[string]struct {
		conf ledger.Limits
		want string
	}{
		"another ceiling": {withBody(configured, time.Hour), "never changes"},
		"switched off":    {withBody(configured, 0), "start a new root"},
	} {
		if _, adopt, err := got.Reconcile(c.conf, t0); !errors.Is(err, ledger.ErrRootMismatch) || adopt || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v adopt=%v", name, err, adopt)
		}
	}
	// Adoption changes the body-age ceiling only: another difference still fails closed.
	other := configured
	other.RecordCap++
	if _, adopt, err := old.Reconcile(other, t0); !errors.Is(err, ledger.ErrRootMismatch) || adopt {
		t.Fatalf("adoption with another cap: %v %v", err, adopt)
	}
}

func withBody(l ledger.Limits, d time.Duration) ledger.Limits {
	l.BodyAgeCeiling = d
	return l
}

// On a root that adopted body times, no body-time row ends before the grace after the
// adoption: a handle opened under the older policy has re-read the root by then.
func TestAdoptedRootHoldsBodyRowsThroughTheGrace(t *testing.T) {
	l := ledger.DefaultLimits()
	l.BodyTimesSince = t0
	r, o, err := ledger.NewRow(bodyDelivery("b", t0.Add(-l.BodyAgeCeiling)), l, t0, "e")
	if err != nil || o != ledger.Admitted {
		t.Fatal(o, err)
	}
	if want := t0.Add(ledger.BodyPolicyGrace); !r.RetainUntil.Equal(want) {
		t.Fatalf("retain until %v, want %v", r.RetainUntil, want)
	}
	// Later body times end as usual.
	r2, _, _ := ledger.NewRow(bodyDelivery("c", t0), l, t0, "e")
	if want := t0.Add(l.BodyAgeCeiling); !r2.RetainUntil.Equal(want) {
		t.Fatalf("retain until %v, want %v", r2.RetainUntil, want)
	}
}

func TestBodyAgeCeilingIsBounded(t *testing.T) {
	l := ledger.DefaultLimits()
	for _, d := range []time.Duration{-time.Second, ledger.MaxBodyAgeCeiling + time.Second} {
		l.BodyAgeCeiling = d
		if err := l.Validate(); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("ceiling %s: %v", d, err)
		}
	}
	l.BodyAgeCeiling = 0
	l.BodyTimesSince = t0
	if err := l.Validate(); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("an adoption time without a ceiling: %v", err)
	}
}

// Stats count rows by lifetime and project the days to a full cap from the last day's
// admissions net of the rows ending in the next day.
func TestStatsByLifetimeAndDaysToFull(t *testing.T) {
	l := ledger.DefaultLimits()
	l.RecordCap = 1000
	st := ledger.Stats{Limits: l, Now: t0}
	add := func(d ledger.Delivery, at time.Time) {
		r, o, err := ledger.NewRow(d, l, at, "e")
		if err != nil || o != ledger.Admitted {
			t.Fatal(o, err)
		}
		if err := st.Count(&r, nil); err != nil {
			t.Fatal(err)
		}
		st.CapacityUsed++
	}
	// Ten permanent rows today, ten body rows today, ten body rows ending within the day.
	for i := range 10 {
		add(bodyDelivery(string(rune('a'+i)), time.Time{}), t0.Add(-time.Hour))
		add(bodyDelivery(string(rune('A'+i)), t0.Add(-time.Hour)), t0.Add(-time.Hour))
		old := bodyDelivery(string(rune('0'+i)), t0.Add(-l.BodyAgeCeiling+time.Hour))
		add(old, t0.Add(-l.BodyAgeCeiling+2*time.Hour))
	}
	if st.ByLifetime[ledger.LifetimePermanent] != 10 || st.ByLifetime[ledger.LifetimeBody] != 20 || st.ByLifetime[ledger.LifetimeSigned] != 0 {
		t.Fatalf("by lifetime %v", st.ByLifetime)
	}
	if st.AdmittedLastDay != 20 || st.EndingNextDay != 10 {
		t.Fatalf("admitted %d, ending %d", st.AdmittedLastDay, st.EndingNextDay)
	}
	days, ok := st.DaysToFull()
	if !ok || math.Abs(days-(1000-30)/10.0) > 1e-9 {
		t.Fatalf("days to full %v %v", days, ok)
	}
	// Balanced: no projection.
	st.EndingNextDay = st.AdmittedLastDay
	if _, ok := st.DaysToFull(); ok {
		t.Fatal("a ledger that does not grow projected full")
	}
}
