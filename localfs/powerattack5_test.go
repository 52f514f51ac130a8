package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Attacks (helper attack-28) on the cautious settling of 93990e2 and its bound of 3 pending
// slots per admission's record (one 512-byte sector).

// rowPathForTest is where key's row lives in the powered root.
func rowPathForTest(k ledger.Key) string {
	return filepath.Join(powerRoot, localfs.RowsDir, fmt.Sprintf("%02x", k[0]), k.String()+".state")
}

// removalHookFS runs hook once, at the first syncfs made through it after the file gone no
// longer exists (a cleanup's removals made, not yet synced).
type removalHookFS struct {
	*powerfs.FS
	gone string
	hook func()
}

func (f *removalHookFS) SyncFS(name string) error {
	if f.hook != nil {
		if _, err := f.FS.Stat(f.gone); errors.Is(err, fs.ErrNotExist) {
			hook := f.hook
			f.hook = nil
			hook()
		}
	}
	return f.FS.SyncFS(name)
}

// cutAtFileSync is a process's view of a powerfs that cuts the power at the first fsync or
// write-back of a file (folder syncs and syncfs succeed until then).
type cutAtFileSync struct {
	*powerfs.FS
}

func (f *cutAtFileSync) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return file, err
	}
	return &cutFile{File: file, fsys: f.FS}, nil
}

type cutFile struct {
	vfs.File
	fsys *powerfs.FS
}

func (w *cutFile) Sync() error {
	w.fsys.Cut()
	return w.File.Sync()
}

func (w *cutFile) WriteBack() error {
	w.fsys.Cut()
	return vfs.WriteBack(w.File)
}

func (w *cutFile) CheckWriteback() error { return vfs.CheckWriteback(w.File) }

func (w *cutFile) Flock(how int) error { return vfs.Flock(w.File, how) }

// threePendingThenBatch makes a root whose shard 0x42 holds three pending slots (three
// processes admitted one key each: none saw the others' rows made durable), all three rows
// finished and removable. It returns the powerfs and the three deliveries.
func threePendingThenBatch(t *testing.T, clock *ledger.ManualClock, limits ledger.Limits) (*powerfs.FS, []ledger.Delivery) {
	t.Helper()
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPoweredWith(t, fsys, clock, limits, true).Close()
	var ds []ledger.Delivery
	for range 3 {
		d := newDelivery(epoch)
		for d.Key()[0] != 0x42 {
			d = newDelivery(epoch)
		}
		l := openPoweredWith(t, fsys, clock, limits, false)
		ledgertest.MustAdmit(t, l, d)
		l.Close()
		ds = append(ds, d)
	}
	l := openPoweredWith(t, fsys, clock, limits, false)
	if n, err := localfs.PendingForTest(l, 0x42); err != nil || n != 3 {
		t.Fatalf("shard 0x42 holds %d pending slots (%v), want 3", n, err)
	}
	for _, d := range ds {
		ledgertest.FinishRow(t, l, clock, d)
	}
	l.Close()
	fsys.SyncAll()
	clock.Set(epoch.Add(2 * time.Hour))
	return fsys, ds
}

// TestPendingListOverOneSectorWhileABatchIsUnreleased: the bound of 3 pending slots per
// admission's record (482 bytes, one sector) assumes that the full settling after a syncfs
// keeps only unreadable rows. It also keeps every entry a cleanup batch removed and has not
// released yet (settle: "the batch releases it"). Three processes admit one key each in shard
// 0x42 (3 pending: none saw the others' rows durable), the rows finish and a cleanup batch
// removes them; before its release an admission in the shard finds 3 pending, syncs, settles
// in full, keeps all 3 (the batch's) and adds its own: 4 entries, a record over 512 bytes.
// The power goes before that record is synced: a sector-torn write can spoil both copies
// (the first sector new, the second old), and the shard cannot be read after the reboot.
func TestPendingListOverOneSectorWhileABatchIsUnreleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	fsys, ds := threePendingThenBatch(t, clock, limits)
	hooked := &removalHookFS{FS: fsys, gone: rowPathForTest(ds[0].Key())}
	hooked.hook = func() {
		l, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: &cutAtFileSync{FS: fsys}})
		if err != nil {
			t.Errorf("open the admitting process: %v", err)
			return
		}
		if a, err := l.Admit(ctx, deliveryInShard(0x42)); err == nil {
			t.Errorf("the admission was answered %+v although the power was cut at its sync", a)
		}
		l.Close()
	}
	cleaner, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: hooked})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cleaner.Cleanup(ctx, "")
	cleaner.Close()
	if hooked.hook != nil {
		t.Fatalf("the hook never ran (cleanup: %+v %v)", rep, err)
	}
	if !fsys.IsCut() {
		t.Fatal("the power was never cut")
	}
	// Kept whole, the admission's record names more than 3 pending slots.
	{
		l := openPoweredWith(t, fsys.Recover(powerfs.Persistence{Keep: powerfs.Everything}), clock, limits, false)
		n, err := localfs.PendingForTest(l, 0x42)
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			t.Errorf("the admission's record names %d pending slots, more than one sector's 3", n)
		}
	}
	torn := 0
	for seed := uint64(1); seed <= 64; seed++ {
		for _, ordered := range []bool{true, false} {
			p := powerfs.Persistence{Keep: powerfs.Random, Seed: seed, Ordered: ordered}
			data, err := fsys.Recover(p).ReadFile(filepath.Join(powerRoot, localfs.RowsDir, "42", localfs.ShardCapacityFile))
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			l, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: fsys.Recover(p)})
			if err != nil {
				torn++
				t.Errorf("%v: open after the power cut: %v", p, err)
				continue
			}
			if _, err := localfs.PendingForTest(l, 0x42); err != nil {
				torn++
				t.Errorf("%v: shard 0x42 is unreadable after the power cut (%d bytes): %v", p, len(data), err)
			}
			l.Close()
		}
	}
	if torn > 0 {
		t.Logf("%d of 128 reboots found shard 0x42 unreadable", torn)
	}
}
