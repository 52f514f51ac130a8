package localfs_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// fill admits n new deliveries (signed at signedAt, unsigned when zero) and answers the first.
func fill(t *testing.T, l *localfs.Ledger, n int, signedAt time.Time) ledger.Delivery {
	t.Helper()
	var first ledger.Delivery
	for i := range n {
		d := newDelivery(signedAt)
		ledgertest.MustAdmit(t, l, d)
		if i == 0 {
			first = d
		}
	}
	return first
}

// TestRefusalOfAFullRoot: a full root refuses a new key after reading every capacity shard
// once; later refusals read only the room epoch, until a slot is freed anywhere (here by
// another process's cleanup), after which the next new key is admitted, not refused.
func TestRefusalOfAFullRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.RecordCap = 20
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	defer l.Close()
	first := fill(t, l, 20, clock.Now())
	refuse := func() faultfs.Counts {
		t.Helper()
		fsys.Counter().Reset()
		if a, err := l.Admit(ctx, newDelivery(time.Time{})); err != nil || a.Outcome != ledger.Full {
			t.Fatalf("admission into a full root: %+v %v", a, err)
		}
		return fsys.Counter().Snapshot()
	}
	scan := refuse()
	if scan.ByOp[faultfs.OpReadFile] < 256 {
		t.Fatalf("the first refusal read %d files: it must read every shard", scan.ByOp[faultfs.OpReadFile])
	}
	again := refuse()
	writes := again.ByOp[faultfs.OpWrite] + again.ByOp[faultfs.OpRename] + again.ByOp[faultfs.OpRemove] + again.Fsyncs
	if again.ByOp[faultfs.OpReadFile] > 6 || again.Listings != 0 || writes != 0 {
		// (An open may be the key's row-lock file, opened once per process.)
		t.Fatalf("a second refusal: %v, want a few reads and no write", again)
	}
	t.Logf("refusal: %v the first time, %v after", scan, again)
	// Another process frees a slot.
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, first, ledger.Execute).Lease, "r"))
	other := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	clock.Advance(3 * time.Hour)
	rep, err := other.Cleanup(ctx, "")
	other.Close()
	if err != nil || len(rep.Removed) != 1 {
		t.Fatalf("cleanup: %+v %v", rep, err)
	}
	ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
	refuse()
}

// TestCleanupGivesBackTheSlotOfACutAdmission: an admission that dies after its slot is
// durable and before its row is renamed into place holds a slot with no row. With no later
// admission in that shard to settle it, one cleanup lap must give it back: a slot held for
// good shrinks the root until it refuses every delivery.
func TestCleanupGivesBackTheSlotOfACutAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock}).Close()
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die at the row's rename", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	dying := openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys})
	if _, err := dying.Admit(ctx, newDelivery(time.Time{})); err == nil {
		t.Fatal("the admission survived its crash")
	}
	dying.Close()
	l := openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock})
	defer l.Close()
	st, err := l.Stats(ctx)
	if err != nil || st.Rows != 0 || st.CapacityUsed != 1 {
		t.Fatalf("after the cut admission: %+v %v, want no row and one slot held", st, err)
	}
	cleanupLap(t, l)
	if st, err = l.Stats(ctx); err != nil || st.CapacityUsed != 0 {
		t.Fatalf("after a cleanup lap: %+v %v, want the slot given back", st, err)
	}
}

// TestReleaseLeavesALaterAdmissionsPendingSlot: a cleanup batch removes a row and dies before
// it releases the slot; the same key is admitted again (a new signature, the row forgotten)
// and that admission dies after taking its slot, before its row exists. Finishing the batch
// must give back the removed row's slot only: the new admission's pending slot, which it never
// used, must stay pending until settled, not be erased as if it were the removed row's. Else
// that slot is held for good with no row and no pending key to settle.
func TestReleaseLeavesALaterAdmissionsPendingSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock})
	d := newDelivery(clock.Now())
	ledgertest.MustAdmit(t, l, d) // its key stays pending in its shard: no admission there since
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "r"))
	l.Close()
	clock.Advance(3 * time.Hour)

	// A cleanup that dies once the batch's removals are made durable, before any release.
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die before the release", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpSyncFS {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	dying := openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys})
	if _, err := dying.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup survived its crash")
	}
	dying.Close()

	// The same key, signed again: admitted as new, and dies before its row is renamed.
	again := d
	again.SignedAt = clock.Now()
	fsys = faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die at the row's rename", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	dying = openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys})
	if _, err := dying.Admit(ctx, again); err == nil {
		t.Fatal("the admission survived its crash")
	}
	dying.Close()

	l = openRoot(t, dir, localfs.Config{Limits: testLimits(), Clock: clock})
	defer l.Close()
	for lap := 0; lap < 2; lap++ {
		cleanupLap(t, l)
	}
	st, err := l.Stats(ctx)
	if err != nil || st.Rows != 0 || st.CapacityUsed != 0 {
		t.Fatalf("after the batch was finished and two laps: %d rows, %d slots (%v): want none held", st.Rows, st.CapacityUsed, err)
	}
}

// TestAFullProofLapses: a process that read every shard full keeps answering Full without
// reading them while the room epoch is unchanged. A release changes the epoch before it
// gives room and again after; one whose process died between the two (here: the first change
// before this process's scan, the room given after it, no second change) leaves the proof
// standing with a slot free. The proof must lapse on its own, so the slot is used: a refusal
// with room is a delivery turned away.
func TestAFullProofLapses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.RecordCap = 20
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	first := fill(t, l, 20, time.Time{})
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, first, ledger.Execute).Lease, "r"))
	// The releaser's first change of the epoch, then this process's scan under the new epoch.
	if err := localfs.BumpRoomForTest(l); err != nil {
		t.Fatal(err)
	}
	if a, err := l.Admit(ctx, newDelivery(time.Time{})); err != nil || a.Outcome != ledger.Full {
		t.Fatalf("admission into a full root: %+v %v", a, err)
	}
	// The releaser gives the room and dies before the epoch's second change.
	if err := localfs.ReleaseWithoutShowingForTest(ctx, l, first.Key()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(localfs.FullProofLife)
	if a, err := l.Admit(ctx, newDelivery(time.Time{})); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admission with a slot free, %v after the proof of Full: %+v %v", localfs.FullProofLife, a, err)
	}
}
