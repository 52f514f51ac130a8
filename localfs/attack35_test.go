package localfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/admlog"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Attacks of helper-35 on cleanup's lock-free read of live logs (admlog.ReadLive), on the lock
// table keyed by file system, and on the 256 KiB default log (ErrFull, ErrTooLarge).

// ---------------------------------------------------------------------------------------------
// 1. A live log's header torn by the read that copies it while its owner checkpoints.

// A read of a live log that copies the first bytes of the header (magic and generation)
// before the owner's checkpoint rewrites it, and the rest (salt, CRC) after: read(2) of a
// page-cache page takes no lock against a concurrent write(2) of the same page (filemap_read
// copies an up-to-date folio without its lock), so a 24-byte header rewritten by Reset's
// pwrite can be copied half old, half new (racyLogReads with cut 12).

// TestAttack35CleanupReadingALiveHeaderAcrossItsCheckpointFailsAsCorrupt: process A owns a
// live log (one entry); process C runs a cleanup pass, and while C's read of A's log copies
// the header, A's checkpointer retires the log (Reset: the header of generation g+1, a new
// salt). C's copy holds the old magic and generation and the new salt and CRC: admlog.ReadLive
// answers "the log's header does not decode" (ErrCorrupt), and logKeys fails the pass. Nothing
// is damaged: normal operation reported as damage. ReadLive's own claim is that a live read
// stops short of what was being written; the header is the one place it does not.
func TestAttack35CleanupReadingALiveHeaderAcrossItsCheckpointFailsAsCorrupt(t *testing.T) {
	ctx := context.Background()
	// "AMLH" and the generation copied before A's checkpoint, the salt and CRC after.
	c, err := cleanupRacingALiveLog(t, 1, 12, func(a *localfs.Ledger) {
		localfs.AllowLogRetireForTest(a)
		if err := localfs.CheckpointForTest(a); err != nil {
			t.Errorf("A's checkpoint: %v", err)
		}
	})
	if err != nil {
		_, again := c.Cleanup(ctx, "")
		t.Errorf("a cleanup pass while a live process checkpoints: %v (ErrCorrupt: %v); the next pass: %v",
			err, errors.Is(err, ledger.ErrCorrupt), again)
	}
}

// ---------------------------------------------------------------------------------------------
// 2. A checkpoint whose header sync fails: the page cache says "retired", the disk does not.

// headerSyncFails is one process on a powerfs whose disk fails the write-back of an admission
// log's header once armed: the checkpoint's Reset writes the header of generation g+1 (into the
// page cache) and its fdatasync answers EIO. That is Linux after a failed write-back: the page
// is marked clean and keeps the new bytes, every later read sees them, the error is reported
// once (to the fdatasync), and a later fsync of another descriptor, or a syncfs, finds nothing
// dirty and answers success; the disk keeps the old header. powerfs cannot mark a page clean
// without writing it, so the test puts the old header back on the disk before the power cut
// (old records what it was).
type headerSyncFails struct {
	*powerfs.FS
	mu     sync.Mutex
	armed  bool
	fired  bool
	old    []byte
	header string
}

func (h *headerSyncFails) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || !isLogPath(name) || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &headerSyncFile{File: f, h: h, name: name}, nil
}

type headerSyncFile struct {
	vfs.File
	h       *headerSyncFails
	name    string
	pending bool
}

func (f *headerSyncFile) WriteAt(p []byte, off int64) (int, error) {
	h := f.h
	h.mu.Lock()
	if h.armed && !h.fired && off == 0 && h.old == nil {
		data, err := h.FS.ReadFile(f.name)
		if err != nil {
			h.mu.Unlock()
			return 0, err
		}
		h.old, h.header, f.pending = append([]byte(nil), data[:admlog.Sector]...), f.name, true
	}
	h.mu.Unlock()
	return f.File.WriteAt(p, off)
}

func (f *headerSyncFile) Datasync() error {
	h := f.h
	h.mu.Lock()
	if f.pending && !h.fired {
		h.fired, f.pending = true, false
		h.mu.Unlock()
		return &os.PathError{Op: "fdatasync", Path: f.name, Err: unix.EIO}
	}
	h.mu.Unlock()
	return vfs.Datasync(f.File)
}

func (f *headerSyncFile) Flock(how int) error   { return vfs.Flock(f.File, how) }
func (f *headerSyncFile) CheckWriteback() error { return vfs.CheckWriteback(f.File) }
func (f *headerSyncFile) WriteBack() error      { return vfs.WriteBack(f.File) }
func (f *headerSyncFile) StartWriteBack() error { return vfs.StartWriteBack(f.File) }
func (h *headerSyncFails) arm()                 { h.mu.Lock(); h.armed = true; h.mu.Unlock() }
func (h *headerSyncFails) firedOnce() bool      { h.mu.Lock(); defer h.mu.Unlock(); return h.fired }
func (h *headerSyncFails) oldHeader() (string, []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.header, h.old
}

// TestAttack35FailedCheckpointHeaderSyncBringsARemovedRowBack: a process admits K through its
// log (generation g, one entry), finishes it, and checkpoints; the checkpoint's syncfs makes
// K's rows durable, then Reset writes the header of generation g+1 and its fdatasync fails
// (EIO): the log is poisoned and given up (its flock let go; "its entries are then a dead
// log's, replayed"). But the replay (cleanup's replayDeadLogs) and cleanup's live-entry rule
// (liveLogKeys, strict Read of a free log) read the header from the page cache: generation
// g+1, no entry. The fsync logKeys runs on a new descriptor answers success (the error was
// reported to the fdatasync; the page is clean), so nothing makes that header durable. K is
// past its retention: the pass removes it. The power is cut: the disk holds generation g's
// header and K's entry; the replay at Open finds K missing and writes it back, pending: a row
// forgotten by cleanup is back, and its verdict would be published twice.
func TestAttack35FailedCheckpointHeaderSyncBringsARemovedRowBack(t *testing.T) {
	ctx := context.Background()
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	m := powerfs.New()
	if err := m.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPoweredWith(t, m, clock, limits, true).Close()
	m.SyncAll()
	h := &headerSyncFails{FS: m}
	l, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: h})
	if err != nil {
		t.Fatal(err)
	}
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, l, d)
	if localfs.LogSlotForTest(l) < 0 {
		t.Fatal("no admission log")
	}
	if err := localfs.KeepLogLiveForTest(l); err != nil { // no checkpoint before the fault is armed
		t.Fatal(err)
	}
	ledgertest.FinishRow(t, l, clock, d)
	h.arm()
	localfs.AllowLogRetireForTest(l)
	cerr := localfs.CheckpointForTest(l)
	if !h.firedOnce() {
		t.Fatalf("the checkpoint's header sync did not run (checkpoint: %v)", cerr)
	}
	t.Logf("checkpoint: %v", cerr)
	clock.Set(epoch.Add(2 * time.Hour))
	removed := cleanupLap(t, l)
	gone := false
	for _, x := range removed {
		gone = gone || x.Key == d.Key()
	}
	if !gone {
		t.Fatalf("the finished row was not removed (removed %d rows)", len(removed))
	}
	l.Close()
	// The disk never received the header of generation g+1 (its write-back failed).
	path, old := h.oldHeader()
	f, err := m.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m.Cut()
	for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}} {
		r := openPoweredWith(t, m.Recover(p), clock, limits, false)
		if st, row := ledgertest.RowState(t, r, d); st != "" {
			r.Close()
			t.Fatalf("%s: the row cleanup removed came back %q (evaluation %s)", p, st, row.EvaluationID)
		}
		r.Close()
	}
}

// ---------------------------------------------------------------------------------------------
// 3. Two handles of one process on the real file system with different FS values.

// TestAttack35TwoFSValuesOneProcessStillExcludeEachOther: the lock table is keyed by (file
// system value, path), so a handle opened over faultfs(OSFS) and a holder over OSFS{} in the
// same process get two fileLocks (two semaphores, two descriptors). flock(2) on two open file
// descriptions conflicts even within one process, so the second must still wait: the
// maintenance lock and a row lock are never held twice at once. (PASSES: the code resists.)
func TestAttack35TwoFSValuesOneProcessStillExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	openRoot(t, dir, localfs.Config{Clock: clock}).Close()
	l := openRoot(t, dir, localfs.Config{Clock: clock, FS: faultfs.New(localfs.OSFS{}, nil), LockWait: 200 * time.Millisecond})
	defer l.Close()
	release, err := localfs.HoldMaintenanceForTest(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cleanup(ctx, ""); !errors.Is(err, ledger.ErrBusy) {
		t.Errorf("cleanup over another FS value while this process holds the maintenance lock: %v, want ErrBusy", err)
	}
	release()
	d := deliveryInShard(0x7a)
	release, err = localfs.HoldLockForTest(ctx, dir, fmt.Sprintf(".amiss-row-%02x.lock", 0x7a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, d); !errors.Is(err, ledger.ErrBusy) {
		t.Errorf("admission over another FS value while this process holds its row lock: %v, want ErrBusy", err)
	}
	release()
	ledgertest.MustAdmit(t, l, d)
}

// ---------------------------------------------------------------------------------------------
// 4. The 256 KiB log: entries that do not fit (ErrFull) and that never could (ErrTooLarge).

func bigDelivery(size int) ledger.Delivery {
	d := newDelivery(time.Time{})
	d.Subject = fmt.Appendf(nil, `{"sha":"%s"}`, bytes.Repeat([]byte("a"), size))
	return d
}

// TestAttack35FullAndTooLargeLogEntriesStayDurable: admissions whose entries fill the default
// log (subjects of 60 KiB: ErrFull, the format 2 way, a checkpoint kicked) and one whose entry
// is larger than the whole log (a subject of 300 KiB: ErrTooLarge, format 2) are all answered
// Admitted, and after a power cut that keeps nothing unsynced each is there as answered and
// the prepared root counts exactly its rows. (PASSES: the code resists.)
func TestAttack35FullAndTooLargeLogEntriesStayDurable(t *testing.T) {
	ctx := context.Background()
	limits := testLimits()
	limits.MaxSubjectBytes = 1 << 20
	limits.MaxReportBytes = 8 << 10
	clock := ledger.NewManualClock(epoch)
	m := powerfs.New()
	if err := m.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPoweredWith(t, m, clock, limits, true).Close()
	m.SyncAll()
	l := openPoweredWith(t, m, clock, limits, false)
	var ds []ledger.Delivery
	var ids []string
	admit := func(d ledger.Delivery) {
		a, err := l.Admit(ctx, d)
		if err != nil || a.Outcome != ledger.Admitted {
			t.Fatalf("admit a subject of %d bytes: %+v %v", len(d.Subject), a, err)
		}
		ds, ids = append(ds, d), append(ids, a.EvaluationID)
	}
	admit(newDelivery(time.Time{}))
	if localfs.LogSlotForTest(l) < 0 {
		t.Fatal("no admission log")
	}
	// The log keeps its entries (no checkpoint) so that the test sees which went through it.
	if err := localfs.KeepLogLiveForTest(l); err != nil {
		t.Fatal(err)
	}
	logged := func() int {
		data, err := m.ReadFile(filepath.Join(powerRoot, localfs.LogsDir, "00.log"))
		if err != nil {
			t.Fatal(err)
		}
		_, es, err := admlog.Read(data)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	for range 8 {
		admit(bigDelivery(60 << 10))
	}
	full := logged()
	if full < 2 || full >= 9 {
		t.Fatalf("%d entries in the log after 8 admissions of 60 KiB: want some logged and some refused (ErrFull)", full)
	}
	admit(bigDelivery(300 << 10))
	if n := logged(); n != full {
		t.Fatalf("an entry larger than the log was logged (%d entries, %d before)", n, full)
	}
	localfs.AllowLogRetireForTest(l)
	admit(newDelivery(time.Time{}))
	t.Logf("%d of 9 admissions went through the log before it was full", full)
	m.Cut()
	l.Close()
	for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}} {
		rebooted := m.Recover(p)
		r := openPoweredWith(t, rebooted, clock, limits, false)
		for i, d := range ds {
			st, row := ledgertest.RowState(t, r, d)
			if st == "" || row.EvaluationID != ids[i] {
				r.Close()
				t.Fatalf("%s: admission %d (subject %d bytes) came back %q %q, answered %s", p, i, len(d.Subject), st, row.EvaluationID, ids[i])
			}
		}
		r.Close()
		rows, slots := slotsAndRows(t, func() *localfs.Ledger { return openPoweredWith(t, rebooted, clock, limits, false) })
		if rows != int64(len(ds)) || slots != rows {
			t.Fatalf("%s: %d rows, %d slots, want %d", p, rows, slots, len(ds))
		}
	}
}
