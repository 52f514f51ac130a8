package runner_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// newWorldWithSubject is newWorld with the row's subject given as raw bytes (one the ingress
// wrote and the runner cannot read back).
func newWorldWithSubject(t *testing.T, subj []byte) *world {
	t.Helper()
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: clock, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: "i", BodyDigest: ledger.SumBody([]byte("b"))},
		Subject: subj}
	if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	return &world{l: l, clock: clock, pub: &recorder{}, msg: queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}}
}

// slowAbandon is a ledger whose Abandon answer arrives late (the write has landed; its answer
// is slow to come back, as a remote ledger's can be), and which counts the renewals sent once
// the row was abandoned and once Process returned.
type slowAbandon struct {
	ledger.Ledger
	abandoned     atomic.Bool
	returned      atomic.Bool
	renewsAfter   atomic.Int32 // renewals sent after the Abandon landed
	renewsAfterPr atomic.Int32 // renewals sent after Process returned
}

func (s *slowAbandon) Renew(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	if s.abandoned.Load() {
		s.renewsAfter.Add(1)
	}
	if s.returned.Load() {
		s.renewsAfterPr.Add(1)
	}
	return s.Ledger.Renew(ctx, l, d)
}

func (s *slowAbandon) Abandon(ctx context.Context, st ledger.Staged, reason string) error {
	err := s.Ledger.Abandon(ctx, st, reason)
	s.abandoned.Store(true)
	time.Sleep(60 * time.Millisecond) // the answer is slow; renewals (every 5 ms) go on
	return err
}

// TestAnUndecodableSubjectCountsNoLostLease: a row whose subject cannot be read back gets an
// error verdict, saved and then abandoned (publishStaged cannot decode the subject either).
// Since 7192351 the execute path hands saveAndPublish the running keeper (before: nil), and
// publishStaged abandons before it halts the keeper: a renewal of the publishing lease that
// lands after the Abandon is refused (the row has no owner) and counted as a lost lease, and
// the work's context cancelled, on a clean, finished delivery. The same rule as
// TestARenewalAfterCompleteCountsNoLostLease: the keeper must stop before the ledger hears the
// outcome.
func TestAnUndecodableSubjectCountsNoLostLease(t *testing.T) {
	w := newWorldWithSubject(t, []byte(`[1]`)) // JSON, but not a subject
	abandonedUnderItsLease(t, w, "a delivery whose subject does not decode")
}

// TestAnUndecodableSavedReportCountsNoLostLease: the same in the publish phase: a saved report
// that does not decode is abandoned by publishStaged while the keeper (started in publish
// before the route build) still renews; a renewal after the Abandon counts a lost lease.
func TestAnUndecodableSavedReportCountsNoLostLease(t *testing.T) {
	w := newWorld(t)
	stageSaved(t, w, `[1]`)
	abandonedUnderItsLease(t, w, "a saved report that does not decode")
}

// abandonedUnderItsLease processes w's message, which ends abandoned, through a ledger whose
// Abandon answers late, and checks that no lease was counted lost and no renewal outlived
// the attempt.
func abandonedUnderItsLease(t *testing.T, w *world, what string) {
	t.Helper()
	var m counter
	sl := &slowAbandon{Ledger: w.l}
	r := w.runner("a", verdict(evaluate.Success, "never published"))
	r.Metrics = &m
	r.Ledger = sl
	res, err := r.Process(context.Background(), w.msg)
	sl.returned.Store(true)
	if err != nil || !res.Done {
		t.Fatalf("%s: process: %+v %v", what, res, err)
	}
	if st := w.state(t); st != ledger.StateAbandoned {
		t.Fatalf("%s: row %v, want abandoned", what, st)
	}
	time.Sleep(30 * time.Millisecond)
	if n := sl.renewsAfterPr.Load(); n != 0 {
		t.Errorf("%s: %d renewals sent after Process returned: the keeper outlived the attempt", what, n)
	}
	if n := m.get("lease_lost"); n != 0 {
		t.Fatalf("%s: lease_lost counted %d on a delivery abandoned under its own lease "+
			"(%d renewals sent after the Abandon landed): the keeper ran on past the ledger's answer", what, n, sl.renewsAfter.Load())
	}
}
