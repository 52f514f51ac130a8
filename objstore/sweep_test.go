package objstore_test

import (
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// TestCutCleanupsSweepEveryRow: the cleanup function is cut by its time limit on a ledger
// larger than one invocation can read, and starts every invocation with an empty cursor. The
// sweep must go on where the last pass stopped (as the FileLedger's does), not from the first
// row each time: a stranded row past what one invocation reads would never be reported, and
// a message of it lost or dead-lettered never sent again. Here each invocation is cut after
// one pass of 2 rows; 6 stranded rows must all be reported within 3 invocations; the sweep
// then goes on from the first row, and a run with time enough goes round one whole lap.
func TestCutCleanupsSweepEveryRow(t *testing.T) {
	w := newWorld(t)
	l, _ := w.handle("cleaner", 0, func(c *objstore.Config) { c.SweepBatch = 2; c.StrandedAfter = 15 * time.Minute })
	want := map[ledger.Key]bool{}
	for range 6 {
		d := w.delivery(time.Time{})
		w.admit(l, d, ledger.Admitted) // admitted, its message lost: stranded once idle
		want[d.Key()] = true
	}
	w.store.Advance(16 * time.Minute)
	pass := func() ledger.CleanupReport {
		t.Helper()
		rep, err := l.Cleanup(w.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		w.store.Advance(5 * time.Minute)
		return rep
	}
	seen := map[ledger.Key]bool{}
	for range 3 { // three invocations, each cut after its first pass
		for _, s := range pass().Stranded {
			seen[s.Key] = true
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("after 3 cut invocations only %d of %d stranded rows were reported; the rest would never be sent again", len(seen), len(want))
	}
	// The next lap goes on from the first row.
	if rep := pass(); len(rep.Stranded) != 2 || rep.Done {
		t.Fatalf("the invocation after the sweep reached the last row: %d stranded, Done %v; want the first 2 rows, the lap not over", len(rep.Stranded), rep.Done)
	}
	// An invocation with time enough follows the cursor round one whole lap, from where the
	// last pass stopped, reading every row once, and ends Done.
	count := map[ledger.Key]int{}
	cursor := ledger.Cursor("")
	for passes := 0; ; passes++ {
		if passes > 10 {
			t.Fatal("the lap never ended")
		}
		rep, err := l.Cleanup(w.ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.Stranded {
			count[s.Key]++
		}
		if rep.Done {
			break
		}
		cursor = rep.Next
	}
	for k := range want {
		if count[k] != 1 {
			t.Fatalf("a whole lap read row %s %d times, want once (%v)", k.Short(), count[k], count)
		}
	}
}
