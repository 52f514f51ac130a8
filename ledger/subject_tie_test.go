package ledger

import (
	"testing"
	"time"
)

// Two verdicts of one subject whose events carry the same time are ordered by what their
// payloads prove, then by what the provider showed at their evaluation, and only then by their
// admission.
func TestEqualEventTimesAreOrderedByTheTieBeforeAdmission(t *testing.T) {
	a, b, c := Digest{0xa}, Digest{0xb}, Digest{0xc}
	at := func(k byte, admitted time.Duration, tie Tie) Order {
		return Order{Key: Key{k}, EventAt: subjT0, AdmittedAt: subjT0.Add(admitted), Tie: tie}
	}
	cases := []struct {
		name         string
		older, newer Order
	}{
		{"an edit proving it changed the other's inputs is newer, though admitted first",
			at(1, time.Second, Tie{Inputs: a}), at(2, 0, Tie{Inputs: b, From: a})},
		{"an edit that changed nothing of the other's inputs, admitted first, is still newer",
			at(1, time.Second, Tie{Inputs: a}), at(2, 0, Tie{Inputs: a, From: a})},
		{"the provider showed one's inputs and no longer the other's",
			at(1, time.Second, Tie{Inputs: a, Seen: SeenStale}), at(2, 0, Tie{Inputs: b, Seen: SeenCurrent})},
		{"a proof comes before what the provider showed",
			at(1, time.Second, Tie{Inputs: a, Seen: SeenCurrent}), at(2, 0, Tie{Inputs: b, From: a, Seen: SeenStale})},
		{"a verdict read and one not read: admission",
			at(1, 0, Tie{Inputs: a, Seen: SeenCurrent}), at(2, time.Second, Tie{Inputs: b})},
		{"both current: admission", at(1, 0, Tie{Inputs: a, Seen: SeenCurrent}), at(2, time.Second, Tie{Inputs: b, Seen: SeenCurrent})},
		{"each proving the other: admission", at(1, 0, Tie{Inputs: a, From: b}), at(2, time.Second, Tie{Inputs: b, From: a})},
		{"an edit came after the event that made its commit the head, though admitted first",
			at(1, time.Second, Tie{Inputs: a, Starts: true}), at(2, 0, Tie{Inputs: c, From: b})},
		{"the head's start and an edit proving the other's inputs agree",
			at(1, time.Second, Tie{Inputs: a, Starts: true}), at(2, 0, Tie{Inputs: b, From: a})},
		{"two starts of one head: admission", at(1, 0, Tie{Inputs: a, Starts: true}), at(2, time.Second, Tie{Inputs: b, Starts: true})},
		{"nothing known: admission", at(1, 0, Tie{}), at(2, time.Second, Tie{})},
	}
	for _, c := range cases {
		if !c.older.Before(c.newer) || c.newer.Before(c.older) {
			t.Errorf("%s: %+v is not before %+v", c.name, c.older, c.newer)
		}
		if c.older.Before(c.older) || c.newer.Before(c.newer) {
			t.Errorf("%s: an order is before itself", c.name)
		}
	}
	// A tie never outweighs an event time.
	if !at(1, 0, Tie{Inputs: b, From: a}).Before(Order{Key: Key{2}, EventAt: subjT0.Add(time.Second), AdmittedAt: subjT0, Tie: Tie{Inputs: a}}) {
		t.Error("a proof outweighed a later event time")
	}
}

// The record keeps the newest verdict's tie: an older verdict of the same second, asking
// after it, is superseded by what the newer one proved.
func TestTheRecordKeepsTheNewestVerdictsTie(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	opened, edited := verdict(1, subjT0), verdict(2, subjT0)
	opened.Order.Tie, opened.Order.AdmittedAt = Tie{Inputs: Digest{0xa}}, subjT0.Add(time.Second)
	edited.Order.Tie = Tie{Inputs: Digest{0xb}, From: Digest{0xa}}
	g := acquire(t, &r, edited, subjT0, SubjectPost)
	report(t, &r, g, PostApplied, subjT0.Add(time.Second), SubjectStanding)
	if s := acquire(t, &r, opened, subjT0.Add(2*time.Second), SubjectSuperseded); s.By != edited.Order.Key {
		t.Fatalf("superseded by %s, want the edit", s.By.Short())
	}
}
