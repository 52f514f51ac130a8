package localfs_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Power cuts during cleanup: a batch of rows held in several shards' slots, and a batch left by a
// cleanup process that died, finished by an admission.

// TestPowerCutCleanupBatchAcrossShards cuts the power at every step (see cutSteps) of one cleanup
// pass whose batch removes many rows held in several shards' slots (most borrowed: the root
// has one slot per shard and the keys crowd three row folders), beside rows it must keep. After
// each reboot: every kept row is exactly as it was, every removable row is either as it was or
// gone, capacity never understates, an answered pass removed every removable row and kept its
// high-water, a removed row's signature is stale even with the clock stepped back to before its
// retention ended (only the persisted high-water says so), and prepare plus a cleanup lap leave
// capacity equal to the rows.
func TestPowerCutCleanupBatchAcrossShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := smallCapLimits()
	start := epoch
	clock := ledger.NewManualClock(start)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	shards := []byte{0x20, 0x21, 0x22}
	var removable, kept []ledger.Delivery
	for i := range 15 {
		d := deliveryInShard(shards[i%len(shards)])
		switch i % 5 {
		case 4: // permanent and done: never removed
			ledgertest.MustAdmit(t, l, d)
			ledgertest.FinishRow(t, l, clock, d)
			kept = append(kept, d)
		case 3: // signed, still pending: never removed
			d.SignedAt = clock.Now()
			d.Binding.Scheme = "standard-webhooks"
			ledgertest.MustAdmit(t, l, d)
			kept = append(kept, d)
		default: // signed and done (one abandoned): removed once its retention ends
			d.SignedAt = clock.Now()
			d.Binding.Scheme = "standard-webhooks"
			ledgertest.MustAdmit(t, l, d)
			c := ledgertest.MustClaim(t, l, d, ledger.Execute)
			s := ledgertest.MustSave(t, l, *c.Lease, "verdict")
			if i == 1 {
				if err := l.Abandon(ctx, s, "gone"); err != nil {
					t.Fatal(err)
				}
			} else {
				ledgertest.MustComplete(t, l, s)
			}
			removable = append(removable, d)
		}
	}
	// Recounted, as a busy root's records are: a slot still pending is given back by recounting
	// whenever its row is missing, which would hide a removal whose release was lost.
	if err := localfs.RecountAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	// One slot per shard: all but one row of each crowded folder hold a borrowed slot.
	borrowed := 15 - len(shards)
	st, err := l.Stats(ctx)
	if err != nil || st.CapacityUsed != 15 || st.Rows != 15 {
		t.Fatalf("before: %+v %v", st, err)
	}
	l.Close()
	base.SyncAll()
	clock.Advance(3 * time.Hour) // every signed row's retention (65 minutes) has ended
	before := map[ledger.Key]ledger.Row{}
	{
		l := openPoweredWith(t, base.Clone(), clock, limits, false)
		for _, d := range append(append([]ledger.Delivery{}, removable...), kept...) {
			_, row := ledgertest.RowState(t, l, d)
			before[d.Key()] = row
		}
		l.Close()
	}
	points := 0
	steps := cutSteps(base, func(m *powerfs.FS) {
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		l.Cleanup(ctx, "")
		l.Close()
	})
	for _, step := range steps {
		fsys := base.Clone()
		faulty := openPoweredWith(t, fsys, clock, limits, false)
		fsys.ResetCalls()
		fsys.CutAfter(step)
		rep, err := faulty.Cleanup(ctx, "")
		answered := !fsys.IsCut()
		if answered && err != nil {
			t.Fatalf("cleanup failed with no cut: %v", err)
		}
		if answered && len(rep.Removed) != len(removable) {
			t.Fatalf("cleanup removed %d rows, want %d", len(rep.Removed), len(removable))
		}
		fsys.Cut()
		faulty.Close()
		for _, p := range append(syncPersistences(step), folderPersistences(fsys)...) {
			points++
			what := fmt.Sprintf("cleanup, power cut at step %d (answered %v), %s", step, answered, p)
			rebooted := fsys.Recover(p)
			// The machine comes back with its clock stepped back to the rows' admission:
			// only the persisted high-water keeps their signatures stale.
			back := ledger.NewManualClock(start.Add(time.Minute))
			l := openPoweredWith(t, rebooted, back, limits, false)
			for _, d := range kept {
				if state, row := ledgertest.RowState(t, l, d); state == "" || !reflect.DeepEqual(row, before[d.Key()]) {
					t.Fatalf("%s: kept row %s changed:\n got  %q %+v\n want %+v", what, d.Key().Short(), state, row, before[d.Key()])
				}
			}
			for _, d := range removable {
				state, row := ledgertest.RowState(t, l, d)
				switch {
				case state == "":
					a, err := l.Admit(ctx, d)
					if err != nil || a.Outcome != ledger.Stale {
						t.Fatalf("%s: removed row %s: its signature, replayed with the clock back, answered %v %v (want stale)", what, d.Key().Short(), a.Outcome, err)
					}
				case answered:
					t.Fatalf("%s: the answered pass removed %s, and it is back (%s)", what, d.Key().Short(), state)
				case !reflect.DeepEqual(row, before[d.Key()]):
					t.Fatalf("%s: removable row %s changed:\n got  %+v\n want %+v", what, d.Key().Short(), row, before[d.Key()])
				}
			}
			if answered {
				if st, err := l.Stats(ctx); err != nil || st.HighWater.Before(rep.HighWater) {
					t.Fatalf("%s: high-water %v after the answered pass persisted %v (%v)", what, st.HighWater, rep.HighWater, err)
				}
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, ledger.NewManualClock(clock.Now()), limits, true, what)
		}
	}
	t.Logf("%d power cuts of a batch of %d rows (%d holding borrowed slots)", points, len(removable), borrowed)
}

// TestPowerCutAfterACleanupProcessDiesOverUnsyncedEnds: rows completed or abandoned (their
// done state and index entries never synced) fill a root of 16 slots; a cleanup pass removes
// them and its process dies at the syncfs that would make the removals durable, so the rows
// are gone from the page cache only and the capacity still counts them. A live process's
// admission meets Full, finishes the batch (recoverBatchIfAny) and is admitted; the power is
// cut at every step of that admission. After each reboot: rows legible, capacity never
// understated, an answered admission kept, a removed row's replay (clock stepped back) stale
// or the row still there, and the prepared root's capacity equal to its rows.
func TestPowerCutAfterACleanupProcessDiesOverUnsyncedEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.RecordCap = 16
	start := epoch
	clock := ledger.NewManualClock(start)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	var ended []ledger.Delivery
	for i := range 16 {
		d := deliveryInShard([]byte{0x00, 0x05, 0x10, 0x80}[i%4])
		d.SignedAt = clock.Now()
		d.Binding.Scheme = "standard-webhooks"
		ledgertest.MustAdmit(t, l, d)
		s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
		if i%3 == 0 {
			if err := l.Abandon(ctx, s, "gone"); err != nil {
				t.Fatal(err)
			}
		} else {
			ledgertest.MustComplete(t, l, s)
		}
		ended = append(ended, d)
	}
	l.Close()
	clock.Advance(3 * time.Hour)
	// The cleanup process dies at its syncfs.
	dying := &syncFault{FS: base, dieAtSyncFS: true}
	cl, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: dying})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup was answered although its process died at its syncfs")
	}
	cl.Close()
	fresh := newDelivery(time.Time{})
	steps := cutSteps(base, func(m *powerfs.FS) {
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		l.Admit(ctx, fresh)
		l.Close()
	})
	points := 0
	for _, step := range steps {
		fsys := base.Clone()
		l := openPoweredWith(t, fsys, clock, limits, false)
		fsys.ResetCalls()
		fsys.CutAfter(step)
		a, err := l.Admit(ctx, fresh)
		answered := !fsys.IsCut()
		if answered && (err != nil || a.Outcome != ledger.Admitted) {
			t.Fatalf("the admission with no cut: %+v %v", a, err)
		}
		fsys.Cut()
		l.Close()
		for _, p := range syncPersistences(step) {
			points++
			what := fmt.Sprintf("admission after a dead cleanup, cut at step %d (answered %v), %s", step, answered, p)
			rebooted := fsys.Recover(p)
			back := ledger.NewManualClock(start.Add(time.Minute))
			l := openPoweredWith(t, rebooted, back, limits, false)
			if answered {
				if st, _ := ledgertest.RowState(t, l, fresh); st != "pending" {
					t.Fatalf("%s: the answered admission left %q", what, st)
				}
			}
			gone := 0
			for _, d := range ended {
				if st, _ := ledgertest.RowState(t, l, d); st == "" {
					gone++
					if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Stale {
						t.Fatalf("%s: a removed row's replay answered %v %v", what, a.Outcome, err)
					}
				}
			}
			if answered && gone != len(ended) {
				t.Fatalf("%s: the admission was answered (so the dead cleanup's batch was finished) and %d of %d ended rows are gone", what, gone, len(ended))
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, ledger.NewManualClock(clock.Now()), limits, true, what)
		}
	}
	t.Logf("%d power cuts over %d steps", points, len(steps))
}
