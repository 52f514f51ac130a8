package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Attacks (helper of attack-lf) on the syncs of answers given from a row read after a
// process died between a rename and its folder sync: what else reads such a row and acts on
// it without making it durable.

// TestPowerCutAfterAProcessCrashSettleLeaksASlot: an admission's process dies after renaming
// its row into place and before syncing the row's folder; the capacity record (count plus one,
// the key pending) was synced before the rename. A live process then settles the shard
// (another admission in the same shard, which finds it full and every other shard full:
// Full): settling reads the row from the page cache, finds it there holding the slot, and
// drops the pending entry, writing the record (data synced in place) and syncing no folder.
// The power goes: the row is lost with its folder's unsynced rename, the record keeps the
// count and no longer names the key pending, so nothing ever gives the slot back. The
// prepared root counts a slot no row holds (file-ledger.md: after Prepare, capacity used ==
// rows); on a busy root each such crash loses one slot for good.
func TestPowerCutAfterAProcessCrashSettleLeaksASlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.RecordCap = 16 // shards 00..0f hold one slot each, the others none
	clock := ledger.NewManualClock(epoch)
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, fsys, clock, limits, true)
	for s := 1; s < 16; s++ {
		ledgertest.MustAdmit(t, l, deliveryInShard(byte(s)))
	}
	l.Close()
	fsys.SyncAll()
	// The admission of k in shard 00 dies before its folder sync.
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	first, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: dying})
	if err != nil {
		t.Fatal(err)
	}
	k := deliveryInShard(0)
	if _, err := first.Admit(ctx, k); err == nil {
		t.Fatal("the admission was answered although its process died before the folder sync")
	}
	first.Close()
	// A live process admits another key of shard 00: it settles shard 00 (k's row is there,
	// in the page cache) and finds the root full.
	second := openPoweredWith(t, fsys, clock, limits, false)
	a, err := second.Admit(ctx, deliveryInShard(0))
	if err != nil || a.Outcome != ledger.Full {
		t.Fatalf("the second admission: %+v %v", a, err)
	}
	second.Close()
	fsys.Cut()
	for _, p := range powerPersistences() {
		rebooted := fsys.Recover(p)
		what := fmt.Sprintf("%s (k's row %s)", p, func() string {
			l := openPoweredWith(t, rebooted, clock, limits, false)
			defer l.Close()
			st, _ := ledgertest.RowState(t, l, k)
			if st == "" {
				return "lost"
			}
			return "kept"
		}())
		checkPreparedRootWith(t, rebooted, clock, limits, true, what)
	}
}

// TestPowerCutInABorrowingAdmission cuts the power at every call of two admissions whose home
// shards are full, so they borrow slots of other shards (the record in the lender's folder,
// the row in its home folder), and recovers each cut every way, losing one folder's unsynced
// changes included. An answered admission is kept, the
// capacity never understates the rows, and the prepared root counts its rows exactly.
func TestPowerCutInABorrowingAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.RecordCap = 16
	clock := ledger.NewManualClock(epoch)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	var held []ledger.Delivery
	for s := 0; s < 14; s++ { // shards 0e and 0f keep their slot
		d := deliveryInShard(byte(s))
		ledgertest.MustAdmit(t, l, d)
		held = append(held, d)
	}
	l.Close()
	base.SyncAll()
	fresh := []ledger.Delivery{deliveryInShard(0x03), deliveryInShard(0x30)}
	run := func(l *localfs.Ledger) (ledger.Admission, error) {
		var a ledger.Admission
		var err error
		for _, d := range fresh {
			if a, err = l.Admit(ctx, d); err != nil {
				return a, err
			}
		}
		return a, nil
	}
	steps := cutStepsEvery(base, func(m *powerfs.FS) {
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		run(l)
		l.Close()
	}, true)
	points := 0
	for _, step := range steps {
		m := base.Clone()
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		m.CutAfter(step)
		var answered []ledger.Delivery
		for _, d := range fresh {
			a, err := l.Admit(ctx, d)
			if m.IsCut() {
				break
			}
			if err != nil || a.Outcome != ledger.Admitted {
				t.Fatalf("step %d: admission with no cut: %+v %v", step, a, err)
			}
			answered = append(answered, d)
		}
		m.Cut()
		l.Close()
		for _, p := range append(syncPersistences(step), folderPersistences(m)...) {
			points++
			what := fmt.Sprintf("borrowing admissions cut at step %d (%d answered), %s", step, len(answered), p)
			rebooted := m.Recover(p)
			l := openPoweredWith(t, rebooted, clock, limits, false)
			for _, d := range append(held, answered...) {
				if st, _ := ledgertest.RowState(t, l, d); st != "pending" {
					t.Fatalf("%s: an answered admission left %q", what, st)
				}
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, clock, limits, true, what)
		}
	}
	t.Logf("%d power cuts over %d steps", points, len(steps))
}

// TestPowerCutAfterTwoProcessCrashesTheSweepLeaksASlot: the slot leak of
// TestPowerCutAfterAProcessCrashSettleLeaksASlot on a root with room, through the cleanup
// sweep. An admission of k1 dies before its folder sync (k1's row in the page cache only, its
// slot pending in the synced record); an admission of k0 in the same shard settles k1 out of
// the pending list (its row is there, in the page cache) and dies at the syncfs that would
// have made everything durable (its record in the page cache: k0 pending, no row). The
// cleanup sweep then settles the shard: k0's slot is given back (no row) and the record is
// written, k1 no longer pending, with its data synced and no folder synced. The power goes:
// k1's row is lost, its slot counted forever.
func TestPowerCutAfterTwoProcessCrashesTheSweepLeaksASlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	k1, k0 := deliveryInShard(0x42), deliveryInShard(0x42)
	{
		dying := &syncFault{FS: fsys, dieAtRowFolder: true}
		l := openOn(t, dying, clock)
		if _, err := l.Admit(ctx, k1); err == nil {
			t.Fatal("k1's admission was answered although its process died before the folder sync")
		}
		l.Close()
	}
	{
		dying := &syncFault{FS: fsys, dieAtFirstSync: true}
		l := openOn(t, dying, clock)
		if _, err := l.Admit(ctx, k0); err == nil {
			t.Fatal("k0's admission was answered although its process died at its syncfs")
		}
		l.Close()
	}
	l := openPowered(t, fsys, clock, false)
	cleanupLap(t, l)
	l.Close()
	fsys.Cut()
	for _, p := range powerPersistences() {
		rebooted := fsys.Recover(p)
		checkPreparedRootWith(t, rebooted, clock, testLimits(), true, p.String())
	}
}

// TestAnswersFromARowReadFailWithTheirSync: when the folder sync of an answer given from a row
// read fails, the answer is an error of class ErrUnavailable with nothing in it: a repeated
// Save, a re-admission answered Pending, a Publish grant.
func TestAnswersFromARowReadFailWithTheirSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys, d := poweredRootWithARow(t, clock)
	l := openOn(t, &syncFault{FS: fsys, failRowFolderAlways: true}, clock)
	defer l.Close()
	if a, err := l.Admit(ctx, d); !errors.Is(err, ledger.ErrUnavailable) || a.Outcome != 0 {
		t.Errorf("re-admission: %+v %v", a, err)
	}
	lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
	for i := range 2 {
		if s, err := l.Save(ctx, lease, []byte("v")); !errors.Is(err, ledger.ErrUnavailable) || s.Report != nil {
			t.Errorf("save %d: %+v %v", i, s, err)
		}
	}
	// A Save under another fence is refused as before, not as unavailable.
	other := lease
	other.Fence++
	if _, err := l.Save(ctx, other, []byte("w")); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("save under a wrong fence: %v", err)
	}
	clock.Advance(2 * time.Hour)
	if c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", time.Minute); !errors.Is(err, ledger.ErrUnavailable) || c.Staged != nil {
		t.Errorf("publish grant: %+v %v", c, err)
	}
}
