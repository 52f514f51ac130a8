package ledger

import (
	"testing"
	"time"
)

// Late verdicts on a forgotten subject. Once a subject's record is forgotten, a status the
// record knew of may still stand, newer than any verdict still older than the horizon. Such a
// late verdict must read back before it posts, and post only if nothing stands, for as long as
// nothing posted under the new record has shown what stands: not only on the request that
// brings the record back.

// lateRecord is a subject's record brought back at now by the late verdict q (as a backend
// makes a record that does not exist: NewSubjectRecord at the decision's now), and q's grant.
func lateRecord(t *testing.T, q SubjectRequest, now time.Time) (SubjectRecord, SubjectGrant) {
	t.Helper()
	r := NewSubjectRecord(testSubj, now)
	g := acquire(t, &r, q, now, SubjectPost)
	if !g.Late || !g.ReadBack {
		t.Fatalf("the first late verdict: late %v read back %v, want both", g.Late, g.ReadBack)
	}
	return r, g
}

// A late verdict whose read-back failed (reported refused: nothing was posted) is still late on
// its next grant: posting it then without reading back would put it over a newer status the
// forgotten record knew of.
func TestALateVerdictWhoseReadBackFailedStaysLate(t *testing.T) {
	now := subjT0.Add(horizon + time.Hour)
	v := verdict(1, subjT0)
	r, g := lateRecord(t, v, now)
	report(t, &r, g, PostRefused, now.Add(time.Second), SubjectRetry)
	g = acquire(t, &r, v, now.Add(time.Minute), SubjectPost)
	if !g.Late || !g.ReadBack {
		t.Fatalf("the late verdict asked again: late %v read back %v, want both", g.Late, g.ReadBack)
	}
}

// A late verdict that found another status standing (overridden) leaves the record knowing no
// more of what stands: a newer late verdict reads back too, and does not post over it.
func TestALateVerdictAfterAnOverriddenOneIsLateToo(t *testing.T) {
	now := subjT0.Add(horizon + time.Hour)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Second))
	r, g := lateRecord(t, older, now)
	report(t, &r, g, PostOverridden, now.Add(time.Second), SubjectSuperseded)
	g = acquire(t, &r, newer, now.Add(time.Minute), SubjectPost)
	if !g.Late || !g.ReadBack {
		t.Fatalf("a newer late verdict after an overridden one: late %v read back %v, want both", g.Late, g.ReadBack)
	}
	report(t, &r, g, PostOverridden, now.Add(time.Minute+time.Second), SubjectSuperseded)
}

// Once a late verdict's post has landed (or may have: its read-back found nothing standing
// before it posted), what stands is the record's to know again: a newer late verdict posts
// over it as any newer verdict does, without being told to give way to it.
func TestALateVerdictAfterALatePostIsNotLate(t *testing.T) {
	now := subjT0.Add(horizon + time.Hour)
	for _, post := range []PostOutcome{PostApplied, PostUnknown} {
		older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Second))
		r, g := lateRecord(t, older, now)
		a, err := r.Report(g, post, now.Add(time.Second))
		if err != nil {
			t.Fatalf("report %v: %v", post, err)
		}
		at := MaxTime(a.RetryAt, now.Add(time.Minute))
		g = acquire(t, &r, newer, at, SubjectPost)
		if g.Late || g.ReadBack {
			t.Fatalf("after the older late verdict's post was %v, the newer one: late %v read back %v, want neither", post, g.Late, g.ReadBack)
		}
		report(t, &r, g, PostApplied, at.Add(time.Second), SubjectStanding)
	}
}

// A record that came back for a verdict within the horizon holds every verdict that can still
// land: one older than the horizon is superseded by it, never late.
func TestARecordBroughtBackInTimeMakesNoVerdictLate(t *testing.T) {
	now := subjT0.Add(horizon + time.Hour)
	fresh := verdict(2, now.Add(-time.Minute))
	r := NewSubjectRecord(testSubj, now)
	g := acquire(t, &r, fresh, now, SubjectPost)
	if g.Late || g.ReadBack {
		t.Fatalf("a verdict within the horizon: late %v read back %v", g.Late, g.ReadBack)
	}
	report(t, &r, g, PostRefused, now.Add(time.Second), SubjectRetry)
	acquire(t, &r, verdict(1, subjT0), now.Add(time.Minute), SubjectSuperseded)
}

// A late grant that ends without a report (its runner died, perhaps after a read-back found a
// newer status standing) teaches the record nothing: the next late verdict reads back too.
func TestALateGrantThatEndsWithoutAReportLeavesTheNextLate(t *testing.T) {
	now := subjT0.Add(horizon + time.Hour)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Second))
	r, _ := lateRecord(t, older, now)
	g := acquire(t, &r, newer, now.Add(holdFor+settleFor+time.Minute), SubjectPost)
	if !g.Late || !g.ReadBack {
		t.Fatalf("a late verdict after a late grant ended without a report: late %v read back %v, want both", g.Late, g.ReadBack)
	}
}
