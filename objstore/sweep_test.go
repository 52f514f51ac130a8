package objstore_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// TestCleanupReadsWhatIsDue: a pass reads the rows that are due, found through the index by
// time, not every kept row. Rows kept for days (here permanent, done) are read once, when their
// admission's look comes; after that, passes read none of them. Rows admitted and never run
// (their messages lost) are reported stranded by the first pass once they are idle for
// StrandedAfter, and again every StrandedAfter while they stay so; a cleanup cut after one
// pass of a small batch reports each of them, in turn. While rows are unfinished, a pass with
// nothing due reads one row besides: the oldest unfinished one, for the figure it reports.
func TestCleanupReadsWhatIsDue(t *testing.T) {
	w := newWorld(t)
	const stranded, grace = 15 * time.Minute, 2 * time.Minute
	var rowReads atomic.Int64
	l, tr := w.handle("cleaner", 0, func(c *objstore.Config) { c.CleanupBatch = 2; c.StrandedAfter = stranded })
	tr.setRule(func(r *http.Request) fault {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/rows/") {
			rowReads.Add(1)
		}
		return pass
	})
	worker, _ := w.handle("worker", 0, nil)
	passes := func(n int) (ledger.CleanupReport, int64) {
		t.Helper()
		var all ledger.CleanupReport
		rowReads.Store(0)
		for range n {
			rep, err := l.Cleanup(w.ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			all.Stranded = append(all.Stranded, rep.Stranded...)
			all.Done = rep.Done
		}
		return all, rowReads.Load()
	}
	w.cleanLap(l) // the safety net's first lap, over an empty ledger

	for range 20 {
		d := w.delivery(time.Time{})
		ledgertest.MustComplete(t, worker, w.saved(worker, d, "kept for ever"))
	}
	w.store.Advance(grace + time.Second)
	if _, reads := passes(10); reads != 20 {
		t.Fatalf("the looks at 20 finished rows read %d rows, want each once", reads)
	}
	w.store.Advance(5 * time.Minute)
	if rep, reads := passes(1); reads != 0 || !rep.Done {
		t.Fatalf("a pass with nothing due read %d of the 20 kept rows (done %v)", reads, rep.Done)
	}

	want := map[ledger.Key]bool{}
	for range 6 {
		d := w.delivery(time.Time{})
		w.admit(worker, d, ledger.Admitted) // its message lost: stranded once idle
		want[d.Key()] = true
	}
	w.store.Advance(grace + time.Second)
	if rep, reads := passes(3); reads != 6 || len(rep.Stranded) != 0 {
		t.Fatalf("the first looks at 6 rows just admitted read %d rows and found %d stranded, want 6 and none", reads, len(rep.Stranded))
	}
	w.store.Advance(stranded + 5*time.Minute - grace)
	seen := map[ledger.Key]bool{}
	for i := range 3 { // three invocations, each cut after one pass of 2
		rep, reads := passes(1)
		if reads != 2 {
			t.Fatalf("invocation %d read %d rows, want the 2 its batch holds", i, reads)
		}
		for _, s := range rep.Stranded {
			seen[s.Key] = true
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("after 3 cut invocations %d of %d stranded rows were reported", len(seen), len(want))
	}
	// Nothing due: the pass reads only the oldest unfinished row again, for the figure it
	// reports (OldestUnfinished).
	if rep, reads := passes(1); reads != 1 || len(rep.Stranded) != 0 || !rep.Done {
		t.Fatalf("the next pass read %d rows and reported %d stranded (done %v), want nothing due and the oldest unfinished row read again",
			reads, len(rep.Stranded), rep.Done)
	}
	// Still stranded StrandedAfter later: reported again, each once.
	w.store.Advance(stranded + 5*time.Minute)
	count := map[ledger.Key]int{}
	for range 5 {
		rep, _ := passes(1)
		for _, s := range rep.Stranded {
			count[s.Key]++
		}
	}
	for k := range want {
		if count[k] != 1 {
			t.Fatalf("a stranded row was reported %d times StrandedAfter later, want once (%v)", count[k], count)
		}
	}
}
