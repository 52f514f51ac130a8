package localfs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
// admission in that shard to recount it, one cleanup lap must give it back: a slot held for
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
// used, must stay pending until recounted, not be erased as if it were the removed row's. Else
// that slot is held for good with no row and no pending key to recount.
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

// TestAFullProofTakenWhileRoomIsBeingMadeIsVoid: "Full is answered only when no shard has room".
// The room epoch is changed BEFORE a release writes the shards that gain room; a process that scans
// every shard between that change and the shard write sees them all full, reads the same (already
// changed) epoch before and after its scan, and keeps a proof of Full under an epoch that nothing
// changes again. Once the release has landed, that process goes on answering Full from its proof
// while a shard has room (until some later release anywhere). The release must change the epoch
// again once the room shows, voiding that proof.
func TestAFullProofTakenWhileRoomIsBeingMadeIsVoid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.RecordCap = 20 // shards 00..13 have a quota of one slot, the others none
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	var first ledger.Delivery
	for i := range 20 {
		d := newDelivery(clock.Now())
		ledgertest.MustAdmit(t, l, d)
		if i == 0 {
			first = d
		}
	}
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, first, ledger.Execute).Lease, "r"))
	cleanupLap(t, l)
	// Every shard full and none pending: a borrower has no candidate to lock, so it scans and
	// proves Full (an admission leaves its own key pending, which a lap does not recount while
	// its row is there).
	if err := localfs.RecountAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}

	// Process A: a handle of its own (its own proof), admitting into shard c8, which has no
	// quota, so it borrows.
	a := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, LockWait: 300 * time.Millisecond})
	defer a.Close()
	// The cleaner: when its release writes the first capacity shard (the room epoch has been
	// changed already), A is refused after a scan.
	fsys := faultfs.New(localfs.OSFS{}, nil)
	var during atomic.Value
	fsys.SetRule("scan during the release", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpWrite && filepath.Base(p) == localfs.ShardCapacityFile && during.Load() == nil {
			adm, err := a.Admit(ctx, deliveryInShard(0xc8))
			during.Store(adm.Outcome.String() + " " + errString(err))
		}
		return faultfs.Pass
	})
	cleaner := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	defer cleaner.Close()
	clock.Advance(3 * time.Hour)
	if removed := cleanupLap(t, cleaner); len(removed) != 1 {
		t.Fatalf("cleanup removed %v, want the done row", removed)
	}
	t.Logf("admission during the release: %v", during.Load())
	if got := during.Load(); got != ledger.Full.String()+" <nil>" {
		t.Fatalf("the admission during the release answered %v, want Full after a scan (the case under test)", got)
	}
	st, err := l.Stats(ctx)
	if err != nil || st.CapacityUsed != 19 {
		t.Fatalf("after the cleanup: %+v %v, want 19 of 20 slots used", st, err)
	}
	// One slot is free: A must admit (a fresh handle would).
	adm, err := a.Admit(ctx, deliveryInShard(0xc9))
	if err != nil || adm.Outcome != ledger.Admitted {
		t.Fatalf("a new key with one slot free in the root: %v %v, want admitted (Full answered while room exists)", adm.Outcome, err)
	}
}

// TestALockFreeReaderOfAShardBeingWrittenSeesNoDamage: a capacity shard's record is written in
// place (both copies in one write) under the shard's lock, but several readers take no lock: the
// borrowing scan, Stats and Cleanup's capacity figures, the sweep's recounting pre-read, Prepare's
// check. A read racing the write can see both copies torn, and the reader then reports the record
// as damaged ("neither copy of the record is valid": restore from a backup) although nothing is
// damaged: a borrowing admission, a Stats, a Cleanup or a Prepare fails closed for no reason. Only
// a reader holding the lock may conclude that both copies are damaged.
func TestALockFreeReaderOfAShardBeingWrittenSeesNoDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.RecordCap = 200 // shards 00..c7 have one slot each, c8..ff none
	clock := ledger.NewManualClock(epoch)
	openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock}).Close()
	// Every admission fails at its row's rename, after its slot was written in place (the next
	// one in the shard recounts it): records are rewritten again and again, and no row is made.
	noRow := func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
			return faultfs.FailBefore
		}
		return faultfs.Pass
	}
	wfs := faultfs.New(localfs.OSFS{}, nil)
	wfs.SetRule("no row", noRow)
	w := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: wfs})
	defer w.Close()
	// The reader borrows (its home shard has no quota): every admission reads the 256 records
	// without locks, shard 05's slowly.
	rfs := faultfs.New(racingReads{raced: new(atomic.Bool)}, nil)
	rfs.SetRule("no row", noRow)
	r := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: rfs})
	defer r.Close()
	injected := func(err error) bool { return err != nil && strings.Contains(err.Error(), "injected failure") }
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := w.Admit(ctx, deliveryInShard(0x05)); !injected(err) {
					t.Errorf("admit: %v, want the injected failure", err)
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(3 * time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		if _, err := r.Admit(ctx, deliveryInShard(0xf0)); !injected(err) {
			t.Fatalf("a borrowing admission after %d clean scans, while shard 05 is being written: %v", reads, err)
		}
		reads++
	}
	t.Logf("%d scans, none saw a torn record", reads)
}

// racingReads is the real file system whose reads of capacity shard 05's record race two
// writes, as a read(2) preempted twice while copying does: the first bytes of each copy
// come from the record as it was, the rest from the next record written, and the second copy's
// rest from the one after. (A read is not atomic against a pwrite(2) of the same range:
// measured on ext4, a reader racing a loop of 8 KiB pwrites saw both 4 KiB halves torn in 9 of
// 33,000 reads.)
// Only the first such read races (a torn read is rare: reading again sees a whole record).
type racingReads struct {
	localfs.OSFS
	raced *atomic.Bool
}

func (r racingReads) ReadFile(name string) ([]byte, error) {
	if filepath.Base(name) != localfs.ShardCapacityFile || filepath.Base(filepath.Dir(name)) != "05" || r.raced.Swap(true) {
		return localfs.OSFS{}.ReadFile(name)
	}
	next := func(prev []byte) ([]byte, error) {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			data, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(data, prev) {
				return data, err
			}
		}
		return nil, errors.New("racingReads: no write to race")
	}
	a, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	b, err := next(a)
	if err != nil {
		return nil, err
	}
	c, err := next(b)
	if err != nil {
		return nil, err
	}
	const cut = 40 // inside each copy's frame
	half := localfs.ShardSlotForTest
	if len(a) != 2*half || len(b) != 2*half || len(c) != 2*half {
		return nil, errors.New("racingReads: unexpected size")
	}
	out := append([]byte(nil), a[:cut]...)
	out = append(out, b[cut:half+cut]...)
	return append(out, c[half+cut:]...), nil
}
