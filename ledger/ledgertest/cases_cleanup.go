package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

func init() {
	register("PermanentRowsAreNeverCleaned", func(e *env) {
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
	})

	register("UnfinishedRowsSurviveCleanupWhateverTheirAge", func(e *env) {
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
	})

	register("StrandedRowsOfEveryKindAreReported", func(e *env) {
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
	})

	register("OnlyOneCleanupRunsAtATime", func(e *env) {
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
	})

	register("DamagedRowIsSkippedAndReported", func(e *env) {
		t0 := e.clock.Now()
		var rows []ledger.Delivery
		for range 5 {
			rows = append(rows, e.finish(t0))
		}
		bad := rows[2]
		if err := e.h.DamageRow(e.ctx, bad.Key()); err != nil {
			e.t.Fatalf("damage row: %v", err)
		}
		_, err := e.l.Inspect(e.ctx, bad.Key())
		wantErr(e.t, "inspect of a damaged row", err, ledger.ErrCorrupt)
		if !strings.Contains(err.Error(), bad.Key().String()) {
			e.t.Fatalf("error does not name the row: %v", err)
		}
		_, err = e.l.Claim(e.ctx, bad.Key(), bad.Binding.Digest(), "w", lease)
		wantErr(e.t, "claim of a damaged row", err, ledger.ErrCorrupt)
		_, err = e.l.Admit(e.ctx, bad)
		wantErr(e.t, "admit onto a damaged row", err, ledger.ErrCorrupt)
		e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
		rep := e.cleanAll()
		if len(rep.Damaged) == 0 || !strings.Contains(rep.Damaged[0].Name, bad.Key().String()) ||
			!errors.Is(rep.Damaged[0].Err, ledger.ErrCorrupt) {
			e.t.Fatalf("damaged row not reported: %+v", rep.Damaged)
		}
		removed := removedKeys(rep)
		for i, d := range rows {
			if i == 2 {
				if removed[d.Key()] {
					e.t.Fatalf("damaged row removed")
				}
				continue
			}
			if !removed[d.Key()] || !e.gone(d) {
				e.t.Fatalf("row %d not removed next to a damaged one", i)
			}
		}
		st := e.stats()
		if st.Damaged != 1 {
			e.t.Fatalf("stats damaged %d, want 1", st.Damaged)
		}
	})

	register("FailedListingRemovesNothing", func(e *env) {
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
	})

	register("RepeatedCleanupReleasesCapacityOnce", func(e *env) {
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
	})

	register("RowIndexedTwiceReleasesItsSlotOnce", func(e *env) {
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
	})

	registerCap("Invariant11_FullRefusesNewKeysWhileWorkCompletes", 6, func(e *env) {
		var inside []ledger.Delivery
		var leases []ledger.Lease
		for range 6 {
			d := e.delivery(time.Time{})
			e.admit(d, ledger.Admitted)
			inside = append(inside, d)
			leases = append(leases, *e.claim(d, "w", ledger.Execute).Lease)
		}
		a := e.admit(e.delivery(time.Time{}), ledger.Full)
		if !errors.Is(a.Err(), ledger.ErrFull) {
			e.t.Fatalf("full admission error %v", a.Err())
		}
		// Work inside the cap goes on: re-admission, claim, save, complete.
		e.admit(inside[0], ledger.Pending)
		for i, d := range inside {
			s := e.save(leases[i], "r")
			e.complete(s)
			e.admit(d, ledger.Duplicate)
		}
		e.admit(e.delivery(time.Time{}), ledger.Full)
		if st := e.stats(); st.CapacityUsed != 6 || st.Rows != 6 {
			e.t.Fatalf("stats %+v", st)
		}
	})

	registerCap("Invariant11_FullOnlyWhenTheWholeCapIsUsed", 40, func(e *env) {
		t0 := e.clock.Now()
		var first []ledger.Delivery
		for range 40 {
			first = append(first, e.finish(t0))
		}
		e.admit(e.delivery(time.Time{}), ledger.Full)
		e.clock.Advance(2 * (e.limits.SignedAgeCeiling + e.limits.QueueCeiling))
		e.cleanAll()
		// Every slot is free again: exactly the cap is admitted, however keys spread.
		for i := range 40 {
			d := e.delivery(time.Time{})
			if a, err := e.l.Admit(e.ctx, d); err != nil || a.Outcome != ledger.Admitted {
				e.t.Fatalf("admission %d of 40 after cleanup: %+v %v", i, a, err)
			}
		}
		e.admit(e.delivery(time.Time{}), ledger.Full)
		e.capacityHolds(true)
		_ = first
	})

	register("Invariant13_OversizedStateOrReportIsRefusedWhole", func(e *env) {
		d := e.delivery(time.Time{})
		d.Subject = make([]byte, e.limits.MaxSubjectBytes+1)
		_, err := e.l.Admit(e.ctx, d)
		wantErr(e.t, "admit of an oversized subject", err, ledger.ErrTooLarge)
		if !e.gone(d) {
			e.t.Fatalf("oversized admission stored a row")
		}
		if st := e.stats(); st.CapacityUsed != 0 {
			e.t.Fatalf("oversized admission took capacity: %d", st.CapacityUsed)
		}
		d.Subject = make([]byte, e.limits.MaxSubjectBytes)
		e.admit(d, ledger.Admitted)
		c := e.claim(d, "w", ledger.Execute)
		_, err = e.l.Save(e.ctx, *c.Lease, make([]byte, e.limits.MaxReportBytes+1))
		wantErr(e.t, "save of an oversized report", err, ledger.ErrTooLarge)
		if r := e.row(d); r.State != ledger.StateRunning || !r.Report.IsZero() {
			e.t.Fatalf("oversized save changed the row: %v", r.State)
		}
		s := e.save(*c.Lease, strings.Repeat("x", e.limits.MaxReportBytes))
		e.complete(s)
	})

	register("Invariant14_UnreadableRowFailsClosed", func(e *env) {
		d := e.delivery(time.Time{})
		e.admit(d, ledger.Admitted)
		if err := e.h.DamageRow(e.ctx, d.Key()); err != nil {
			e.t.Fatalf("damage: %v", err)
		}
		e.reopen()
		_, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), "w", lease)
		wantErr(e.t, "claim", err, ledger.ErrCorrupt)
		_, err = e.l.Admit(e.ctx, d)
		wantErr(e.t, "re-admit", err, ledger.ErrCorrupt)
		if errors.Is(err, ledger.ErrUnknownDelivery) {
			e.t.Fatalf("damaged row treated as absent")
		}
	})

	registerCap("Invariant10_AdmissionIssuesNoListingAndBoundedOperations", 1000, func(e *env) {
		measure := func() OpCount {
			d := e.delivery(time.Time{})
			e.h.ResetOps()
			e.admit(d, ledger.Admitted)
			return e.h.Ops()
		}
		small := measure()
		for range 300 {
			e.admit(e.delivery(e.clock.Now()), ledger.Admitted)
		}
		large := measure()
		if small.Listings != 0 || large.Listings != 0 {
			e.t.Fatalf("admission listed the store: %d and %d listings", small.Listings, large.Listings)
		}
		if large.Ops > small.Ops || large.Ops > 24 {
			e.t.Fatalf("admission took %d operations with 300 rows, %d with 1 (bound 24)", large.Ops, small.Ops)
		}
		e.t.Logf("admission: %d operations with 1 row retained, %d with 301", small.Ops, large.Ops)
		last := e.delivery(time.Time{})
		e.admit(last, ledger.Admitted)
		e.h.ResetOps()
		e.admit(last, ledger.Pending)
		if f := e.h.Ops(); f.Listings != 0 || f.Ops > small.Ops {
			e.t.Fatalf("re-admission: %+v, more than a new admission's %d", f, small.Ops)
		}
	})

	register("InterruptedAdmissionIsSettled", func(e *env) {
		e.finish(time.Time{})
		crashes := 0
		for step := 0; step < 50; step++ {
			d := e.delivery(time.Time{})
			e.h.CrashAfter(step)
			_, err := e.l.Admit(e.ctx, d)
			e.h.CrashAfter(-1)
			e.reopen()
			e.capacityHolds(false)
			present := !e.gone(d)
			if err == nil {
				if !present {
					e.t.Fatalf("step %d: admission reported success but stored nothing", step)
				}
				e.capacityHolds(true)
				break
			}
			crashes++
			// The interrupted admission left nothing or the whole row; both finish.
			want := ledger.Admitted
			if present {
				want = ledger.Pending
			}
			e.admit(d, want)
			c := e.claim(d, "w", ledger.Execute)
			e.complete(e.save(*c.Lease, "r"))
			e.capacityHolds(true)
		}
		if crashes == 0 {
			e.t.Fatalf("no crash exercised")
		}
		e.t.Logf("admission interrupted at %d steps", crashes)
	})

	registerCap("CrashAtEveryStepLeavesEveryOperationLegible", 10000, func(e *env) {
		ops := []struct {
			name string
			prep func() (ledger.Delivery, func() error)
		}{
			{"claim", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				return d, func() error {
					_, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), "w", lease)
					return err
				}
			}},
			{"save", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				c := e.claim(d, "w", ledger.Execute)
				return d, func() error { _, err := e.l.Save(e.ctx, *c.Lease, []byte("r")); return err }
			}},
			{"complete", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				s := e.save(*e.claim(d, "w", ledger.Execute).Lease, "r")
				return d, func() error { return e.l.Complete(e.ctx, s) }
			}},
			{"abandon", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				s := e.save(*e.claim(d, "w", ledger.Execute).Lease, "r")
				return d, func() error { return e.l.Abandon(e.ctx, s, "refused") }
			}},
			{"renew", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				c := e.claim(d, "w", ledger.Execute)
				return d, func() error { _, err := e.l.Renew(e.ctx, *c.Lease, lease); return err }
			}},
			{"release", func() (ledger.Delivery, func() error) {
				d := e.delivery(time.Time{})
				e.admit(d, ledger.Admitted)
				c := e.claim(d, "w", ledger.Execute)
				return d, func() error { return e.l.Release(e.ctx, *c.Lease, time.Time{}) }
			}},
		}
		points := 0
		for _, op := range ops {
			for step := 0; step < 40; step++ {
				d, run := op.prep()
				before := e.row(d)
				e.h.CrashAfter(step)
				err := run()
				e.h.CrashAfter(-1)
				e.reopen()
				after := e.row(d) // legible after the crash
				if err == nil {
					break
				}
				points++
				if after.Fence < before.Fence {
					e.t.Fatalf("%s step %d: fence went back from %d to %d", op.name, step, before.Fence, after.Fence)
				}
				e.finishRow(d, fmt.Sprintf("%s step %d", op.name, step))
			}
		}
		e.capacityHolds(true)
		e.t.Logf("%d crash points across %d operations", points, len(ops))
	})
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
