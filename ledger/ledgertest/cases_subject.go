package ledgertest

import (
	"errors"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of the subject record: what stands on a commit. Every verdict publishing to one
// subject (provider, repository, commit, status context) goes through the subject's record,
// which lets one post at a time, never an older one after a newer one was recorded.

const (
	subjectHold   = 20 * time.Second
	subjectSettle = time.Minute
)

func testSubject(n int) ledger.Subject {
	return ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: fmt.Sprintf("%040d", n),
		Context: "amiss/verdict"}
}

// saved admits a delivery signed at eventAt and takes it to saved, returning its publishing
// lease's staged result.
func (e *env) saved(eventAt time.Time) (ledger.Delivery, ledger.Staged) {
	e.t.Helper()
	d := e.delivery(eventAt)
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	return d, e.save(*c.Lease, "verdict of "+d.Binding.Identity)
}

func (e *env) subjectRequest(s ledger.Subject, st ledger.Staged) ledger.SubjectRequest {
	return ledger.SubjectRequest{Subject: s, Order: st.Lease.Order(), EvaluationID: st.Lease.EvaluationID,
		HoldFor: subjectHold, Settle: subjectSettle}
}

func (e *env) acquireSubject(q ledger.SubjectRequest, want ledger.SubjectOutcome) ledger.SubjectGrant {
	e.t.Helper()
	g, err := e.l.AcquireSubject(e.ctx, q)
	if err != nil {
		e.t.Fatalf("acquire subject for %s: %v", q.Order.Key.Short(), err)
	}
	if g.Outcome != want {
		e.t.Fatalf("acquire subject for %s: %v, want %v", q.Order.Key.Short(), g.Outcome, want)
	}
	return g
}

func (e *env) reportSubject(g ledger.SubjectGrant, o ledger.PostOutcome, want ledger.SubjectOutcome) ledger.SubjectGrant {
	e.t.Helper()
	a, err := e.l.ReportSubject(e.ctx, g, o)
	if err != nil {
		e.t.Fatalf("report %v for %s: %v", o, g.Order.Key.Short(), err)
	}
	if a.Outcome != want {
		e.t.Fatalf("report %v for %s: %v, want %v", o, g.Order.Key.Short(), a.Outcome, want)
	}
	return a
}

func (e *env) subjectRecord(s ledger.Subject) ledger.SubjectRecord {
	e.t.Helper()
	r, err := e.l.InspectSubject(e.ctx, s.Key())
	if err != nil {
		e.t.Fatalf("inspect subject: %v", err)
	}
	return r
}

// The newest verdict stands, whichever order the deliveries reached the ledger in: the older
// one, asking after the newer was recorded, is superseded, and its row ends superseded naming
// the newer one, answers Duplicate, keeps no report, and is counted by Stats.
func caseSubjectOlderVerdictIsSupersededByANewerOne(e *env) {
	now := e.clock.Now()
	s := testSubject(1)
	dNew, newer := e.saved(now) // delivered first, signed later
	dOld, older := e.saved(now.Add(-time.Minute))
	g := e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	e.complete(newer)
	sup := e.acquireSubject(e.subjectRequest(s, older), ledger.SubjectSuperseded)
	if sup.By != dNew.Key() {
		e.t.Fatalf("superseded by %s, want the newer verdict %s", sup.By.Short(), dNew.Key().Short())
	}
	if err := e.l.Supersede(e.ctx, older, sup.By); err != nil {
		e.t.Fatalf("supersede: %v", err)
	}
	if err := e.l.Supersede(e.ctx, older, sup.By); err != nil {
		e.t.Fatalf("a repeated supersede: %v", err)
	}
	r := e.row(dOld)
	if r.State != ledger.StateSuperseded || r.SupersededBy != dNew.Key() {
		e.t.Fatalf("older row: %v superseded by %s", r.State, r.SupersededBy.Short())
	}
	e.claim(dOld, "w2", ledger.ClaimDuplicate)
	e.admit(dOld, ledger.Duplicate)
	wantErr(e.t, "complete of a superseded row", e.l.Complete(e.ctx, older), ledger.ErrLeaseLost)
	_, err := e.l.Report(e.ctx, dOld.Key())
	wantErr(e.t, "report of a superseded row", err, ledger.ErrInvalid)
	_, err = e.l.Revive(e.ctx, dOld.Key(), "")
	wantErr(e.t, "revive of a superseded row", err, ledger.ErrInvalid)
	rec := e.subjectRecord(s)
	if rec.Newest.Key != dNew.Key() || rec.Stands.Key != dNew.Key() || !rec.Holder.IsZero() {
		e.t.Fatalf("subject record: newest %s stands %s holder %s", rec.Newest.Key.Short(), rec.Stands.Key.Short(), rec.Holder.Key.Short())
	}
	st := e.stats()
	if st.ByState[ledger.StateSuperseded] != 1 || st.ByState[ledger.StateDone] != 1 || st.Subjects != 1 {
		e.t.Fatalf("stats: %v by state, %d subjects", st.ByState, st.Subjects)
	}
	e.capacityHolds(true)
}

// One verdict posts at a time: concurrent requests for verdicts of one subject get at most one
// grant, and a newer verdict waits while an older one holds it.
func caseSubjectGrantsOnePosterAtATime(e *env) {
	s := testSubject(2)
	const n = 6
	staged := make([]ledger.Staged, n)
	for i := range staged {
		_, staged[i] = e.saved(e.clock.Now().Add(time.Duration(i) * time.Second))
	}
	grants := make([]ledger.SubjectGrant, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		// A bounded lock wait that runs out (ErrBusy) decides nothing: asked again.
		for range 50 {
			if grants[i], errs[i] = e.l.AcquireSubject(e.ctx, e.subjectRequest(s, staged[i])); !errors.Is(errs[i], ledger.ErrBusy) {
				return
			}
		}
	})
	posting := 0
	for i, g := range grants {
		if errs[i] != nil {
			e.t.Fatalf("acquire %d: %v", i, errs[i])
		}
		switch g.Outcome {
		case ledger.SubjectPost:
			posting++
		case ledger.SubjectWait, ledger.SubjectSuperseded:
		default:
			e.t.Fatalf("acquire %d: %v", i, g.Outcome)
		}
	}
	if posting != 1 {
		e.t.Fatalf("%d verdicts may post at once, want 1", posting)
	}
	// Whoever holds it, the newest is recorded, and only it can post next.
	rec := e.subjectRecord(s)
	if rec.Newest.Key != staged[n-1].Lease.Key {
		e.t.Fatalf("newest recorded is %s, want the last signed", rec.Newest.Key.Short())
	}
	w := e.acquireSubject(e.subjectRequest(s, staged[n-1]), ledger.SubjectWait)
	if w.RetryAt.IsZero() {
		e.t.Fatal("a wait with no time to come back")
	}
	// The grant ends without a report (its poster died): its post may still land, so the
	// newest posts (or, if it held the grant itself, reads back) only once that has settled,
	// and is confirmed standing by a read-back at or after it.
	e.clock.Advance(subjectHold + e.tick())
	newest := e.subjectRequest(s, staged[n-1])
	for step := 0; ; step++ {
		if step > 4 {
			e.t.Fatal("the newest verdict never came to stand")
		}
		g, err := e.l.AcquireSubject(e.ctx, newest)
		if err != nil {
			e.t.Fatalf("acquire: %v", err)
		}
		if g.Outcome == ledger.SubjectStanding {
			break
		}
		if g.Outcome == ledger.SubjectPost {
			g = e.reportSubject(g, ledger.PostApplied, map[bool]ledger.SubjectOutcome{true: ledger.SubjectStanding,
				false: ledger.SubjectConfirm}[!e.clock.Now().Before(e.subjectRecord(s).SettleUntil)])
			if g.Outcome == ledger.SubjectStanding {
				break
			}
		}
		if g.RetryAt.IsZero() {
			e.t.Fatalf("%v with no time to come back", g.Outcome)
		}
		e.clock.Set(g.RetryAt)
	}
	if rec := e.subjectRecord(s); rec.Stands.Key != newest.Order.Key {
		e.t.Fatalf("stands %s, want the newest", rec.Stands.Key.Short())
	}
	for i := range n - 1 {
		e.acquireSubject(e.subjectRequest(s, staged[i]), ledger.SubjectSuperseded)
	}
}

// A report under a grant that was taken over changes nothing (ErrLeaseLost), and whoever took
// over counted the old grant's post as unknown.
func caseSubjectReportUnderATakenOverGrantIsLost(e *env) {
	s := testSubject(3)
	_, older := e.saved(e.clock.Now())
	_, newer := e.saved(e.clock.Now().Add(time.Second))
	stale := e.acquireSubject(e.subjectRequest(s, older), ledger.SubjectPost)
	e.clock.Advance(subjectHold + e.tick())
	e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectPost)
	_, err := e.l.ReportSubject(e.ctx, stale, ledger.PostApplied)
	wantErr(e.t, "report under a taken-over grant", err, ledger.ErrLeaseLost)
	rec := e.subjectRecord(s)
	if rec.Posted.Key != older.Lease.Key || rec.SettleUntil.Before(stale.Decided.Add(subjectHold+subjectSettle)) {
		e.t.Fatalf("taken-over grant: posted %s, settle until %v; want the older verdict and its grant's end plus the settle time",
			rec.Posted.Key.Short(), rec.SettleUntil)
	}
}

// The record is durable: a grant given before a reopen is reported after it.
func caseSubjectRecordSurvivesReopen(e *env) {
	s := testSubject(4)
	_, v := e.saved(e.clock.Now())
	g := e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectPost)
	e.reopen()
	e.reportSubject(g, ledger.PostUnknown, ledger.SubjectRetry)
	e.reopen()
	e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectWait) // its post may still land
	e.clock.Advance(subjectSettle + e.tick())
	g = e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectPost)
	if !g.ReadBack || g.Fence <= 1 {
		e.t.Fatalf("grant after an unknown post: read back %v fence %d", g.ReadBack, g.Fence)
	}
}

// Cleanup forgets a subject record once no verdict can land on it: past the horizon (and a
// backend's margin for its clocks), nothing in flight, the newest verdict's row done. Until
// then the record stays, and an abandoned newest verdict (which an operator can revive) keeps
// it until its row is gone.
func caseSubjectRecordIsForgottenOnlyWhenNothingCanStillLand(e *env) {
	kept, gone := testSubject(5), testSubject(6)
	_, a := e.saved(e.clock.Now())
	dB, b := e.saved(time.Time{}) // permanent: its row is never forgotten
	g := e.acquireSubject(e.subjectRequest(gone, a), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	e.complete(a)
	g = e.acquireSubject(e.subjectRequest(kept, b), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostRefused, ledger.SubjectRetry)
	if err := e.l.Abandon(e.ctx, b, "provider answered 422"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	rep := e.cleanAll()
	if rep.RemovedSubjects != 0 {
		e.t.Fatalf("cleanup before the horizon forgot %d subject records", rep.RemovedSubjects)
	}
	if n := e.forgetSubjects(a.Lease.EventAt, gone); n != 1 {
		e.t.Fatalf("cleanup past the horizon forgot %d subject records, want 1", n)
	}
	e.subjectRecord(kept)
	if e.gone(dB) {
		e.t.Fatal("the abandoned row is gone")
	}
	if st := e.stats(); st.Subjects != 1 {
		e.t.Fatalf("stats count %d subjects, want 1", st.Subjects)
	}
}

// A request the contract cannot decide is refused before anything is written.
func caseSubjectRequestIsChecked(e *env) {
	s := testSubject(7)
	_, v := e.saved(e.clock.Now())
	bad := e.subjectRequest(s, v)
	bad.Subject.Context = ""
	_, err := e.l.AcquireSubject(e.ctx, bad)
	wantErr(e.t, "acquire without a context", err, ledger.ErrInvalid)
	bad = e.subjectRequest(s, v)
	bad.Subject.Repository = string(make([]byte, ledger.MaxSubjectName))
	_, err = e.l.AcquireSubject(e.ctx, bad)
	wantErr(e.t, "acquire of an oversized subject", err, ledger.ErrTooLarge)
	_, err = e.l.InspectSubject(e.ctx, s.Key())
	wantErr(e.t, "inspect after refused requests", err, ledger.ErrUnknownSubject)
	if st := e.stats(); st.Subjects != 0 {
		e.t.Fatalf("refused requests left %d subject records", st.Subjects)
	}
}

// A superseded row is cleaned like a done one once its retention has ended, and gives its
// slot back exactly once.
func caseSupersededRowIsCleanedLikeADoneOne(e *env) {
	s := testSubject(8)
	dOld, older := e.saved(e.clock.Now())
	_, newer := e.saved(e.clock.Now().Add(time.Second))
	g := e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectPost)
	e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding)
	e.complete(newer)
	sup := e.acquireSubject(e.subjectRequest(s, older), ledger.SubjectSuperseded)
	if err := e.l.Supersede(e.ctx, older, sup.By); err != nil {
		e.t.Fatalf("supersede: %v", err)
	}
	e.clock.Advance(e.limits.SignedAgeCeiling + e.limits.QueueCeiling + 2*time.Second)
	rep := e.cleanAll()
	if !removedKeys(rep)[dOld.Key()] || !e.gone(dOld) {
		e.t.Fatal("a superseded row past its retention was not forgotten")
	}
	e.capacityHolds(true)
}

// A damaged subject record fails closed: the request is refused with an error naming it.
func caseDamagedSubjectRecordFailsClosed(e *env) {
	s := testSubject(9)
	_, v := e.saved(e.clock.Now())
	g := e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectPost)
	if err := e.h.DamageSubject(e.ctx, s.Key()); err != nil {
		e.t.Fatalf("damage: %v", err)
	}
	_, err := e.l.AcquireSubject(e.ctx, e.subjectRequest(s, v))
	wantErr(e.t, "acquire on a damaged record", err, ledger.ErrCorrupt)
	_, err = e.l.ReportSubject(e.ctx, g, ledger.PostApplied)
	wantErr(e.t, "report on a damaged record", err, ledger.ErrCorrupt)
	_, err = e.l.InspectSubject(e.ctx, s.Key())
	wantErr(e.t, "inspect a damaged record", err, ledger.ErrCorrupt)
}

// A verdict told to wait parks with a wake, and the report ending the grant it waited on
// hands that wake back, once: the waiter is durable (it survives a reopen), and a park that
// comes after the report is answered to come back at once.
func caseSubjectReportHandsTheParkedVerdictsWakeBack(e *env) {
	s := testSubject(11)
	_, older := e.saved(e.clock.Now())
	_, newer := e.saved(e.clock.Now().Add(time.Second))
	g := e.acquireSubject(e.subjectRequest(s, older), ledger.SubjectPost)
	e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectWait)
	parked := e.subjectRequest(s, newer)
	parked.Wake = "sqs:AQEB+waiter/handle=="
	if p := e.acquireSubject(parked, ledger.SubjectWait); p.RetryAt.Before(g.Decided.Add(subjectHold)) {
		e.t.Fatalf("a park while the grant lasts comes back at %v, before the grant's end", p.RetryAt)
	}
	e.reopen()
	if rec := e.subjectRecord(s); rec.Waiter.Key != newer.Lease.Key || rec.WaiterWake != parked.Wake {
		e.t.Fatalf("waiter after a reopen: %s %q", rec.Waiter.Key.Short(), rec.WaiterWake)
	}
	a := e.reportSubject(g, ledger.PostRefused, ledger.SubjectRetry)
	if a.Wake != parked.Wake {
		e.t.Fatalf("the report wakes %q, want the parked verdict's %q", a.Wake, parked.Wake)
	}
	if rec := e.subjectRecord(s); !rec.Waiter.IsZero() || rec.WaiterWake != "" {
		e.t.Fatalf("the waiter stays named after its wake was handed back: %s", rec.Waiter.Key.Short())
	}
	if p := e.acquireSubject(parked, ledger.SubjectWait); p.RetryAt.After(p.Decided) {
		e.t.Fatalf("a park after the report comes back at %v, want at once (%v)", p.RetryAt, p.Decided)
	}
	e.acquireSubject(e.subjectRequest(s, newer), ledger.SubjectPost)
}
