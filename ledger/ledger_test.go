package ledger_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

func TestKeyFramingSeparatesParts(t *testing.T) {
	// Concatenation-equal triples must not collide.
	a := ledger.NewKey("ab", "c", "d")
	b := ledger.NewKey("a", "bc", "d")
	c := ledger.NewKey("a", "b", "cd")
	if a == b || b == c || a == c {
		t.Fatal("keys of different triples collide")
	}
	if ledger.NewKey("r", "s", "i") != ledger.NewKey("r", "s", "i") {
		t.Fatal("key is not deterministic")
	}
	k, err := ledger.ParseKey(a.String())
	if err != nil || k != a {
		t.Fatalf("parse %s: %v", a, err)
	}
	for _, bad := range []string{"", "zz", a.String()[:63], a.String() + "0", "g" + a.String()[1:]} {
		if _, err := ledger.ParseKey(bad); err == nil {
			t.Fatalf("ParseKey(%q) accepted", bad)
		}
	}
	var back ledger.Key
	data, _ := json.Marshal(a)
	if err := json.Unmarshal(data, &back); err != nil || back != a {
		t.Fatalf("json round trip: %v", err)
	}
}

func TestBindingDigestCoversTheBody(t *testing.T) {
	b := ledger.Binding{Route: "r", Scheme: "s", Identity: "i", BodyDigest: ledger.SumBody([]byte("one"))}
	o := b
	o.BodyDigest = ledger.SumBody([]byte("two"))
	if b.Key() != o.Key() {
		t.Fatal("the body changed the key")
	}
	if b.Digest() == o.Digest() {
		t.Fatal("the body did not change the binding digest")
	}
}

func TestRouteCanOnlyNarrow(t *testing.T) {
	l := ledger.DefaultLimits()
	if got := l.AcceptedAge(time.Hour); got != l.SignedAgeCeiling {
		t.Fatalf("a route asking for an hour got %s", got)
	}
	if got := l.AcceptedAge(time.Minute); got != time.Minute {
		t.Fatalf("a route narrowing to a minute got %s", got)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !l.Fresh(now.Add(-l.SignedAgeCeiling), 0, now) {
		t.Fatal("the end instant of the window is outside it")
	}
	if l.Fresh(now.Add(-l.SignedAgeCeiling-time.Nanosecond), 0, now) {
		t.Fatal("past the window is inside it")
	}
	if l.Fresh(now.Add(l.FutureSkew+time.Nanosecond), 0, now) {
		t.Fatal("too far ahead is inside the window")
	}
	if !l.RetainUntil(now).After(now.Add(l.AcceptedAge(0))) {
		t.Fatal("retention ends before the signature goes stale")
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := ledger.DefaultLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*ledger.Limits){
		"zero cap":       func(l *ledger.Limits) { l.RecordCap = 0 },
		"zero age":       func(l *ledger.Limits) { l.SignedAgeCeiling = 0 },
		"negative queue": func(l *ledger.Limits) { l.QueueCeiling = -1 },
		"huge change":    func(l *ledger.Limits) { l.MaxChangeBytes = 2 << 20 },
		"zero report":    func(l *ledger.Limits) { l.MaxReportBytes = 0 },
	} {
		l := ledger.DefaultLimits()
		mutate(&l)
		if err := l.Validate(); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// CheckDelivery and CheckReport are the checks every backend makes before it writes: the
// ceilings are inclusive, and each refusal is one class (ErrInvalid or ErrTooLarge).
func TestCheckDeliveryAndReport(t *testing.T) {
	l := ledger.DefaultLimits()
	l.MaxChangeBytes, l.MaxReportBytes = 8, 4
	ok := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "i"}, Change: []byte("12345678")}
	if err := l.CheckDelivery(ok); err != nil {
		t.Fatalf("a change at the ceiling: %v", err)
	}
	over := ok
	over.Change = []byte("123456789")
	if err := l.CheckDelivery(over); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("a change over the ceiling: %v", err)
	}
	invalid := ok
	invalid.Binding.Identity = ""
	invalid.Change = over.Change
	if err := l.CheckDelivery(invalid); !errors.Is(err, ledger.ErrInvalid) || errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("an invalid delivery is ErrInvalid first: %v", err)
	}
	if err := l.CheckReport([]byte("1234")); err != nil {
		t.Fatalf("a report at the ceiling: %v", err)
	}
	if err := l.CheckReport([]byte("12345")); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("a report over the ceiling: %v", err)
	}
}

func TestRowCheckRejectsContradictions(t *testing.T) {
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "i"}}
	now := time.Now()
	row, o, err := ledger.NewRow(d, ledger.DefaultLimits(), now, "e")
	if err != nil || o != ledger.Admitted || row.Check() != nil {
		t.Fatalf("new row: %v %v %v", o, err, row.Check())
	}
	for name, mutate := range map[string]func(*ledger.Row){
		"key":         func(r *ledger.Row) { r.Key[0] ^= 1 },
		"evaluation":  func(r *ledger.Row) { r.EvaluationID = "" },
		"state":       func(r *ledger.Row) { r.State = 9 },
		"permanence":  func(r *ledger.Row) { r.RetainUntil = now },
		"no report":   func(r *ledger.Row) { r.State = ledger.StateSaved },
		"done report": func(r *ledger.Row) { r.State = ledger.StateDone },
	} {
		r := row
		mutate(&r)
		if err := r.Check(); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
