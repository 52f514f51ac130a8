package objstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// A decision that asks for a write the store does not know how to make (a Write value it does
// not define, or one meant for the other kind of record) is refused with ErrInvalid and writes
// nothing: answering it as if nothing were to be written would tell the caller that a change
// it decided on was kept. It is refused whether the store decided on its cached copy (the
// record this handle last wrote) or on a fresh read.
func TestADecisionAskingAWriteTheStoreDoesNotKnowIsRefused(t *testing.T) {
	w := newWorld(t)
	l, _ := w.handle("runner", 0, nil)
	store := objstore.StoreForTest(l)
	d := w.delivery(w.store.Now())
	staged := w.saved(l, d, "verdict")
	const reason = "changed by a decision whose write the store does not know"

	for _, write := range []ledger.Write{ledger.WriteEnd + 1, -1} {
		for _, cached := range []bool{true, false} {
			if !cached {
				l.Close()
				l, _ = w.handle("runner", 0, nil) // a new handle: nothing cached
				store = objstore.StoreForTest(l)
			}
			err := store.UpdateRow(w.ctx, d.Key(), false, func(row *ledger.StoredRow, _ time.Time) (ledger.Write, error) {
				row.Row.Reason = reason
				return write, nil
			})
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("a row decision asking write %d (cached copy %v): %v, want ErrInvalid", write, cached, err)
			}
			if r, err := l.Inspect(w.ctx, d.Key()); err != nil || r.State != ledger.StateSaved || r.Reason != "" {
				t.Fatalf("the row after a refused write %d: %v %q %v", write, r.State, r.Reason, err)
			}
		}
	}

	s := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("e", 40),
		Context: "amiss"}
	// A subject record is written as a change that may be lost with the host, or durably:
	// nothing else is a write of it (a row's end, an unknown value).
	for _, write := range []ledger.Write{ledger.WriteEnd, ledger.WriteEnd + 1} {
		err := store.UpdateSubject(w.ctx, s.Key(), true, func(rec *ledger.SubjectRecord, exists bool, _, now time.Time) (ledger.Write, error) {
			if !exists {
				*rec = ledger.NewSubjectRecord(s, now)
			}
			rec.Newest, rec.NewestEvaluation = ledger.Order{Key: d.Key(), AdmittedAt: now}, "eval"
			return write, nil
		})
		if !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("a subject decision asking write %d on no record: %v, want ErrInvalid", write, err)
		}
		if _, err := l.InspectSubject(w.ctx, s.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
			t.Fatalf("the subject after a refused create asking write %d: %v, want no record", write, err)
		}
	}
	// On a record this handle wrote last (its cached copy) too.
	g, err := l.AcquireSubject(w.ctx, ledger.SubjectRequest{Subject: s, Order: staged.Lease.Order(),
		EvaluationID: staged.Lease.EvaluationID, HoldFor: time.Minute, Settle: 10 * time.Second})
	if err != nil || g.Outcome != ledger.SubjectPost {
		t.Fatalf("acquire: %+v %v", g, err)
	}
	before, err := l.InspectSubject(w.ctx, s.Key())
	if err != nil {
		t.Fatalf("inspect subject: %v", err)
	}
	err = store.UpdateSubject(w.ctx, s.Key(), false, func(rec *ledger.SubjectRecord, exists bool, _, _ time.Time) (ledger.Write, error) {
		rec.Fence++
		return ledger.WriteEnd + 1, nil
	})
	if !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a subject decision asking an unknown write on the record: %v, want ErrInvalid", err)
	}
	if after, err := l.InspectSubject(w.ctx, s.Key()); err != nil || after.Fence != before.Fence {
		t.Fatalf("the subject record after a refused write: fence %d (was %d) %v", after.Fence, before.Fence, err)
	}
	if a, err := l.ReportSubject(w.ctx, g, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
		t.Fatalf("the grant reports after the refused write: %+v %v", a, err)
	}
	if err := l.Complete(w.ctx, staged); err != nil {
		t.Fatalf("complete: %v", err)
	}
}
