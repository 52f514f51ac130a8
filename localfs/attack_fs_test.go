package localfs_test

// Adversarial tests of format 2 of the FileLedger (branch attack-fs). Each test names the
// contract it checks; a test that fails on the code it was written against says so.

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

// TestAttackFullProofTakenWhileARoomIsBeingMade: "Full is answered only when no shard has
// room". The room epoch is changed BEFORE a release writes the shards that gain room; a
// process that scans every shard between that change and the shard write sees them all full,
// reads the same (already changed) epoch before and after its scan, and keeps a proof of Full
// under an epoch that nothing changes again. Once the release has landed, that process goes on
// answering Full from its proof while a shard has room (until some later release anywhere).
func TestAttackFullProofTakenWhileARoomIsBeingMade(t *testing.T) {
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
	cleanupLap(t, l) // settles every pending key: every shard is full, none pending

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

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestAttackBatchFinishedAtAnUnpersistedNow: "cleanup removes only rows ... whose retention
// ended strictly before the effective now, after persisting that now as the high-water", so
// that "a replay of a forgotten signed delivery is Stale, never admitted again". A cleanup
// that dies after writing its batch leaves the batch to be finished by the next Prepare,
// Cleanup or refused admission, in any process. That finisher judges each batch row at its OWN
// effective now, which it never persists. Between the crash and the finishing, the row was
// re-admitted with a later signed time (answered Duplicate, retention lengthened past the
// persisted high-water); a finisher whose clock runs a few minutes ahead judges it removable
// and removes it. A replay of that later signature to a process with the right clock is then
// fresh by the persisted high-water, finds no row, and is admitted again: a second evaluation,
// a second verdict.
func TestAttackBatchFinishedAtAnUnpersistedNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.QueueCeiling = 0 // retention: signed time + 5 minutes
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, l, d)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "v"))

	// A cleanup at epoch+6m (row ends at epoch+5m) dies at its first removal, batch written.
	clock.Set(epoch.Add(6 * time.Minute))
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die at the removal", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRemove && filepath.Ext(p) == ".state" {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	cleaner := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if _, err := cleaner.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup survived its crash")
	}
	cleaner.Close()

	// The sender re-signs its retry: the row records the later signed time (Duplicate),
	// retained until epoch+9m.
	retry := d
	retry.SignedAt = epoch.Add(4 * time.Minute)
	if a, err := l.Admit(ctx, retry); err != nil || a.Outcome != ledger.Duplicate || !a.RetainUntil.Equal(epoch.Add(9*time.Minute)) {
		t.Fatalf("re-signed retry: %+v %v, want duplicate retained until epoch+9m", a, err)
	}

	// Another process, whose clock is four minutes ahead, prepares the root: it finishes the batch.
	fast := ledger.NewManualClock(epoch.Add(10 * time.Minute))
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: limits, Clock: fast})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	p.Close()

	// The same re-signed retry arrives again at a process with the right clock.
	clock.Set(epoch.Add(6*time.Minute + 30*time.Second))
	a, err := l.Admit(ctx, retry)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if a.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a delivery answered Duplicate was admitted again (%+v): the batch finisher removed the row "+
			"at a now it never persisted", a)
	}
}

// TestAttackReadmissionCutDuringABatchLeaksASlot: "a slot is never held for good". A
// cleanup dies after removing a signed row and before releasing its slot (the batch is
// left). The sender's retry, signed anew (the same key), is admitted into the same shard and
// dies after its slot is durable and before its row is renamed: its slot is pending under the
// same key. The batch, finished later, releases the old slot and deletes the key from the
// shard's pending keys, so the new admission's slot is counted with no pending key and no
// row: nothing ever gives it back.
func TestAttackReadmissionCutDuringABatchLeaksASlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock})
	defer l.Close()
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, l, d)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "v"))

	clock.Set(epoch.Add(6 * time.Minute))
	fsys := faultfs.New(localfs.OSFS{}, nil)
	fsys.SetRule("die before the removals are durable", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpSyncFS {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	cleaner := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if _, err := cleaner.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup survived its crash")
	}
	cleaner.Close()
	if _, err := l.Inspect(ctx, d.Key()); err == nil {
		t.Fatal("the batch did not remove the row before its crash")
	}

	// The retry, signed anew, dies between its durable slot and its row's rename.
	retry := d
	retry.SignedAt = epoch.Add(6 * time.Minute)
	afs := faultfs.New(localfs.OSFS{}, nil)
	afs.SetRule("die at the row's rename", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	admitter := openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock, FS: afs})
	if _, err := admitter.Admit(ctx, retry); err == nil {
		t.Fatal("the admission survived its crash")
	}
	admitter.Close()

	cleanupLap(t, l) // finishes the batch, then settles every shard
	cleanupLap(t, l)
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 0 || st.CapacityUsed != 0 {
		t.Fatalf("after the batch and two cleanup laps: %d rows, %d slots used: a slot is held for good", st.Rows, st.CapacityUsed)
	}
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

// TestAttackLockFreeReaderOfAShardBeingWritten: a capacity shard's record is written in place
// (both copies in one write) under the shard's lock, but several readers take no lock: the
// borrowing scan, Stats and Cleanup's capacity figures, the sweep's settling pre-read, Prepare's
// check. A read racing the write can see both copies torn, and the reader then reports the
// record as damaged ("neither copy of the record is valid": restore from a backup) although
// nothing is damaged: a borrowing admission, a Stats, a Cleanup or a Prepare fails closed for
// no reason. Only a reader holding the lock may conclude that both copies are damaged.
func TestAttackLockFreeReaderOfAShardBeingWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := testLimits()
	limits.RecordCap = 200 // shards 00..c7 have one slot each, c8..ff none
	clock := ledger.NewManualClock(epoch)
	openRoot(t, dir, localfs.Config{Limits: limits, Clock: clock}).Close()
	// Every admission fails at its row's rename, after its slot was written in place (the next
	// one in the shard settles it): records are rewritten again and again, and no row is made.
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
