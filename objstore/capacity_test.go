package objstore_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

// Capacity: the shards count exactly the rows and the admissions in flight, Full is answered
// only when the whole cap is in use, a slot is released once per row removed, and an
// admission's requests stay bounded whatever the traffic.

// TestAdmissionOutrunByItsRetryGivesItsSlotBack: two admissions of one delivery (a
// sender's retry) race; the loser's pending entry is written after the winner took its key
// over, and nobody recounts it until the grace is over. Interleaving (cap 2, one shard):
//
//	ingress-slow: reservation R1 at K; its read of the capacity shard is held
//	ingress-fast: takes K over (R2), takes a slot, creates the row: Admitted
//	ingress-slow: the read lands; it adds its own pending entry (slots used 2), its row
//	       write over R1 loses, and it answers Pending. Its admission is over.
//	another delivery: Full, though one row exists, the cap is 2, and no admission is in
//	       flight (invariant 11: Full only when the whole cap is in use).
func TestAdmissionOutrunByItsRetryGivesItsSlotBack(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	slow, slowTr := w.handle("ingress-slow", 0, nil)
	fast, _ := w.handle("ingress-fast", 0, nil)

	d := w.delivery(time.Time{})
	held := slowTr.holdNext(func(r *http.Request, _ []byte) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/capacity/00.json")
	})
	done := make(chan admitResult, 1)
	go func() { a, err := slow.Admit(w.ctx, d); done <- admitResult{a, err} }()
	held.waitHeld(t)
	w.admit(fast, d, ledger.Admitted)
	if err := held.land(t); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.a.Outcome != ledger.Pending {
		t.Fatalf("the slow admission answered %v %v, want pending", res.a.Outcome, res.err)
	}
	st, err := fast.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := w.delivery(time.Time{})
	a, err := fast.Admit(w.ctx, other)
	if err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("another delivery answered %v %v with %d row(s) under a cap of %d (capacity records %d) and no "+
			"admission in flight: Full while the cap is not in use", a.Outcome, err, st.Rows, w.limits.RecordCap, st.CapacityUsed)
	}
}

// TestSlotIsReleasedOnceForTwoIndexEntries: Complete writes its index entry, then fails to
// write the row; a re-signed retry lengthens retention; Complete retried writes a second entry.
// Cleanup past both ends must release the row's slot once: capacity stays exact.
func TestSlotIsReleasedOnceForTwoIndexEntries(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	l, tr := w.handle("worker", 0, nil)

	other := w.delivery(time.Time{}) // a permanent row beside it, so an understatement shows
	w.admit(l, other, ledger.Admitted)
	d := w.delivery(w.store.Now())
	s := w.saved(l, d, "verdict")
	failing := rowWrite(d, ledger.StateDone)
	tr.setRule(func(r *http.Request) fault {
		body, _ := peekBody(r)
		if failing(r, body) {
			return failBefore
		}
		return pass
	})
	if err := l.Complete(w.ctx, s); err == nil {
		t.Fatalf("complete succeeded although its row write failed")
	}
	tr.setRule(nil)
	w.store.Advance(time.Minute)
	resigned := d
	resigned.SignedAt = w.store.Now()
	w.admit(l, resigned, ledger.Pending)
	ledgertest.MustComplete(t, l, s)

	row, _ := l.Inspect(w.ctx, d.Key())
	w.store.Set(row.RetainUntil.Add(time.Second))
	rep := w.cleanLap(l)
	if len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	if st := w.exact(l); st.Rows != 1 {
		t.Fatalf("%d rows left, want the permanent one", st.Rows)
	}
}

// TestAdmissionRequestsStayBoundedAfterABurst: a successful admission leaves its
// pending entry in the shard; nobody recounts it until it is past the grace, and then the next
// admission that touches the shard judges every such entry, one GET of its key each (up to
// maxPending, 512, per shard). The requests of one admission then grow with the number of
// admissions of the last minutes, not bounded by a constant (invariant 10: admission issues a
// bounded number of object operations; the documented count is 5).
func TestAdmissionRequestsStayBoundedAfterABurst(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	l, tr := w.handle("ingress", 0, nil)
	const burst = 60
	for range burst {
		w.admit(l, w.delivery(time.Time{}), ledger.Admitted)
	}
	w.store.Advance(3 * time.Minute) // every entry of the burst is past the grace
	tr.count.reset()
	w.admit(l, w.delivery(time.Time{}), ledger.Admitted)
	if ops, _ := tr.count.snapshot(); ops > 5+4 {
		t.Fatalf("one admission after a burst of %d made %d requests (%v); uncontended it makes 5, and judges at most 4 entries", burst, ops, tr.count.kinds())
	}
}

// TestFullAnswerReadsABoundedNumberOfPendingEntries: docs/s3-ledger.md: "An admission judges at most
// four pending entries of others (one read each), so its requests stay bounded under any
// traffic". An admission that finds every shard full recounts every shard thoroughly before it
// answers Full: it reads the key of every pending entry of every shard, that is of every
// admission of the last minutes (up to maxPending, 512, per shard). Here a burst of 64
// admissions fills a cap of 64 (4 shards) and the next admission makes one GET per admission
// of the burst. (Progress, invariant 10; not a wrong answer.)
func TestFullAnswerReadsABoundedNumberOfPendingEntries(t *testing.T) {
	w := newWorld(t)
	w.limits.RecordCap = 64
	l, tr := w.handle("ingress", 0, nil)
	for range 64 {
		w.admit(l, w.delivery(time.Time{}), ledger.Admitted)
	}
	tr.count.reset()
	w.admit(l, w.delivery(time.Time{}), ledger.Full)
	kinds := tr.count.kinds()
	// Uncontended: the reservation, each shard read twice (budgeted, then thorough), the
	// void, plus the four entries the budget allows.
	if bound := 2 + 2*w.shards + 4; kinds["GET"] > bound {
		t.Fatalf("one admission answered Full after a burst of 64 made %d GETs (%v), more than the %d a budget of four allows",
			kinds["GET"], kinds, bound)
	}
}
