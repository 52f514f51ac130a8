package localfs_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// TestSyncsPerOperation counts the syncs (fsync, folder fsync, syncfs) each operation makes on
// its own, through the instrumented file system: a count, never a timing. Each figure is argued
// next to the code (ops.go, capacity.go, durable.go); format 1 made 13 for a lifecycle.
func TestSyncsPerOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys})
	writeBack := vfs.FlushCoversWriteBack(localfs.OSFS{}, dir)
	t.Logf("the flush of a sync covers a write-back here: %v", writeBack)
	defer l.Close()
	count := func(what string, want int, f func()) {
		t.Helper()
		fsys.Counter().Reset()
		f()
		c := fsys.Counter().Snapshot()
		if c.Fsyncs != want {
			t.Errorf("%s: %d syncs (%v), want %d", what, c.Fsyncs, c, want)
		}
		t.Logf("%s: %d syncs", what, c.Fsyncs)
	}
	// Warm up: the first completion of a signed row makes its hour's index folder durable.
	w := newDelivery(clock.Now())
	ledgertest.MustAdmit(t, l, w)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, w, ledger.Execute).Lease, "r"))

	lifecycle := 0
	for _, signed := range []bool{false, true} {
		d := newDelivery(time.Time{})
		if signed {
			d = newDelivery(clock.Now())
		}
		var c ledger.Claim
		var s ledger.Staged
		before := 0
		step := func(what string, want int, f func()) {
			t.Helper()
			count(what, want, f)
			before += want
		}
		step("admit (new key)", 2, func() { ledgertest.MustAdmit(t, l, d) })
		// Where the file system allows it, the row's write-out is started, the capacity
		// record is written back without a flush and the row's fsync flushes both: no syncfs
		// (vfs.FlushCoversWriteBack).
		if c := fsys.Counter().Snapshot(); writeBack {
			if c.ByOp[faultfs.OpSyncFS] != 0 || c.ByOp[faultfs.OpWriteStart] != 1 || c.ByOp[faultfs.OpWriteOut] != 1 || c.ByOp[faultfs.OpSync] != 1 {
				t.Errorf("admit on a file system whose flush covers a write-back: %v, want one write started, one writeout, one fsync, no syncfs", c)
			}
		} else if c.ByOp[faultfs.OpSyncFS] != 1 || c.ByOp[faultfs.OpWriteOut] != 0 || c.ByOp[faultfs.OpWriteStart] != 0 {
			t.Errorf("admit: %v, want one syncfs and no writeout", c)
		}
		// A re-admission that changes nothing still syncs the row's folder: it tells the
		// sender the delivery is held, and the row may be in the page cache only (written by
		// a process that died before its folder sync). Not part of the lifecycle.
		count("re-admit (nothing changes)", 1, func() {
			if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Pending {
				t.Fatalf("re-admit: %+v %v", a, err)
			}
		})
		step("claim (execute)", 1, func() { c = ledgertest.MustClaim(t, l, d, ledger.Execute) })
		step("renew", 1, func() {
			if _, err := l.Renew(ctx, *c.Lease, time.Minute); err != nil {
				t.Fatal(err)
			}
		})
		step("save", 2, func() { s = ledgertest.MustSave(t, l, *c.Lease, "verdict") })
		step("complete", 1, func() { ledgertest.MustComplete(t, l, s) })
		lifecycle = before - 1 // without the renewal
		if lifecycle != 6 {
			t.Errorf("lifecycle (signed %v): %d syncs, want 6", signed, lifecycle)
		}
	}
	// The other writes.
	d := newDelivery(clock.Now())
	ledgertest.MustAdmit(t, l, d)
	later := d
	later.SignedAt = clock.Now().Add(time.Second)
	count("re-admit with a later signed time", 2, func() {
		if a, err := l.Admit(ctx, later); err != nil || a.Outcome != ledger.Pending {
			t.Fatalf("re-admit: %+v %v", a, err)
		}
	})
	c := ledgertest.MustClaim(t, l, d, ledger.Execute)
	count("release", 1, func() {
		if err := l.Release(ctx, *c.Lease, time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
	c = ledgertest.MustClaim(t, l, d, ledger.Execute)
	s := ledgertest.MustSave(t, l, *c.Lease, "verdict")
	count("abandon", 1, func() {
		if err := l.Abandon(ctx, s, "refused"); err != nil {
			t.Fatal(err)
		}
	})
	count("revive", 2, func() {
		if _, err := l.Revive(ctx, d.Key(), ""); err != nil {
			t.Fatal(err)
		}
	})
	clock.Advance(time.Minute)
	// A Publish grant is synced with its folder: the saved row it publishes must be on disk
	// whoever saved it (see Claim).
	count("claim (publish)", 2, func() { ledgertest.MustClaim(t, l, d, ledger.Publish) })
	count("inspect", 0, func() {
		if _, err := l.Inspect(ctx, d.Key()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConcurrentOperationsShareSyncs runs admissions and saves at once in one process, with
// every group-commit round made to gather all of them, and counts the syncs: the whole group
// shares one sync for its files' data and one for their folder entries, where one at a time
// they would make 2 each.
func TestConcurrentOperationsShareSyncs(t *testing.T) {
	t.Parallel()
	const n = 8
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys})
	defer l.Close()
	var leases []ledger.Lease
	var saved []ledger.Delivery
	// Each in a shard of its own: operations on one shard wait for each other's lock.
	for i := range n / 2 {
		d := deliveryInShard(byte(0x10 + i))
		ledgertest.MustAdmit(t, l, d)
		leases = append(leases, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease)
		saved = append(saved, d)
	}
	var fresh []ledger.Delivery
	for i := range n / 2 {
		fresh = append(fresh, deliveryInShard(byte(0x80+i)))
	}
	localfs.SetSyncGatherForTest(l, n, 10*time.Second)
	var rounds []int
	var mu sync.Mutex
	localfs.SetAfterSyncForTest(l, func(k int) { mu.Lock(); rounds = append(rounds, k); mu.Unlock() })
	fsys.Counter().Reset()
	var wg sync.WaitGroup
	for i := range n / 2 {
		wg.Add(2)
		go func() { defer wg.Done(); ledgertest.MustAdmit(t, l, fresh[i]) }()
		go func() { defer wg.Done(); ledgertest.MustSave(t, l, leases[i], "verdict") }()
	}
	wg.Wait()
	c := fsys.Counter().Snapshot()
	if c.Fsyncs != 2 || len(rounds) != 2 || rounds[0] != n || rounds[1] != n {
		t.Fatalf("%d admissions and saves at once: %d syncs in rounds %v (%v), want 2 rounds of %d", n, c.Fsyncs, rounds, c, n)
	}
	for i := range n / 2 {
		if row := mustInspect(t, l, saved[i]); row.State != ledger.StateSaved {
			t.Fatalf("saved row is %v", row.State)
		}
		if row := mustInspect(t, l, fresh[i]); row.State != ledger.StatePending {
			t.Fatalf("admitted row is %v", row.State)
		}
	}
}

func mustInspect(t testing.TB, l ledger.Ledger, d ledger.Delivery) ledger.Row {
	t.Helper()
	row, err := l.Inspect(context.Background(), d.Key())
	if err != nil {
		t.Fatalf("inspect %s: %v", d.Binding.Identity, err)
	}
	return row
}

// TestSweepRecountsWithoutSyncing: after 600 admissions every shard holds a pending key whose
// row exists; a cleanup lap that lists every folder recounts nothing and writes nothing for
// them (its syncs do not grow with the shards it lists), while a slot an admission left with
// no row is still given back by the same kind of lap (TestCleanupGivesBackTheSlotOfACutAdmission).
func TestSweepRecountsWithoutSyncing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys})
	defer l.Close()
	for range 600 {
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
	}
	lap := func() faultfs.Counts {
		fsys.Counter().Reset()
		cleanupLap(t, l)
		return fsys.Counter().Snapshot()
	}
	first, second := lap(), lap()
	if first.Fsyncs > 4 || first.Fsyncs != second.Fsyncs {
		t.Fatalf("a lap over 256 shards with pending keys made %d syncs (%v), then %d: want a few, the same each lap", first.Fsyncs, first, second.Fsyncs)
	}
	t.Logf("a lap: %d syncs", first.Fsyncs)
}
