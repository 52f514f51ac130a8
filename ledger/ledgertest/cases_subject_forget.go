package ledgertest

import (
	"errors"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of a subject record forgotten by cleanup, and what asks for it afterwards: a verdict
// that asks after its subject's record is gone finds a record made anew, which knows nothing of
// what stands, so a verdict older than the horizon must read back what stands before it posts
// (SubjectGrant.Late). These hold for the process that makes the record anew whatever its
// clock reads within the bound the ledger assumes of the clocks it decides on (docs/runner.md,
// docs/s3-ledger.md: they agree within 10 s): that process's clock may read behind the one
// cleanup forgot the record by.

// clocksApart is how far apart the clocks the ledger decides on may read: the bound both
// backends assume.
const clocksApart = 10 * time.Second

// forgetSubjects runs cleanup, the clock going on from past the horizon of the newest verdict
// (newest) in steps of a few seconds, until it has forgotten the records of every subject in
// ss, and answers how many subject records its passes forgot. A backend may keep a record past
// the horizon by its margin for its clocks (Harness.SubjectMargin), not longer once nothing is
// in flight: the case fails if the records outlive that. The case goes on from the pass that
// forgot the last one.
func (e *env) forgetSubjects(newest time.Time, ss ...ledger.Subject) int {
	e.t.Helper()
	e.clock.Set(newest.Add(e.limits.SubjectHorizon() + e.tick()))
	removed := 0
	for deadline := e.clock.Now().Add(e.h.SubjectMargin() + e.tick()); ; e.clock.Advance(5 * time.Second) {
		removed += e.cleanAll().RemovedSubjects
		kept := 0
		for _, s := range ss {
			_, err := e.l.InspectSubject(e.ctx, s.Key())
			switch {
			case errors.Is(err, ledger.ErrUnknownSubject):
			case err != nil:
				e.t.Fatalf("inspect subject: %v", err)
			default:
				kept++
			}
		}
		if kept == 0 {
			return removed
		}
		if !e.clock.Now().Before(deadline) {
			e.t.Fatalf("cleanup kept %d subject records %v past their horizon, with nothing in flight; the backend's margin is %v",
				kept, e.clock.Now().Sub(newest.Add(e.limits.SubjectHorizon())), e.h.SubjectMargin())
		}
	}
}

// behind steps the clock back by clocksApart and reopens the handle: the next call is made by
// another process whose clock reads that much behind the one cleanup forgot by.
func (e *env) behind() {
	e.t.Helper()
	e.clock.Advance(-clocksApart)
	e.reopen()
}

// A verdict older than the newest one of a forgotten record never posts over it: asking after
// the record was forgotten, on a clock behind the cleaner's by as much as the clocks may
// disagree, it is superseded or granted a late post (it reads back first, and posts only if
// nothing stands). Its event is a second older than the newest verdict's, so that the clock
// behind would call it within the horizon were the record forgotten at the first instant past
// the newest verdict's. A delivery of an event as old arriving now is refused as stale.
func caseSubjectOlderVerdictAfterItsRecordIsForgottenReadsBackFirst(e *env) {
	s := testSubject(12)
	t0 := e.clock.Now()
	dOld, older := e.saved(t0)
	_, newer := e.saved(t0.Add(time.Second))
	g := e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	e.complete(newer)
	// Cleanup runs between: the newer verdict's row, done, is forgotten at the end of its
	// retention, well before its subject's record.
	e.clock.Set(newer.Lease.EventAt.Add(e.limits.SubjectHorizon() - time.Hour))
	e.cleanAll()
	e.forgetSubjects(newer.Lease.EventAt, s)
	e.admit(e.delivery(older.Lease.EventAt), ledger.Stale)

	e.behind()
	c := e.claim(dOld, "w2", ledger.Publish) // the older verdict's lease ran out long ago
	g, err := e.l.AcquireSubject(e.ctx, e.subjectRequest(s, *c.Staged))
	if err != nil {
		e.t.Fatalf("the older verdict asks after its subject's record was forgotten: %v", err)
	}
	switch {
	case g.Outcome == ledger.SubjectSuperseded:
	case g.Outcome == ledger.SubjectPost && g.Late && g.ReadBack:
		// It reads back the newer verdict standing, and posts nothing.
		g = e.reportSubject(g, ledger.PostOverridden, ledger.SubjectSuperseded)
	default:
		e.t.Fatalf("the older verdict, asking on a clock %v behind the one its subject's record was forgotten by: %v late %v read back %v;"+
			" want superseded, or a late post that reads back first (it would post over the newer verdict, which stands)",
			clocksApart, g.Outcome, g.Late, g.ReadBack)
	}
	if err := e.l.Supersede(e.ctx, *c.Staged, g.By); err != nil {
		e.t.Fatalf("supersede: %v", err)
	}
	if r := e.row(dOld); r.State != ledger.StateSuperseded {
		e.t.Fatalf("older row: %v", r.State)
	}
}

// A record whose newest verdict is known to stand is forgotten past the horizon whatever that
// verdict's row is doing: its publisher died after the report (the row still saved), or the
// row was abandoned after it (a permanent row, kept for an operator to revive). Whatever asks for the subject afterwards reads back before it
// posts, on a clock behind the cleaner's too: the row published again, and the abandoned one
// revived, each read back their own verdict standing and post nothing again; the verdict then
// stands, and an older one is superseded by it.
func caseSubjectStandingVerdictPublishedAgainAfterItsRecordIsForgottenReadsBack(e *env) {
	sSaved, sAbandoned := testSubject(13), testSubject(14)
	t0 := e.clock.Now()
	_, olderA := e.saved(t0)
	dA, a := e.saved(t0.Add(time.Second))
	dB, b := e.saved(time.Time{}) // permanent, so that its abandoned row outlives the horizon for a revive
	g := e.acquireSubject(e.subjectRequest(sSaved, a), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding) // its publisher dies before Complete
	g = e.acquireSubject(e.subjectRequest(sAbandoned, b), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	if err := e.l.Abandon(e.ctx, b, "publish budget spent"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	e.forgetSubjects(a.Lease.EventAt, sSaved, sAbandoned)

	e.behind()
	again := func(s ledger.Subject, st ledger.Staged) {
		e.t.Helper()
		g := e.acquireSubject(e.subjectRequest(s, st), ledger.SubjectPost)
		if !g.ReadBack {
			e.t.Fatalf("a verdict posted and known to stand before its record was forgotten is granted a post without a read-back"+
				" (late %v), on a clock %v behind the cleaner's: it would be posted twice", g.Late, clocksApart)
		}
		e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding) // it read itself back
		e.acquireSubject(e.subjectRequest(s, st), ledger.SubjectStanding)
	}
	c := e.claim(dA, "w2", ledger.Publish)
	again(sSaved, *c.Staged)
	e.complete(*c.Staged)
	e.acquireSubject(e.subjectRequest(sSaved, olderA), ledger.SubjectSuperseded)

	if _, err := e.l.Revive(e.ctx, dB.Key(), b.Lease.EvaluationID); err != nil {
		e.t.Fatalf("revive: %v", err)
	}
	c = e.claim(dB, "w2", ledger.Publish)
	again(sAbandoned, *c.Staged)
	e.complete(*c.Staged)
	if rec := e.subjectRecord(sAbandoned); rec.Stands.Key != dB.Key() || rec.Blind {
		e.t.Fatalf("after the revived verdict read itself back: stands %s, blind %v", rec.Stands.Key.Short(), rec.Blind)
	}
}

// A poster paused past its grant, past the record's forgetting, reports when it wakes: the
// report is refused (ErrLeaseLost), whoever took over having counted its post as unknown, and
// brings no record back, though the paused handle last saw the record as its grant left it.
func caseSubjectReportAfterItsRecordIsForgottenIsLost(e *env) {
	s := testSubject(15)
	d, v := e.saved(e.clock.Now())
	paused, err := e.h.Open(e.ctx, e.limits, e.opts())
	if err != nil {
		e.t.Fatalf("open the paused poster's handle: %v", err)
	}
	defer paused.Close()
	stale, err := paused.AcquireSubject(e.ctx, e.subjectRequest(s, v))
	if err != nil || stale.Outcome != ledger.SubjectPost {
		e.t.Fatalf("the first poster asks: %v %v", stale.Outcome, err)
	}
	// It pauses: its grant ends, and its post may still land until the route's settle time
	// after; the verdict, published again, reads back then and stands.
	e.clock.Advance(lease + e.tick())
	w := e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectWait)
	e.clock.Set(w.RetryAt)
	c := e.claim(d, "w2", ledger.Publish)
	g := e.acquireSubject(e.subjectRequest(s, *c.Staged), ledger.SubjectPost)
	if !g.ReadBack {
		e.t.Fatal("a verdict whose post may stand is granted a post without a read-back")
	}
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	e.complete(*c.Staged)
	e.forgetSubjects(v.Lease.EventAt, s)

	_, err = paused.ReportSubject(e.ctx, stale, ledger.PostApplied)
	wantErr(e.t, "a report under a grant of a forgotten record", err, ledger.ErrLeaseLost)
	if _, err := e.l.InspectSubject(e.ctx, s.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
		e.t.Fatalf("the forgotten record after a report under its old grant: %v, want none", err)
	}
}
