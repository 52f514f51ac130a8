package objstore_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// TestTheOldestUnfinishedRowIsReportedWhenItsLookIsNotDue: cleanup reports the oldest
// unfinished row at every pass, not only at the passes whose looks read it; and cleanup's list
// of unfinished rows, replaced by a late copy of an older write of its record, hides a stuck row
// no longer than until that row's next look.
func TestTheOldestUnfinishedRowIsReportedWhenItsLookIsNotDue(t *testing.T) {
	w := newWorld(t)
	const stranded, grace = 15 * time.Minute, 2 * time.Minute
	l, _ := w.handle("cleaner", 0, func(c *objstore.Config) { c.StrandedAfter = stranded })
	worker, _ := w.handle("worker", 0, nil)
	oldest := func() time.Time {
		t.Helper()
		var at time.Time
		for cur, i := ledger.Cursor(""), 0; ; i++ {
			if i > 100 {
				t.Fatalf("cleanup never finished a lap")
			}
			rep, err := l.Cleanup(w.ctx, cur)
			if err != nil {
				t.Fatalf("cleanup: %v", err)
			}
			at = ledger.Earliest(at, rep.OldestUnfinished)
			if rep.Done {
				return at
			}
			cur = rep.Next
		}
	}
	sweep := w.prefix + "sweep.json"
	readSweep := func() []byte {
		t.Helper()
		obj, err := minioRaw.GetObject(w.ctx, testBucket, sweep, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		b, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if at := oldest(); !at.IsZero() { // the safety net's first lap, over an empty ledger
		t.Fatalf("an empty ledger: oldest unfinished row admitted at %v, want none", at)
	}
	before := readSweep() // cleanup's record while nothing was unfinished

	stuck := w.delivery(time.Time{})
	w.admit(worker, stuck, ledger.Admitted) // its message lost
	row, err := worker.Inspect(w.ctx, stuck.Key())
	if err != nil {
		t.Fatal(err)
	}
	admitted := row.CreatedAt
	w.store.Advance(grace + time.Second)
	if at := oldest(); !at.Equal(admitted) {
		t.Fatalf("the look at a row never run: oldest unfinished row admitted at %v, want %v", at, admitted)
	}
	w.store.Advance(5 * time.Minute) // its next look is when it would be stranded: not due yet
	if at := oldest(); !at.Equal(admitted) {
		t.Fatalf("a pass whose looks did not read the row: oldest unfinished row admitted at %v, want %v", at, admitted)
	}

	// A late copy of cleanup's record as it was before the row was found.
	if _, err := minioRaw.PutObject(w.ctx, testBucket, sweep, bytes.NewReader(before), int64(len(before)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	oldest()
	w.store.Advance(stranded + 5*time.Minute) // the row's next look
	if at := oldest(); !at.Equal(admitted) {
		t.Fatalf("at the stuck row's next look after its record was replaced: oldest unfinished row admitted at %v, want %v", at, admitted)
	}
	w.store.Advance(time.Minute)
	if at := oldest(); !at.Equal(admitted) {
		t.Fatalf("the pass after: oldest unfinished row admitted at %v, want %v", at, admitted)
	}
}
