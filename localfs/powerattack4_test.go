package localfs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Attacks (helper attack-27) on the one-flush round of a lone admission (commit 3d09eba): the
// capacity record written back with sync_file_range and made durable by the row's fsync,
// unless settling was unsure.

// TestPowerCutOneFlushAdmissionOverALaunderedRecord: settle's unsure only looks at the rows
// it reads, not at the record it reads, which may itself be in the page cache only. An
// admission of k1 dies before its folder sync (k1's row renamed into place, in the page cache
// only; its slot pending in the synced record). An admission of k0 in the same shard, in
// another process, settles k1 out of the pending list (unsure: its row is not one this
// process saw durable, so its round is a syncfs) and dies at that syncfs: the record in the
// page cache now counts k1's slot and no longer names it. A third process admits k2 in the
// shard: settling gives k0's slot back (no row: not unsure) and the round is the one-flush
// round, whose flush makes the laundered record durable (k2 pending, k1 not) without k1's
// rename. The process dies at its row folder sync, and the power goes: k1's row is lost (it
// was never answered) and its slot is counted forever with nothing naming it pending. Before
// 3d09eba the round was a syncfs, which made k1's rename durable with the record.
func TestPowerCutOneFlushAdmissionOverALaunderedRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	k1, k0, k2 := deliveryInShard(0x42), deliveryInShard(0x42), deliveryInShard(0x42)
	{
		l := openOn(t, &syncFault{FS: fsys, dieAtRowFolder: true}, clock)
		if _, err := l.Admit(ctx, k1); err == nil {
			t.Fatal("k1's admission was answered although its process died before the folder sync")
		}
		l.Close()
	}
	{
		l := openOn(t, &syncFault{FS: fsys, dieAtFirstSync: true}, clock)
		if _, err := l.Admit(ctx, k0); err == nil {
			t.Fatal("k0's admission was answered although its process died at its syncfs")
		}
		l.Close()
	}
	{
		l := openOn(t, &syncFault{FS: fsys, dieAtRowFolder: true}, clock)
		if _, err := l.Admit(ctx, k2); err == nil {
			t.Fatal("k2's admission was answered although its process died before the folder sync")
		}
		l.Close()
	}
	fsys.Cut()
	for _, p := range powerPersistences() {
		rebooted := fsys.Recover(p)
		checkPreparedRootWith(t, rebooted, clock, testLimits(), true, p.String())
	}
}

// flakySyncs is one live process's view of a powerfs whose syncs fail with an I/O error at
// chosen calls (the process lives on): failDir[n] fails the nth sync of a row folder (from 1),
// failFS[n] the nth syncfs; cutDir[n] cuts the power at the nth row folder sync instead.
type flakySyncs struct {
	*powerfs.FS
	mu                      sync.Mutex
	dirs, fss               int
	failDir, failFS, cutDir map[int]bool
}

func (f *flakySyncs) SyncDir(name string) error {
	if strings.Contains(name, "/"+localfs.RowsDir+"/") {
		f.mu.Lock()
		f.dirs++
		n := f.dirs
		f.mu.Unlock()
		if f.cutDir[n] {
			f.FS.Cut()
		}
		if f.failDir[n] {
			return errFolderSyncFailed
		}
	}
	return f.FS.SyncDir(name)
}

func (f *flakySyncs) SyncFS(name string) error {
	f.mu.Lock()
	f.fss++
	n := f.fss
	f.mu.Unlock()
	if f.failFS[n] {
		return errors.New("syncfs: input/output error")
	}
	return f.FS.SyncFS(name)
}

// TestPowerCutOneFlushAdmissionAfterTwoFailedSyncs: the leak of
// TestPowerCutOneFlushAdmissionOverALaunderedRecord in one live process, with no crash, only
// two transient I/O errors. k1's admission fails at its row folder's sync (k1's row renamed,
// in the page cache only; not madeDurable). k0's admission settles k1 out of the pending list
// (unsure: a syncfs round) and that syncfs fails: the record in the page cache counts k1's
// slot and no longer names it. k2's admission settles k0 (no row: not unsure) and takes the
// one-flush round, which makes that record durable without k1's rename; the power goes at
// k2's folder sync. k1's slot is counted with no row and no pending entry naming it.
func TestPowerCutOneFlushAdmissionAfterTwoFailedSyncs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	flaky := &flakySyncs{FS: fsys, failDir: map[int]bool{1: true}, failFS: map[int]bool{1: true}, cutDir: map[int]bool{2: true}}
	l := openOn(t, flaky, clock)
	for i, d := range []ledger.Delivery{deliveryInShard(0x42), deliveryInShard(0x42), deliveryInShard(0x42)} {
		if a, err := l.Admit(ctx, d); err == nil {
			t.Fatalf("admission %d answered %+v although its sync failed", i, a)
		}
	}
	l.Close()
	if !fsys.IsCut() {
		t.Fatal("the power was never cut")
	}
	for _, p := range powerPersistences() {
		rebooted := fsys.Recover(p)
		checkPreparedRootWith(t, rebooted, clock, testLimits(), true, p.String())
	}
}

// hookFS runs hook once, right after the first syncfs made through it succeeds; from then on
// the next folder sync or syncfs made through it cuts the power instead.
type hookFS struct {
	*powerfs.FS
	hook  func()
	armed bool
}

func (f *hookFS) SyncDir(name string) error {
	if f.armed {
		f.FS.Cut()
	}
	return f.FS.SyncDir(name)
}

func (f *hookFS) SyncFS(name string) error {
	if f.armed {
		f.FS.Cut()
	}
	err := f.FS.SyncFS(name)
	if err == nil && f.hook != nil {
		hook := f.hook
		f.hook = nil
		hook()
		f.armed = true
	}
	return err
}

// TestPowerCutCleanupReleaseOverALaunderedRecord: the laundered record of
// TestPowerCutOneFlushAdmissionOverALaunderedRecord, made durable by a cleanup's release
// instead (not by the one-flush round: this is older than 3d09eba). A cleanup removes a
// finished row r of shard 42 and makes the removals durable with its syncfs; then, before it
// releases r's slot, an admission of k1 in shard 42 dies before its folder sync (k1's row in
// the page cache only) and an admission of k0 settles k1 out of the pending list and dies at
// its syncfs (the record in the page cache counts k1's slot and no longer names it). The
// release reads that record, gives r's slot back and fsyncs the record alone: durable, without
// k1's rename. The power goes before the next sync: k1's slot is counted for good.
func TestPowerCutCleanupReleaseOverALaunderedRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	var r ledger.Delivery
	for r = newDelivery(epoch); r.Key()[0] != 0x42; r = newDelivery(epoch) {
	}
	{
		l := openPoweredWith(t, fsys, clock, limits, true)
		ledgertest.MustAdmit(t, l, r)
		ledgertest.FinishRow(t, l, clock, r)
		l.Close()
	}
	fsys.SyncAll()
	clock.Set(epoch.Add(2 * time.Hour))
	open := func(f localfs.FS) *localfs.Ledger {
		l, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: f})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	hooked := &hookFS{FS: fsys}
	hooked.hook = func() {
		l := open(&syncFault{FS: fsys, dieAtRowFolder: true})
		if _, err := l.Admit(ctx, deliveryInShard(0x42)); err == nil {
			t.Error("k1's admission was answered although its process died before the folder sync")
		}
		l.Close()
		l = open(&syncFault{FS: fsys, dieAtFirstSync: true})
		if _, err := l.Admit(ctx, deliveryInShard(0x42)); err == nil {
			t.Error("k0's admission was answered although its process died at its syncfs")
		}
		l.Close()
	}
	cleaner := open(hooked)
	rep, err := cleaner.Cleanup(ctx, "")
	cleaner.Close()
	if !fsys.IsCut() {
		t.Fatalf("the power was never cut (cleanup: %+v %v)", rep, err)
	}
	if hooked.hook != nil {
		t.Fatal("the hook never ran")
	}
	for _, p := range powerPersistences() {
		rebooted := fsys.Recover(p)
		checkPreparedRootWith(t, rebooted, clock, limits, true, p.String())
	}
}

// TestAdmissionsFromManyProcessesKeepThePendingListShort: an admission leaves pending the
// slots whose rows it has not seen made durable (another process's), so admissions from many
// processes into one shard would grow the list; at maxCautiousPending (3, one 512-byte sector)
// the admission syncs the file system and settles in full. Five processes take turns in one
// shard; the list never exceeds 3, every admission is answered, and after the power goes
// every answered row is there and every slot is accounted for.
func TestAdmissionsFromManyProcessesKeepThePendingListShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	var procs []*localfs.Ledger
	for range 5 {
		procs = append(procs, openOn(t, fsys, clock))
	}
	var admitted []ledger.Delivery
	most := 0
	for i := range 20 {
		d := deliveryInShard(0x42)
		ledgertest.MustAdmit(t, procs[i%len(procs)], d)
		admitted = append(admitted, d)
		n, err := localfs.PendingForTest(procs[0], 0x42)
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			t.Fatalf("after admission %d the shard holds %d pending slots, want at most 3", i, n)
		}
		most = max(most, n)
	}
	if most < 3 {
		t.Errorf("the pending list never reached 3 (at most %d): the test does not reach the bound", most)
	}
	for _, l := range procs {
		l.Close()
	}
	fsys.Cut()
	eachReboot(t, fsys, clock, func(p powerfs.Persistence, l *localfs.Ledger) {
		for i, d := range admitted {
			if _, err := l.Inspect(ctx, d.Key()); err != nil {
				t.Errorf("%v: answered admission %d: %v", p, i, err)
			}
		}
	})
	for _, p := range powerPersistences() {
		checkPreparedRootWith(t, fsys.Recover(p), clock, testLimits(), true, p.String())
	}
}
