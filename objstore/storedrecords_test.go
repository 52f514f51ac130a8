package objstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// A record read back is checked as stored: one that is not a record this ledger can have written
// under the object's name is damage (ledger.ErrCorrupt naming the object), whichever of its
// fields says so, and cleanup reports it and goes on.

// getRaw reads the object name of the world's prefix as it is stored.
func (w *world) getRaw(name string) []byte {
	w.t.Helper()
	obj, err := minioRaw.GetObject(w.ctx, testBucket, w.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer obj.Close()
	body, err := io.ReadAll(obj)
	if err != nil {
		w.t.Fatal(err)
	}
	return body
}

// putRaw stores body as the object name of the world's prefix, as another writer would.
func (w *world) putRaw(name string, body []byte) {
	w.t.Helper()
	if _, err := minioRaw.PutObject(w.ctx, testBucket, w.prefix+name, bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// publishedSubject saves a verdict of a new delivery under l and asks to publish it to subject s,
// answering the subject record as stored.
func (w *world) publishedSubject(l ledger.Ledger, s ledger.Subject) ledger.SubjectRecord {
	w.t.Helper()
	st := w.saved(l, w.delivery(time.Time{}), "verdict")
	q := ledger.SubjectRequest{Subject: s, Order: st.Lease.Order(), EvaluationID: st.Lease.EvaluationID,
		HoldFor: time.Minute, Settle: 10 * time.Second}
	if g, err := l.AcquireSubject(w.ctx, q); err != nil || g.Outcome != ledger.SubjectPost {
		w.t.Fatalf("acquire: %+v %v", g, err)
	}
	rec, err := l.InspectSubject(w.ctx, s.Key())
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// A subject record whose subject no request could name (a name missing, or names over the
// ceiling) is damage, not a refused request: cleanup reports it and goes on.
func TestASubjectRecordOfASubjectNoRequestCouldNameIsDamage(t *testing.T) {
	for name, spoil := range map[string]func(*ledger.Subject){
		"no context":           func(s *ledger.Subject) { s.Context = "" },
		"names over the limit": func(s *ledger.Subject) { s.Context = strings.Repeat("c", ledger.MaxSubjectName) },
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			l, _ := w.handle("runner", 0, nil)
			s := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("a", 40),
				Context: "amiss"}
			bad := w.publishedSubject(l, s)
			spoil(&bad.Subject)
			bad.Key = bad.Subject.Key()
			body, err := objstore.EncodeSubjectForTest(bad)
			if err != nil {
				t.Fatal(err)
			}
			obj := w.prefix + objstore.SubjectName(bad.Key)
			w.putRaw(objstore.SubjectName(bad.Key), body)
			if _, err := l.InspectSubject(w.ctx, bad.Key); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), obj) {
				t.Fatalf("inspect: %v, want ErrCorrupt naming %s", err, obj)
			}
			if rep := w.cleanLap(l); len(rep.Damaged) != 1 || rep.Damaged[0].Name != obj {
				t.Fatalf("cleanup reports %+v damaged, want %s", rep.Damaged, obj)
			}
		})
	}
}

// A row holding a report in a state that keeps none is damage: an unsaved row has none yet, and
// a done or superseded one dropped it.
func TestARowHoldingAReportItDoesNotKeepIsDamage(t *testing.T) {
	for _, situation := range []string{"pending", "done"} {
		t.Run(situation, func(t *testing.T) {
			w := newWorld(t)
			l, _ := w.handle("runner", 0, nil)
			d := w.delivery(time.Time{})
			if situation == "pending" {
				w.admit(l, d, ledger.Admitted)
			} else {
				ledgertest.MustComplete(t, l, w.saved(l, d, "verdict"))
			}
			name := objstore.RowName(d.Key())
			body, err := objstore.RewriteRowForTest(w.getRaw(name), func(_ *ledger.Row, report *[]byte) {
				*report = []byte("verdict")
			})
			if err != nil {
				t.Fatal(err)
			}
			w.putRaw(name, body)
			reader, _ := w.handle("reader", 0, nil)
			obj := w.prefix + name
			if _, err := reader.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), obj) {
				t.Fatalf("inspect a %s row holding a report: %v, want ErrCorrupt naming %s", situation, err, obj)
			}
			if rep := w.cleanLap(reader); len(rep.Damaged) != 1 || rep.Damaged[0].Name != obj {
				t.Fatalf("cleanup reports %+v damaged, want %s", rep.Damaged, obj)
			}
		})
	}
}

// A record's object copied under another key's name (a hand-made restore, a copy to the wrong
// name) is damage: the record is not the key's. Cleanup reports it and goes on.
func TestARecordFiledUnderAnotherKeyIsDamage(t *testing.T) {
	w := newWorld(t)
	l, _ := w.handle("runner", 0, nil)
	s := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("b", 40),
		Context: "amiss"}
	rec := w.publishedSubject(l, s)

	other := s
	other.SHA = strings.Repeat("c", 40)
	obj := w.prefix + objstore.SubjectName(other.Key())
	w.putRaw(objstore.SubjectName(other.Key()), w.getRaw(objstore.SubjectName(rec.Key)))
	if _, err := l.InspectSubject(w.ctx, other.Key()); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), obj) {
		t.Fatalf("inspect a subject record filed under another key: %v, want ErrCorrupt naming %s", err, obj)
	}
	if rep := w.cleanLap(l); len(rep.Damaged) != 1 || rep.Damaged[0].Name != obj {
		t.Fatalf("cleanup reports %+v damaged, want %s", rep.Damaged, obj)
	}
	if err := minioRaw.RemoveObject(w.ctx, testBucket, obj, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	stranger := w.delivery(time.Time{}).Key() // never admitted
	obj = w.prefix + objstore.RowName(stranger)
	w.putRaw(objstore.RowName(stranger), w.getRaw(objstore.RowName(rec.Newest.Key)))
	if _, err := l.Inspect(w.ctx, stranger); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), obj) {
		t.Fatalf("inspect a row filed under another key: %v, want ErrCorrupt naming %s", err, obj)
	}
}

// A row naming a capacity shard the root does not have is damage, named as such: its slot could
// never be released, and a cleanup that judged it removable would otherwise fail on the shard.
func TestARowNamingACapacityShardTheRootLacksIsDamage(t *testing.T) {
	for _, shard := range []int{-1, 999} {
		t.Run(fmt.Sprint(shard), func(t *testing.T) {
			w := newWorld(t)
			l, _ := w.handle("runner", 0, nil)
			d := w.delivery(time.Time{})
			ledgertest.MustComplete(t, l, w.saved(l, d, "verdict"))
			name := objstore.RowName(d.Key())
			body, err := objstore.SetRowShardForTest(w.getRaw(name), shard)
			if err != nil {
				t.Fatal(err)
			}
			w.putRaw(name, body)
			reader, _ := w.handle("reader", 0, nil)
			obj := w.prefix + name
			if _, err := reader.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), obj) ||
				!strings.Contains(err.Error(), "capacity shard") {
				t.Fatalf("inspect a row naming shard %d: %v, want ErrCorrupt naming %s and its capacity shard", shard, err, obj)
			}
			if rep := w.cleanLap(reader); len(rep.Damaged) != 1 || rep.Damaged[0].Name != obj {
				t.Fatalf("cleanup reports %+v damaged, want %s", rep.Damaged, obj)
			}
		})
	}
}
