package objstore_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Bucket versioning: the S3 ledger deletes rows by version id, and relies on a bucket that
// keeps versions. An operator may suspend versioning on a live ledger's bucket; these tests
// give the world a bucket of its own, since they change its settings.

// ownBucket makes a versioned bucket for w alone.
func ownBucket(w *world) string {
	w.t.Helper()
	name := fmt.Sprintf("own-%d-%d", time.Now().UnixNano()%1e9, prefixSeq.Add(1))
	if err := minioRaw.MakeBucket(w.ctx, name, minio.MakeBucketOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if err := minioRaw.EnableVersioning(w.ctx, name); err != nil {
		w.t.Fatal(err)
	}
	w.bucket = name
	return name
}

// TestEveryStartChecksVersioning: versioning is suspended on the bucket of a ledger in use.
// Opening the ledger (every start of a process, not only its creation) is refused with a
// message naming the bucket setting, and a warm handle's cleanup, which has seen the bucket
// keep versions before, refuses too: while versioning is suspended every write replaces the
// "null" version in place, so a version judged removable could be a row written after the
// judgement.
func TestEveryStartChecksVersioning(t *testing.T) {
	w := newWorld(t)
	bucket := ownBucket(w)
	cleaner, _ := w.handle("cleaner", 0, nil)
	w.cleanLap(cleaner)
	if err := minioRaw.SuspendVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.open("restarted", 0, nil); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), "versioning") {
		t.Errorf("a start while the bucket's versioning is suspended: %v, want a refusal naming bucket versioning", err)
	}
	if _, err := cleaner.Cleanup(w.ctx, ""); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), "versioning") {
		t.Fatalf("cleanup through a warm handle while the bucket's versioning is suspended: %v, want a refusal naming bucket versioning", err)
	}
	if err := minioRaw.EnableVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.open("restarted", 0, nil); err != nil {
		t.Fatalf("a start once versioning is enabled again: %v", err)
	}
	w.cleanLap(cleaner)
}

// TestRowsWrittenWhileVersioningWasSuspendedAreForgotten: a handle opened while the bucket kept
// versions goes on admitting after versioning was suspended, and every write of those rows
// makes the "null" version (which MinIO answers without a version id; only the listing names
// it). Once versioning is enabled again, cleanup must forget such a row when its retention
// ends and give its slot back, like any other.
func TestRowsWrittenWhileVersioningWasSuspendedAreForgotten(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	bucket := ownBucket(w)
	worker, _ := w.handle("worker", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	w.admit(worker, w.delivery(time.Time{}), ledger.Admitted) // a permanent row beside it, so an understatement shows
	if err := minioRaw.SuspendVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, worker, w.saved(worker, d, "verdict"))
	if err := minioRaw.EnableVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	row, err := worker.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute))
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		st, _ := cleaner.Stats(w.ctx)
		t.Fatalf("cleanup removed %d rows, want the one written while versioning was suspended, its retention over by %s; "+
			"%d rows, capacity records %d", len(rep.Removed), w.store.Now().Sub(row.RetainUntil), st.Rows, st.CapacityUsed)
	}
	if st := w.exact(cleaner); st.Rows != 1 {
		t.Fatalf("%d rows left, want the permanent one", st.Rows)
	}
	w.cleanLap(cleaner)
	w.exact(cleaner)
}

// TestEverythingWrittenWhileVersioningWasSuspendedIsForgotten: while versioning is suspended,
// a warm handle's writes make "null" versions of every object it writes: a finished row, its
// end-time index entry, the subject record its verdict is posted under, and the void of an
// admission refused Full. Once versioning is enabled again, cleanup removes each of them when
// it is due (by the version id "null", which MinIO's reads do not name), and the capacity
// shards count exactly the rows left.
func TestEverythingWrittenWhileVersioningWasSuspendedIsForgotten(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	bucket := ownBucket(w)
	worker, _ := w.handle("worker", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	w.admit(worker, w.delivery(time.Time{}), ledger.Admitted) // a permanent row beside them, so an understatement shows
	if err := minioRaw.SuspendVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	d := w.delivery(w.store.Now())
	s := w.saved(worker, d, "verdict")
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("a", 40),
		Context: "amiss/verdict"}
	g, err := worker.AcquireSubject(w.ctx, ledger.SubjectRequest{Subject: subject, Order: s.Lease.Order(),
		EvaluationID: s.Lease.EvaluationID, HoldFor: 20 * time.Second, Settle: time.Minute})
	if err != nil || g.Outcome != ledger.SubjectPost {
		t.Fatalf("acquire the subject: %v %v", g.Outcome, err)
	}
	if _, err := worker.ReportSubject(w.ctx, g, ledger.PostApplied); err != nil {
		t.Fatal(err)
	}
	ledgertest.MustComplete(t, worker, s)
	full := w.delivery(time.Time{})
	w.admit(worker, full, ledger.Full)
	if err := minioRaw.EnableVersioning(w.ctx, bucket); err != nil {
		t.Fatal(err)
	}
	row, err := worker.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife), row.EventAt.Add(w.limits.SubjectHorizon())).
		Add(time.Hour))
	w.cleanLap(cleaner)
	w.cleanLap(cleaner)
	for _, under := range []string{"rows/", "ended/", "subjects/"} {
		var left []string
		for o := range minioRaw.ListObjects(w.ctx, bucket, minio.ListObjectsOptions{Prefix: w.prefix + under}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			left = append(left, strings.TrimPrefix(o.Key, w.prefix))
		}
		want := 0
		if under == "rows/" {
			want = 1 // the permanent row
		}
		if len(left) != want {
			t.Errorf("%s holds %d object(s) after cleanup, want %d: %v", under, len(left), want, left)
		}
	}
	if st := w.exact(cleaner); st.Rows != 1 {
		t.Fatalf("%d rows left, want the permanent one", st.Rows)
	}
}

// TestVersioningSuspendedDuringACleanupPassSparesWhatIsWrittenMeanwhile: a cleanup pass checks
// versioning, judges an object and its DELETE (by version id) is held in flight; versioning is
// suspended, and a write lands on the key (a "null" version, replacing nothing the pass
// judged); then the DELETE lands. The write survives: a retention lengthened over a removable
// row, or a row admitted over a void that said no row write waited on its key.
func TestVersioningSuspendedDuringACleanupPassSparesWhatIsWrittenMeanwhile(t *testing.T) {
	t.Run("RetentionLengthened", func(t *testing.T) {
		w := newWorld(t)
		bucket := ownBucket(w)
		ingress, _ := w.handle("ingress", 0, nil)
		cleaner, cleanerTr := w.handle("cleaner", 0, nil)
		d := w.delivery(w.store.Now())
		ledgertest.MustComplete(t, ingress, w.saved(ingress, d, "verdict"))
		row, err := ingress.Inspect(w.ctx, d.Key())
		if err != nil {
			t.Fatal(err)
		}
		w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Second))
		held := cleanerTr.holdNext(rowRequest(d, http.MethodDelete))
		done := make(chan error, 1)
		go func() { _, err := cleaner.Cleanup(w.ctx, ""); done <- err }()
		held.waitHeld(t)
		if err := minioRaw.SuspendVersioning(w.ctx, bucket); err != nil {
			t.Fatal(err)
		}
		resigned := d
		resigned.SignedAt = w.store.Now()
		w.admit(ingress, resigned, ledger.Duplicate) // lengthens the retention: a "null" version
		held.land(t)
		<-done
		if err := minioRaw.EnableVersioning(w.ctx, bucket); err != nil {
			t.Fatal(err)
		}
		w.admit(ingress, resigned, ledger.Duplicate)
		w.cleanLap(cleaner)
		w.admit(ingress, resigned, ledger.Duplicate)
		w.exact(cleaner)
	})
	t.Run("VoidTakenOver", func(t *testing.T) {
		w := newWorld(t)
		w.shards = 1
		w.limits.RecordCap = 1
		bucket := ownBucket(w)
		ingress, _ := w.handle("ingress", 0, nil)
		cleaner, cleanerTr := w.handle("cleaner", 0, nil)
		w.slotWithoutRow()
		d := w.delivery(time.Time{})
		w.admit(ingress, d, ledger.Full) // a void that says no row write waits on the key
		held := cleanerTr.holdNext(rowRequest(d, http.MethodDelete))
		done := make(chan error, 1)
		go func() { _, err := cleaner.Cleanup(w.ctx, ""); done <- err }()
		held.waitHeld(t)
		if err := minioRaw.SuspendVersioning(w.ctx, bucket); err != nil {
			t.Fatal(err)
		}
		w.store.Advance(3 * time.Minute) // the dead admission's slot is given back
		w.admit(ingress, d, ledger.Admitted)
		held.land(t)
		<-done
		if err := minioRaw.EnableVersioning(w.ctx, bucket); err != nil {
			t.Fatal(err)
		}
		if row, err := ingress.Inspect(w.ctx, d.Key()); err != nil || row.State != ledger.StatePending {
			t.Fatalf("the row admitted over the void while versioning was suspended, after the void's DELETE landed: %v %v",
				row.State, err)
		}
		w.cleanLap(cleaner)
		if st := w.exact(cleaner); st.Rows != 1 {
			t.Fatalf("%d rows, want 1", st.Rows)
		}
	})
}
