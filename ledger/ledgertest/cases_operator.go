package ledgertest

import (
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// report checks the report the row of d froze.
func (e *env) report(d ledger.Delivery, want string) {
	e.t.Helper()
	got, err := e.l.Report(e.ctx, d.Key())
	if err != nil {
		e.t.Fatalf("report: %v", err)
	}
	e.sameBytes("report", got, []byte(want))
}

// Cases of the operator's transitions and views: reviving an abandoned verdict, listing rows.

// Cases of the operator's transitions and views: reviving an abandoned verdict, listing rows.

func caseRevivedVerdictIsPublishedWithTheSameBytes(e *env) {
	d := e.delivery(e.clock.Now())
	a := e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	s := e.save(*c.Lease, "verdict:failure rule=title")
	saved := e.row(d)
	if saved.PublishSince.IsZero() {
		e.t.Fatalf("a saved row records no publish start")
	}
	if s.Lease.PublishSince.IsZero() || !s.Lease.PublishSince.Equal(saved.PublishSince) {
		e.t.Fatalf("publishing lease carries publish start %v, row %v", s.Lease.PublishSince, saved.PublishSince)
	}
	e.report(d, "verdict:failure rule=title")
	if err := e.l.Abandon(e.ctx, s, "provider answered 422"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	e.report(d, "verdict:failure rule=title")
	wantErr(e.t, "revive of another evaluation", func() error {
		_, err := e.l.Revive(e.ctx, d.Key(), "not-"+s.Lease.EvaluationID)
		return err
	}(), ledger.ErrInvalid)
	if r := e.row(d); r.State != ledger.StateAbandoned {
		e.t.Fatalf("a refused revive changed the row to %v", r.State)
	}
	e.clock.Advance(time.Minute)
	r, err := e.l.Revive(e.ctx, d.Key(), s.Lease.EvaluationID)
	if err != nil {
		e.t.Fatalf("revive: %v", err)
	}
	if r.State != ledger.StateSaved || r.Reason != "" || r.PublishAttempts != 0 || !r.PublishSince.After(saved.PublishSince) {
		e.t.Fatalf("revived row: state %v reason %q publish attempts %d since %v (saved at %v)",
			r.State, r.Reason, r.PublishAttempts, r.PublishSince, saved.PublishSince)
	}
	if r.EvaluationID != saved.EvaluationID || r.Report != saved.Report || r.Attempts != saved.Attempts {
		e.t.Fatalf("revive changed the frozen result: %+v, was %+v", r.Report, saved.Report)
	}
	// A second revive of the now saved row changes nothing.
	again, err := e.l.Revive(e.ctx, d.Key(), "")
	if err != nil || !again.Equal(&r) {
		e.t.Fatalf("repeated revive: %v, row changed: %v", err, !again.Equal(&r))
	}
	e.admit(d, ledger.Pending)
	// It is published again, with exactly the bytes frozen before, never executed again.
	p := e.claim(d, "w2", ledger.Publish)
	e.sameBytes("revived report", p.Staged.Report, []byte("verdict:failure rule=title"))
	if p.Staged.Lease.Fence <= s.Lease.Fence {
		e.t.Fatalf("publish fence %d after revive, saved under %d", p.Staged.Lease.Fence, s.Lease.Fence)
	}
	e.claim(d, "w3", ledger.Busy)
	e.complete(*p.Staged)
	_, err = e.l.Report(e.ctx, d.Key())
	wantErr(e.t, "report of a done row", err, ledger.ErrInvalid)
	e.claim(d, "w3", ledger.ClaimDuplicate)
	wantErr(e.t, "revive of a done row", func() error { _, err := e.l.Revive(e.ctx, d.Key(), ""); return err }(), ledger.ErrInvalid)
	// The revived row is cleaned like any done row, once, after its retention.
	e.clock.Set(a.RetainUntil.Add(e.tick()))
	rep := e.cleanAll()
	if !removedKeys(rep)[d.Key()] || !e.gone(d) || len(rep.Removed) != 1 {
		e.t.Fatalf("revived then done row not removed once after retention: %+v", rep.Removed)
	}
	e.capacityHolds(true)
}

func caseOnlyAnAbandonedRowCanBeRevived(e *env) {
	wantErr(e.t, "revive of an unknown key", func() error {
		_, err := e.l.Revive(e.ctx, e.delivery(time.Time{}).Key(), "")
		return err
	}(), ledger.ErrUnknownDelivery)
	_, err := e.l.Report(e.ctx, e.delivery(time.Time{}).Key())
	wantErr(e.t, "report of an unknown key", err, ledger.ErrUnknownDelivery)
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	_, err = e.l.Report(e.ctx, d.Key())
	wantErr(e.t, "report of a pending row", err, ledger.ErrInvalid)
	revive := func() error {
		_, err := e.l.Revive(e.ctx, d.Key(), "")
		return err
	}
	wantErr(e.t, "revive of a pending row", revive(), ledger.ErrInvalid)
	c := e.claim(d, "w", ledger.Execute)
	wantErr(e.t, "revive of a running row", revive(), ledger.ErrInvalid)
	s := e.save(*c.Lease, "r")
	if err := revive(); err != nil {
		e.t.Fatalf("revive of a saved row: %v", err)
	}
	// Reviving a saved row leaves its live publishing lease alone.
	if err := e.l.Complete(e.ctx, s); err != nil {
		e.t.Fatalf("complete after a revive of the saved row: %v", err)
	}
	wantErr(e.t, "revive of a done row", revive(), ledger.ErrInvalid)
	// An abandoned row that stays abandoned is kept until its retention ends, and its
	// report with it: a revive long after still publishes the frozen bytes.
	d2 := e.delivery(time.Time{})
	e.admit(d2, ledger.Admitted)
	s2 := e.save(*e.claim(d2, "w", ledger.Execute).Lease, "kept")
	if err := e.l.Abandon(e.ctx, s2, "publish budget spent"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	e.reopen()
	e.clock.Advance(48 * time.Hour)
	e.cleanAll()
	if _, err := e.l.Revive(e.ctx, d2.Key(), ""); err != nil {
		e.t.Fatalf("revive of a permanent abandoned row after cleanup and reopen: %v", err)
	}
	e.sameBytes("report after revive", e.claim(d2, "w", ledger.Publish).Staged.Report, []byte("kept"))
}

func caseRowsListsEveryRowOnceAndNamesTheDamaged(e *env) {
	want := map[ledger.Key]bool{}
	var ds []ledger.Delivery
	for range 7 {
		d := e.delivery(time.Time{})
		e.admit(d, ledger.Admitted)
		want[d.Key()] = true
		ds = append(ds, d)
	}
	if err := e.h.DamageRow(e.ctx, ds[3].Key()); err != nil {
		e.t.Fatalf("damage: %v", err)
	}
	seen := map[ledger.Key]int{}
	damaged := 0
	cur := ledger.Cursor("")
	for pages := 0; ; pages++ {
		if pages > 20 {
			e.t.Fatalf("rows never finished")
		}
		p, err := e.l.Rows(e.ctx, cur, 2)
		if err != nil {
			e.t.Fatalf("rows: %v", err)
		}
		if len(p.Rows)+len(p.Damaged) > 2 {
			e.t.Fatalf("page of %d rows and %d damaged, limit 2", len(p.Rows), len(p.Damaged))
		}
		for _, r := range p.Rows {
			seen[r.Key]++
		}
		damaged += len(p.Damaged)
		if p.Next == "" {
			break
		}
		cur = p.Next
	}
	if damaged != 1 {
		e.t.Fatalf("%d damaged rows listed, want 1", damaged)
	}
	for k := range want {
		if k == ds[3].Key() {
			if seen[k] != 0 {
				e.t.Fatalf("damaged row listed as readable")
			}
			continue
		}
		if seen[k] != 1 {
			e.t.Fatalf("row %s listed %d times", k.Short(), seen[k])
		}
	}
	if len(seen) != len(want)-1 {
		e.t.Fatalf("listed %d rows, want %d", len(seen), len(want)-1)
	}
	_, err := e.l.Rows(e.ctx, "", 0)
	wantErr(e.t, "rows with limit 0", err, ledger.ErrInvalid)
}

// caseAnEmptyReportIsKeptLikeAnyOther: an empty report is a report (Save takes any bytes
// under the ceiling): it is answered by Report, published again by a later publish claim, kept
// by Abandon and published again after a Revive, never taken for a report that was not kept.
func caseAnEmptyReportIsKeptLikeAnyOther(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	s := e.save(*e.claim(d, "w", ledger.Execute).Lease, "")
	e.report(d, "")
	// The first publication gives up its lease: the next publish claim carries the same bytes.
	if err := e.l.Release(e.ctx, s.Lease, time.Time{}); err != nil {
		e.t.Fatalf("release of the publishing lease: %v", err)
	}
	p := e.claim(d, "w2", ledger.Publish)
	e.sameBytes("published report", p.Staged.Report, nil)
	if err := e.l.Abandon(e.ctx, *p.Staged, "provider answered 422"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	e.report(d, "")
	e.reopen()
	e.report(d, "")
	r, err := e.l.Revive(e.ctx, d.Key(), s.Lease.EvaluationID)
	if err != nil {
		e.t.Fatalf("revive of an abandoned row that froze an empty report: %v", err)
	}
	if r.State != ledger.StateSaved {
		e.t.Fatalf("revived row is %v, want saved", r.State)
	}
	again := e.claim(d, "w3", ledger.Publish)
	e.sameBytes("report published after the revive", again.Staged.Report, nil)
	e.complete(*again.Staged)
	_, err = e.l.Report(e.ctx, d.Key())
	wantErr(e.t, "report of a done row", err, ledger.ErrInvalid)
}
