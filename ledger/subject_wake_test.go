package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A verdict told to wait parks: its message is set aside until the grant's end, and the record
// names it the grant's waiter, so that the holder's report hands its wake back.

func park(q SubjectRequest, wake string) SubjectRequest {
	q.Wake = wake
	return q
}

func TestTheReportEndingAGrantHandsTheParkedVerdictsWakeBack(t *testing.T) {
	for _, o := range []PostOutcome{PostApplied, PostUnknown, PostRefused} {
		r := NewSubjectRecord(testSubj, subjT0)
		older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
		g := acquire(t, &r, older, subjT0, SubjectPost)
		acquire(t, &r, newer, subjT0.Add(time.Second), SubjectWait)
		p := acquire(t, &r, park(newer, "sqs:handle-2"), subjT0.Add(2*time.Second), SubjectWait)
		if !p.RetryAt.Equal(subjT0.Add(holdFor)) {
			t.Fatalf("%v: a park waits until +%v, want the grant's end +%v", o, p.RetryAt.Sub(subjT0), holdFor)
		}
		if r.Waiter.Key != newer.Order.Key || r.WaiterWake != "sqs:handle-2" {
			t.Fatalf("%v: waiter %s %q", o, r.Waiter.Key.Short(), r.WaiterWake)
		}
		if err := r.Check(); err != nil {
			t.Fatalf("%v: check: %v", o, err)
		}
		reported := subjT0.Add(3 * time.Second)
		a, err := r.Report(g, o, reported)
		if err != nil {
			t.Fatalf("%v: report: %v", o, err)
		}
		if a.Wake != "sqs:handle-2" || !r.Waiter.IsZero() || r.WaiterWake != "" {
			t.Fatalf("%v: report answers wake %q and leaves waiter %s: want the parked verdict's wake, handed back once", o, a.Wake, r.Waiter.Key.Short())
		}
		// Woken, it posts at the report, not at the grant's end.
		acquire(t, &r, newer, reported, SubjectPost)
	}
}

func TestAParkAfterTheReportComesBackAtOnce(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	g := acquire(t, &r, older, subjT0, SubjectPost)
	acquire(t, &r, newer, subjT0.Add(time.Second), SubjectWait)
	report(t, &r, g, PostRefused, subjT0.Add(2*time.Second), SubjectRetry)
	at := subjT0.Add(3 * time.Second)
	p, changed, err := r.Acquire(park(newer, "w"), horizon, at)
	if err != nil || p.Outcome != SubjectWait || !p.RetryAt.Equal(at) || changed || !r.Waiter.IsZero() {
		t.Fatalf("park after the report: %v at +%v, changed %v, waiter %s, err %v; want to come back at once, nothing named",
			p.Outcome, p.RetryAt.Sub(subjT0), changed, r.Waiter.Key.Short(), err)
	}
	// A grant that lapsed without a report is over too: the park comes back at once.
	r = NewSubjectRecord(testSubj, subjT0)
	acquire(t, &r, older, subjT0, SubjectPost)
	acquire(t, &r, newer, subjT0.Add(time.Second), SubjectWait)
	end := subjT0.Add(holdFor)
	if p := acquire(t, &r, park(newer, "w"), end, SubjectWait); !p.RetryAt.Equal(end) {
		t.Fatalf("park after the grant lapsed comes back at +%v, want +%v", p.RetryAt.Sub(subjT0), holdFor)
	}
}

func TestAParkOfAnOlderVerdictIsSuperseded(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer, newest := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute)), verdict(3, subjT0.Add(2*time.Minute))
	acquire(t, &r, older, subjT0, SubjectPost)
	acquire(t, &r, newer, subjT0, SubjectWait)
	acquire(t, &r, newest, subjT0, SubjectWait)
	s := acquire(t, &r, park(newer, "w2"), subjT0, SubjectSuperseded)
	if s.By != newest.Order.Key || !r.Waiter.IsZero() {
		t.Fatalf("superseded by %s, waiter %s: want the newest, and no waiter", s.By.Short(), r.Waiter.Key.Short())
	}
	// A newer verdict's park replaces an older waiter: only the newest can post next.
	r = NewSubjectRecord(testSubj, subjT0)
	acquire(t, &r, older, subjT0, SubjectPost)
	acquire(t, &r, newer, subjT0, SubjectWait)
	acquire(t, &r, park(newer, "w2"), subjT0, SubjectWait)
	acquire(t, &r, newest, subjT0, SubjectWait)
	acquire(t, &r, park(newest, "w3"), subjT0, SubjectWait)
	if r.Waiter.Key != newest.Order.Key || r.WaiterWake != "w3" {
		t.Fatalf("waiter %s %q, want the newest", r.Waiter.Key.Short(), r.WaiterWake)
	}
}

// A waiter is named for the grant it parked on only: a grant given since (the holder's lapsed,
// the waiter posting itself) clears it, so a later report wakes nobody it does not hold back.
func TestANewGrantClearsTheWaiter(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	acquire(t, &r, older, subjT0, SubjectPost) // its poster dies
	acquire(t, &r, newer, subjT0, SubjectWait)
	acquire(t, &r, park(newer, "w2"), subjT0, SubjectWait)
	end := subjT0.Add(holdFor)
	g := acquire(t, &r, newer, end, SubjectPost)
	if !r.Waiter.IsZero() || r.WaiterWake != "" {
		t.Fatalf("waiter %s %q after a new grant", r.Waiter.Key.Short(), r.WaiterWake)
	}
	if a := report(t, &r, g, PostApplied, end.Add(time.Second), SubjectConfirm); a.Wake != "" {
		t.Fatalf("the waiter's own report wakes %q", a.Wake)
	}
	// The holder's own verdict parked on its grant is not named: no report but its own ends it.
	r = NewSubjectRecord(testSubj, subjT0)
	acquire(t, &r, older, subjT0, SubjectPost)
	if p := acquire(t, &r, park(older, "w1"), subjT0, SubjectWait); !p.RetryAt.Equal(end) || !r.Waiter.IsZero() {
		t.Fatalf("the holder parked on its own grant: until +%v, waiter %s", p.RetryAt.Sub(subjT0), r.Waiter.Key.Short())
	}
}

// A report held in flight that lands after its grant was taken over is refused and wakes
// nobody: the grant it ended is not the record's.
func TestALateReportWakesNobody(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer, newest := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute)), verdict(3, subjT0.Add(2*time.Minute))
	stale := acquire(t, &r, older, subjT0, SubjectPost)
	end := subjT0.Add(holdFor)
	g := acquire(t, &r, newer, end, SubjectPost)
	acquire(t, &r, newest, end, SubjectWait)
	acquire(t, &r, park(newest, "w3"), end, SubjectWait)
	if _, err := r.Report(stale, PostRefused, end.Add(time.Second)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a late report: %v, want ErrLeaseLost", err)
	}
	if r.WaiterWake != "w3" {
		t.Fatal("a refused report cleared the waiter")
	}
	if a := report(t, &r, g, PostApplied, end.Add(2*time.Second), SubjectConfirm); a.Wake != "w3" {
		t.Fatalf("the live grant's report wakes %q, want the parked newest", a.Wake)
	}
}

func TestAParkIsChecked(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	for _, w := range []string{strings.Repeat("a", MaxWake+1), "sqs:a b", "local:\"x\"", "<&>"} {
		if _, _, err := r.Acquire(park(v, w), horizon, subjT0); !errors.Is(err, ErrInvalid) {
			t.Errorf("park with wake %.20q: %v, want ErrInvalid", w, err)
		}
	}
	if !ValidWake(strings.Repeat("A", MaxWake)) || !ValidWake("sqs:AQEB+/xyz==") || !ValidWake("local:0a.1b_2-c") {
		t.Error("a valid wake refused")
	}
	r.Waiter, r.WaiterWake, r.Newest, r.NewestEvaluation = VerdictID{Key: Key{1}, Evaluation: "e"}, "", v.Order, "e"
	if err := r.Check(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a waiter without a wake: %v, want ErrCorrupt", err)
	}
}
