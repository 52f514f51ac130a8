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
// one pass of 2 rows; 6 stranded rows must all be reported within 3 invocations, and the
// sweep then starts again from the first row.
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
	for inv := range 3 { // three invocations, each cut after its first pass
		rep := pass()
		for _, s := range rep.Stranded {
			seen[s.Key] = true
		}
		if done := inv == 2; rep.Done != done {
			t.Fatalf("invocation %d: Done %v, want %v (the sweep reaches the last row at the third)", inv, rep.Done, done)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("after 3 cut invocations only %d of %d stranded rows were reported; the rest would never be sent again", len(seen), len(want))
	}
	// Past the last row, the next invocation starts from the first again.
	rep := pass()
	if len(rep.Stranded) != 2 || rep.Done {
		t.Fatalf("the invocation after the sweep reached the end: %d stranded, Done %v; want the first 2 rows again", len(rep.Stranded), rep.Done)
	}
}
