package localfs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// TestPrepareIsBounded: Prepare lists the root folder and row folders only until its budget
// of entries is spent, whatever the size of the root, and the next Prepare goes on where it
// stopped, so debris in any folder is collected within a bounded number of Prepares.
func TestPrepareIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{})
	var last ledger.Delivery
	for range 600 {
		last = newDelivery(time.Time{})
		ledgertest.MustAdmit(t, l, last)
	}
	l.Close()
	// Debris in the folder of the last row.
	tmp := filepath.Join(dir, localfs.RowsDir, last.Key().String()[:2], last.Key().String()+".state.tmp-0123456789abcdef")
	if err := os.WriteFile(tmp, []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	const budget = 40 // about 13 folders of 3 entries each (two rows and the capacity record)
	prepares := 0
	for ; prepares < 100; prepares++ {
		fsys := faultfs.New(localfs.OSFS{}, nil)
		p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits(), FS: fsys, DebrisBudget: budget})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		p.Close()
		c := fsys.Counter().Snapshot()
		// The root folder, then row folders until the budget is spent (one folder may go
		// past it): never all 256.
		if c.Listings > 1+budget/2 {
			t.Fatalf("prepare %d listed %d folders (budget %d entries): %v", prepares, c.Listings, budget, c)
		}
		if _, err := os.Stat(tmp); os.IsNotExist(err) {
			break
		}
	}
	// Each prepare lists at least budget/3 folders (3 entries each, at most 5 here), so 256
	// folders take at most 256/(budget/5)+1 prepares.
	if bound := 256/(budget/5) + 1; prepares >= bound {
		t.Fatalf("debris collected by prepare number %d: want at most %d", prepares+1, bound)
	}
	t.Logf("debris in folder %s collected by prepare number %d", last.Key().String()[:2], prepares+1)
}

// TestSweepLapsResumeAndCoverEveryRow: a cleanup cut short after one pass every time still
// reaches every row (the next lap starts where the last pass stopped), and a lap started
// anywhere reports every stranded row exactly once.
func TestSweepLapsResumeAndCoverEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Clock: clock, SweepBatch: 25, StrandedAfter: time.Minute})
	defer l.Close()
	want := map[ledger.Key]bool{}
	for range 200 {
		d := newDelivery(time.Time{})
		ledgertest.MustAdmit(t, l, d)
		want[d.Key()] = true
	}
	clock.Advance(time.Hour) // every row is stranded now
	// One pass per "invocation", each starting with an empty cursor.
	seen := map[ledger.Key]int{}
	for i := 0; i < 8; i++ {
		rep, err := l.Cleanup(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Done {
			t.Fatalf("a pass of 25 rows finished a lap of 200")
		}
		for _, s := range rep.Stranded {
			seen[s.Key]++
		}
	}
	if len(seen) != 200 {
		t.Fatalf("8 passes cut short reached %d of 200 rows", len(seen))
	}
	// A whole lap from where the last one stopped: every row once.
	seen = map[ledger.Key]int{}
	cur := ledger.Cursor("")
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("lap never ended")
		}
		rep, err := l.Cleanup(ctx, cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.Stranded {
			seen[s.Key]++
		}
		if rep.Done {
			break
		}
		if !strings.Contains(string(rep.Next), ":") {
			t.Fatalf("cursor %q", rep.Next)
		}
		cur = rep.Next
	}
	for k := range want {
		if seen[k] != 1 {
			t.Fatalf("row %s reported %d times in one lap", k.Short(), seen[k])
		}
	}
}

// TestSweepReindexesAnEndedRow: Complete does not sync the end-time index entry; if it is lost
// while the done state survives, the sweep meets the row past its retention, indexes it
// again, and the next pass removes it and gives its slot back.
func TestSweepReindexesAnEndedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	l := openRoot(t, dir, localfs.Config{Clock: clock})
	defer l.Close()
	d := newDelivery(clock.Now())
	ledgertest.MustAdmit(t, l, d)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "r"))
	entries, _ := filepath.Glob(filepath.Join(dir, localfs.EndedDir, "*", "*"))
	if len(entries) != 1 {
		t.Fatalf("index entries %v", entries)
	}
	if err := os.Remove(entries[0]); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	for pass := 0; pass < 3; pass++ {
		if _, err := l.Cleanup(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Inspect(ctx, d.Key()); err == nil {
		t.Fatal("an ended row whose index entry was lost was never removed")
	}
	if st, err := l.Stats(ctx); err != nil || st.CapacityUsed != 0 || st.Rows != 0 {
		t.Fatalf("stats %+v %v", st, err)
	}
}
