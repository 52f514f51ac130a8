package ledgertest

import (
	"errors"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of cleanup: what it forgets, what it keeps, and capacity released once.

func casePermanentRowsAreNeverCleaned(e *env) {
	perm := e.finish(time.Time{})
	d2 := e.delivery(time.Time{})
	e.admit(d2, ledger.Admitted)
	c := e.claim(d2, "w", ledger.Execute)
	s := e.save(*c.Lease, "r")
	if err := e.l.Abandon(e.ctx, s, "gone"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	e.clock.Advance(10 * 365 * 24 * time.Hour)
	rep := e.cleanAll()
	if len(rep.Removed) != 0 || e.gone(perm) || e.gone(d2) {
		e.t.Fatalf("permanent rows removed: %+v", rep.Removed)
	}
	if rep.Retained < 2 {
		e.t.Fatalf("retained %d, want at least 2", rep.Retained)
	}
}

func caseUnfinishedRowsSurviveCleanupWhateverTheirAge(e *env) {
	t0 := e.clock.Now()
	pending := e.delivery(t0)
	e.admit(pending, ledger.Admitted)
	running := e.delivery(t0)
	e.admit(running, ledger.Admitted)
	e.claim(running, "w", ledger.Execute)
	saved := e.delivery(t0)
	e.admit(saved, ledger.Admitted)
	c := e.claim(saved, "w", ledger.Execute)
	e.save(*c.Lease, "r")
	e.clock.Advance(10 * 365 * 24 * time.Hour)
	rep := e.cleanAll()
	if len(rep.Removed) != 0 {
		e.t.Fatalf("unfinished rows removed: %+v", rep.Removed)
	}
	for _, d := range []ledger.Delivery{pending, running, saved} {
		if e.gone(d) {
			e.t.Fatalf("%s removed", d.Binding.Identity)
		}
	}
	// The saved result is still the one handed back.
	p := e.claim(saved, "p", ledger.Publish)
	e.sameBytes("report", p.Staged.Report, []byte("r"))
}

func caseStrandedRowsOfEveryKindAreReported(e *env) {
	pending := e.delivery(time.Time{})
	e.admit(pending, ledger.Admitted)
	running := e.delivery(time.Time{})
	e.admit(running, ledger.Admitted)
	e.claim(running, "w", ledger.Execute)
	saved := e.delivery(time.Time{})
	e.admit(saved, ledger.Admitted)
	c := e.claim(saved, "w", ledger.Execute)
	e.save(*c.Lease, "r")
	done := e.finish(time.Time{})
	// Not yet idle long enough: nothing stranded.
	if rep := e.cleanAll(); len(rep.Stranded) != 0 {
		e.t.Fatalf("fresh rows reported stranded: %+v", rep.Stranded)
	}
	// A row with a live lease is not stranded, however old.
	live := e.delivery(time.Time{})
	e.admit(live, ledger.Admitted)
	e.clock.Advance(strandedAfter)
	lc := e.claim(live, "w", ledger.Execute)
	if _, err := e.l.Renew(e.ctx, *lc.Lease, 2*strandedAfter); err != nil {
		e.t.Fatalf("renew: %v", err)
	}
	e.clock.Advance(strandedAfter)
	rep := e.cleanAll()
	got := map[ledger.Key]ledger.StrandedRow{}
	for _, s := range rep.Stranded {
		got[s.Key] = s
	}
	for _, d := range []ledger.Delivery{pending, running, saved} {
		s, ok := got[d.Key()]
		if !ok {
			e.t.Fatalf("%s not reported stranded (got %d)", d.Binding.Identity, len(rep.Stranded))
		}
		if s.BindingDigest != d.Binding.Digest() {
			e.t.Fatalf("stranded %s has the wrong binding digest", d.Binding.Identity)
		}
	}
	if _, ok := got[done.Key()]; ok {
		e.t.Fatalf("done row reported stranded")
	}
	if _, ok := got[live.Key()]; ok {
		e.t.Fatalf("row with a live lease reported stranded")
	}
	if len(got) != 3 {
		e.t.Fatalf("%d stranded, want 3", len(got))
	}
}

// A lap of cleanup reports the admission time of the oldest unfinished row, whatever its
// state or lease (the delivery that has waited longest for its verdict), and none once every
// row is finished: the figure the deployment alarms on when work waits in the ledger.
func caseCleanupReportsTheOldestUnfinishedRow(e *env) {
	finishedFirst := e.finish(time.Time{}) // oldest of all, but finished: never the figure
	e.clock.Advance(time.Hour)
	stuck := e.delivery(time.Time{}) // admitted and never run
	e.admit(stuck, ledger.Admitted)
	e.clock.Advance(time.Hour)
	running := e.delivery(time.Time{})
	e.admit(running, ledger.Admitted)
	e.claim(running, "w", ledger.Execute)
	e.clock.Advance(time.Hour)
	saved := e.delivery(time.Time{})
	e.admit(saved, ledger.Admitted)
	s := e.save(*e.claim(saved, "w", ledger.Execute).Lease, "r")
	if !e.row(finishedFirst).CreatedAt.Before(e.row(stuck).CreatedAt) {
		e.t.Fatalf("setup: the finished row is not the oldest")
	}
	want := func(d *ledger.Delivery, what string) {
		e.t.Helper()
		rep := e.cleanAll()
		switch {
		case d == nil && !rep.OldestUnfinished.IsZero():
			e.t.Fatalf("%s: oldest unfinished row admitted at %v, want none", what, rep.OldestUnfinished)
		case d != nil && !rep.OldestUnfinished.Equal(e.row(*d).CreatedAt):
			e.t.Fatalf("%s: oldest unfinished row admitted at %v, want %s's admission %v", what, rep.OldestUnfinished,
				d.Binding.Identity, e.row(*d).CreatedAt)
		}
	}
	want(&stuck, "a pending row never run")
	e.complete(e.save(*e.claim(stuck, "w", ledger.Execute).Lease, "r"))
	want(&running, "a running row whose lease ended")
	e.complete(e.save(*e.claim(running, "w2", ledger.Execute).Lease, "r"))
	want(&saved, "a saved row")
	if err := e.l.Abandon(e.ctx, s, "refused for good"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	want(nil, "every row finished or abandoned")
}

func caseOnlyOneCleanupRunsAtATime(e *env) {
	release, err := e.h.HoldMaintenance(e.ctx)
	if err != nil {
		e.t.Fatalf("hold maintenance: %v", err)
	}
	d := e.finish(e.clock.Now())
	e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
	_, err = e.l.Cleanup(e.ctx, "")
	if !errors.Is(err, ledger.ErrBusy) {
		release()
		e.t.Fatalf("cleanup while another holds maintenance: %v, want ErrBusy", err)
	}
	if e.gone(d) {
		release()
		e.t.Fatalf("refused cleanup removed a row")
	}
	release()
	// Many concurrent passes: each row removed once, capacity released once.
	var rows []ledger.Delivery
	t0 := e.clock.Now()
	for range 20 {
		rows = append(rows, e.finish(t0))
	}
	e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
	var mu sync.Mutex
	removed := map[ledger.Key]int{}
	parallel(8, func(int) {
		for range 20 {
			r, err := e.l.Cleanup(e.ctx, "")
			if errors.Is(err, ledger.ErrBusy) {
				continue
			}
			if err != nil {
				e.t.Errorf("cleanup: %v", err)
				return
			}
			mu.Lock()
			for _, x := range r.Removed {
				removed[x.Key]++
			}
			mu.Unlock()
		}
	})
	e.cleanAll()
	for _, x := range append(rows, d) {
		if !e.gone(x) {
			e.t.Fatalf("%s not removed", x.Binding.Identity)
		}
		if removed[x.Key()] > 1 {
			e.t.Fatalf("%s reported removed %d times", x.Binding.Identity, removed[x.Key()])
		}
	}
	e.capacityHolds(true)
}

func caseFailedListingRemovesNothing(e *env) {
	t0 := e.clock.Now()
	var rows []ledger.Delivery
	for range 12 {
		rows = append(rows, e.finish(t0))
	}
	e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
	failed := 0
	for n := 0; n < 64; n++ {
		before := e.stats().Rows
		e.h.FailListings(n)
		_, err := e.l.Cleanup(e.ctx, "")
		e.h.FailListings(-1)
		if err == nil {
			break
		}
		failed++
		if !errors.Is(err, ledger.ErrUnavailable) {
			e.t.Fatalf("cleanup with listing failing after %d: %v, want ErrUnavailable", n, err)
		}
		if after := e.stats().Rows; after != before {
			e.t.Fatalf("failed cleanup removed %d rows", before-after)
		}
	}
	if failed == 0 {
		e.t.Fatalf("no listing failure was exercised")
	}
	e.cleanAll()
	for _, d := range rows {
		if !e.gone(d) {
			e.t.Fatalf("row kept once listing works")
		}
	}
	e.capacityHolds(true)
}

func caseRepeatedCleanupReleasesCapacityOnce(e *env) {
	e.batch = 4
	e.reopen()
	t0 := e.clock.Now()
	for range 10 {
		e.finish(t0)
	}
	keep := e.finish(time.Time{})
	e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
	// Crash every pass at every step, reopen and run again until the lap completes.
	crashes := 0
	for step := 0; step < 200; step++ {
		e.h.CrashAfter(step)
		_, err := e.l.Cleanup(e.ctx, "")
		e.h.CrashAfter(-1)
		e.reopen()
		e.capacityHolds(false)
		if err == nil {
			break
		}
		crashes++
	}
	if crashes == 0 {
		e.t.Fatalf("no crash was exercised")
	}
	e.cleanAll()
	st := e.stats()
	if st.Rows != 1 || e.gone(keep) {
		e.t.Fatalf("%d rows left, want the permanent one", st.Rows)
	}
	e.capacityHolds(true)
}

func caseRowIndexedTwiceReleasesItsSlotOnce(e *env) {
	// A Complete that fails after it indexed the row's retention end, a re-signed retry
	// that lengthens the retention, and the Complete again: the row may be indexed under
	// two ends. Cleanup past both must remove it once and release its slot once. A
	// permanent row beside it makes an understated count visible.
	keep := e.finish(time.Time{})
	interrupted := 0
	for step := 0; step < 12; step++ {
		t0 := e.clock.Now()
		d := e.delivery(t0)
		e.admit(d, ledger.Admitted)
		s := e.save(*e.claim(d, "w", ledger.Execute).Lease, "verdict")
		e.h.CrashAfter(step)
		err := e.l.Complete(e.ctx, s)
		e.h.CrashAfter(-1)
		e.reopen()
		if err == nil {
			e.complete(s)
			continue
		}
		if r := e.row(d); r.State != ledger.StateSaved {
			continue // the failure came after the done state: nothing to retry
		}
		interrupted++
		e.clock.Advance(time.Minute)
		resigned := d
		resigned.SignedAt = e.clock.Now()
		e.admit(resigned, ledger.Pending)
		e.complete(s)
		e.clock.Set(e.row(d).RetainUntil.Add(e.tick()))
		rep := e.cleanAll()
		if n := len(rep.Removed); n != 1 || rep.Removed[0].Key != d.Key() {
			e.t.Fatalf("step %d: cleanup removed %d rows (%v), want the row once", step, n, rep.Removed)
		}
		if st := e.stats(); st.Rows != 1 || e.gone(keep) {
			e.t.Fatalf("step %d: %d rows left, want the permanent one", step, st.Rows)
		}
		e.capacityHolds(true)
	}
	if interrupted == 0 {
		e.t.Fatalf("no Complete was interrupted before its done state")
	}
}

// finishRow takes an existing row, whatever its state, to a terminal state.
func (e *env) finishRow(d ledger.Delivery, what string) {
	e.t.Helper()
	for i := 0; i < 10; i++ {
		c, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), "finisher", lease)
		if err != nil {
			e.t.Fatalf("%s: claim: %v", what, err)
		}
		switch c.Outcome {
		case ledger.ClaimDuplicate:
			return
		case ledger.Busy:
			e.clock.Set(c.RetryAt)
		case ledger.Execute:
			e.complete(e.save(*c.Lease, "r"))
		case ledger.Publish:
			e.complete(*c.Staged)
		default:
			e.t.Fatalf("%s: claim answered %v", what, c.Outcome)
		}
	}
	e.t.Fatalf("%s: row never finished", what)
}
