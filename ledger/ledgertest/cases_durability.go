package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of durability: damage that fails closed, interrupted operations that stay legible.

func caseDamagedRowIsSkippedAndReported(e *env) {
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
}

func caseInvariant14UnreadableRowFailsClosed(e *env) {
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
}

func caseInterruptedAdmissionIsRecounted(e *env) {
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
}

func caseCrashAtEveryStepLeavesEveryOperationLegible(e *env) {
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
}
