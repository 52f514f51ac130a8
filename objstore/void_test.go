package objstore_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// Void reservations: an admission that ended without a row leaves a void at its key. A void
// that a row write may still wait on (its admission took a slot) stays until a later
// admission of the key takes it over; only a void that says no row write can wait on the key
// (NoRowWrite) is removed by cleanup, at once. These tests land late copies of reservation,
// void and row writes, and late DELETEs of voids, around those removals and takeovers.

// rowObject answers the body of what d's key holds, or nil when it holds nothing.
func (w *world) rowObject(d ledger.Delivery) []byte {
	w.t.Helper()
	o, err := minioRaw.GetObject(w.ctx, w.bucket, w.prefix+objstore.RowName(d.Key()), minio.GetObjectOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	defer o.Close()
	body, err := io.ReadAll(o)
	if err != nil {
		if errors.As(err, new(minio.ErrorResponse)) && minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil
		}
		w.t.Fatalf("read %s: %v", objstore.RowName(d.Key()), err)
	}
	return body
}

// slotWithoutRow takes a slot for a new delivery through a handle that dies before it writes
// the row: the slot stays pending (an admission in flight) until its entry is past the grace.
func (w *world) slotWithoutRow() {
	w.t.Helper()
	l, tr := w.handle("ingress-dies", 0, nil)
	tr.crash(3) // the reservation, cleanup's look at the key and the shard write land; the row write and all after fail
	if a, err := l.Admit(w.ctx, w.delivery(time.Time{})); err == nil {
		w.t.Fatalf("an admission whose row write failed answered %v", a.Outcome)
	}
}

func isVoid(body []byte) bool { return bytes.Contains(body, []byte(`"void":true`)) }

// TestTakeoverOfAVoidWhoseRowWriteIsHeldNeverEmptiesTheKey: a void whose admission took a slot
// and sent a row write is taken over by a retry that is refused Full. The retry's own void
// must not say that no row write waits on the key: removed, it would let late copies of the
// first admission's reservation and row write land a row that no slot counts. Interleaving
// (cap 1, one shard):
//
//	ingress   reservation R (its first attempt held in the network, a retry lands), a slot,
//	          the row write over R held in the network: the admission fails
//	+3m       cleanup: the entry is past the grace: R is voided, the slot given back
//	          another delivery takes the slot; a retry of the first takes the void over and
//	          is refused Full: its void stays
//	+1h       cleanup passes, one of them on a node a day ahead
//	          the held reservation attempt and the held row write land: both must be refused
func TestTakeoverOfAVoidWhoseRowWriteIsHeldNeverEmptiesTheKey(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 1
	ingress, capt := w.captureHandle("ingress", nil)
	retry, _ := w.handle("ingress-retry", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	ahead, aheadTr := w.handle("cleaner-ahead", 0, nil)

	d := w.delivery(time.Time{})
	res := capt.add(both(rowRequest(d, http.MethodPut), objectKind("reservation")), 1)
	rowPut := capt.add(both(rowRequest(d, http.MethodPut), objectKind("row")), -1)
	if a, err := ingress.Admit(w.ctx, d); err == nil {
		t.Fatalf("admit succeeded (%v) although every row write was held", a.Outcome)
	}
	if len(res.got) != 1 || len(rowPut.got) == 0 {
		t.Fatalf("held %d reservation and %d row writes", len(res.got), len(rowPut.got))
	}
	w.store.Advance(3 * time.Minute)
	w.cleanLap(cleaner)
	if !isVoid(w.rowObject(d)) {
		t.Fatalf("the recount did not void the reservation: %s", w.rowObject(d))
	}
	w.admit(retry, w.delivery(time.Time{}), ledger.Admitted)
	w.admit(retry, d, ledger.Full)

	w.store.Advance(time.Hour)
	w.cleanLap(cleaner)
	aheadTr.setStoreClock(offsetClock{w.store, 24 * time.Hour})
	w.cleanLap(ahead)
	aheadTr.setStoreClock(w.store)
	if body := w.rowObject(d); !isVoid(body) {
		t.Fatalf("the key of an admission whose row write may still land holds %q, want its void", body)
	}
	if code, msg := res.deliver(t, 0); code/100 == 2 {
		t.Fatalf("the held reservation attempt landed: %d %s", code, msg)
	}
	if code, msg := rowPut.deliver(t, 0); code/100 == 2 {
		t.Fatalf("the held row write landed: %d %s", code, msg)
	}
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	if st := w.exact(cleaner); st.Rows != 1 {
		t.Fatalf("%d rows, want the other delivery's", st.Rows)
	}
	w.admit(cleaner, w.delivery(time.Time{}), ledger.Full)
}

// TestHeldDeleteOfAVoidSparesTheAdmissionThatTookItsKeyOver: cleanup removes a void that says
// no row write waits on its key, by version. Its DELETEs are held in flight while a retry of
// the delivery takes the void over, takes a slot (given back by a dead admission's entry) and
// creates its row; then they land. They name the void's versions, so the row survives and
// keeps its slot.
func TestHeldDeleteOfAVoidSparesTheAdmissionThatTookItsKeyOver(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 1
	ingress, _ := w.handle("ingress", 0, nil)
	cleaner, cleanerTr := w.handle("cleaner", 0, nil)

	w.slotWithoutRow()
	d := w.delivery(time.Time{})
	w.admit(ingress, d, ledger.Full)
	if body := w.rowObject(d); !isVoid(body) || !bytes.Contains(body, []byte(`"no_row_write":true`)) {
		t.Fatalf("an admission refused Full before it took a slot left %q, want a void that says no row write waits", body)
	}
	held := cleanerTr.holdNext(rowRequest(d, http.MethodDelete))
	done := make(chan error, 1)
	go func() { _, err := cleaner.Cleanup(w.ctx, ""); done <- err }()
	held.waitHeld(t)

	w.store.Advance(3 * time.Minute) // the dead admission's entry is past the grace
	w.admit(ingress, d, ledger.Admitted)
	if err := held.land(t); err != nil {
		t.Logf("held DELETE: %v", err)
	}
	if err := <-done; err != nil {
		t.Logf("cleanup: %v", err)
	}
	row, err := ingress.Inspect(w.ctx, d.Key())
	if err != nil || row.State != ledger.StatePending {
		t.Fatalf("the row of the admission that took the void over, after the void's DELETEs landed: %v %v, want pending", row.State, err)
	}
	w.cleanLap(cleaner)
	if st := w.exact(cleaner); st.Rows != 1 {
		t.Fatalf("%d rows, want 1", st.Rows)
	}
}

// TestLateCopiesOfAnAdmissionRefusedFullLeaveNoSlotWrong: an admission refused Full (it took no
// slot and sent no row write) leaves a void that cleanup removes at once. Copies of its
// reservation PUT and of its void PUT, held in the network, then land on the empty key, in
// either order. Whatever they recreate, the delivery is admitted once capacity frees, and the
// capacity shards count exactly the rows.
func TestLateCopiesOfAnAdmissionRefusedFullLeaveNoSlotWrong(t *testing.T) {
	for _, order := range []string{"ReservationThenVoid", "VoidThenReservation"} {
		t.Run(order, func(t *testing.T) {
			w := newWorld(t)
			w.shards = 1
			w.limits.RecordCap = 1
			ingress, capt := w.captureHandle("ingress", nil)
			retry, _ := w.handle("ingress-retry", 0, nil)
			cleaner, _ := w.handle("cleaner", 0, nil)

			w.slotWithoutRow()
			d := w.delivery(time.Time{})
			reservation := capt.add(func(r *http.Request, body []byte) bool {
				return rowRequest(d, http.MethodPut)(r, body) && objectKind("reservation")(r, body) && !isVoid(body)
			}, 1)
			void := capt.add(func(r *http.Request, body []byte) bool {
				return rowRequest(d, http.MethodPut)(r, body) && isVoid(body)
			}, 1)
			w.admit(ingress, d, ledger.Full)
			if len(reservation.got) != 1 || len(void.got) != 1 {
				t.Fatalf("held %d reservation and %d void writes", len(reservation.got), len(void.got))
			}
			w.cleanLap(cleaner)
			if body := w.rowObject(d); body != nil {
				t.Fatalf("cleanup left %q at the key of an admission that took no slot", body)
			}
			first, second := reservation, void
			if order == "VoidThenReservation" {
				first, second = void, reservation
			}
			code1, _ := first.deliver(t, 0)
			code2, _ := second.deliver(t, 0)
			t.Logf("late copies: %d, %d; the key holds %s", code1, code2, w.rowObject(d))
			w.cleanLap(cleaner)
			w.store.Advance(3 * time.Minute) // every pending entry past the grace
			w.cleanLap(cleaner)
			w.exact(cleaner)
			w.admit(retry, d, ledger.Admitted)
			w.cleanLap(cleaner)
			if st := w.exact(cleaner); st.Rows != 1 {
				t.Fatalf("%d rows, want 1", st.Rows)
			}
			w.admit(retry, w.delivery(time.Time{}), ledger.Full)
		})
	}
}

// TestVoidsOfRacingAdmissionsBlockNothing: two admissions of one delivery race while the ledger
// is full: one takes the other's reservation over, both are refused Full, and the void left
// may have to stay (whether the other sent a row write is not known to the one that voids).
// Voids hold no slot: other deliveries are admitted as soon as capacity frees, Full is
// answered only when the cap is in use, verify counts the void as a reservation, and a retry
// of the delivery takes it over.
func TestVoidsOfRacingAdmissionsBlockNothing(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	first, firstTr := w.handle("ingress-first", 0, nil)
	second, _ := w.handle("ingress-second", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	w.slotWithoutRow()
	w.admit(second, w.delivery(time.Time{}), ledger.Admitted)
	const races = 3
	var raced []ledger.Delivery
	for range races {
		d := w.delivery(time.Time{})
		raced = append(raced, d)
		// The first admission's reservation lands; its read of the capacity shard is held
		// while the second takes its reservation over and is refused Full.
		held := firstTr.holdNext(func(r *http.Request, _ []byte) bool {
			return r.Method == http.MethodGet && bytes.Contains([]byte(r.URL.Path), []byte("/capacity/"))
		})
		done := make(chan admitResult, 1)
		go func() { a, err := first.Admit(w.ctx, d); done <- admitResult{a, err} }()
		held.waitHeld(t)
		w.admit(second, d, ledger.Full)
		held.land(t)
		if r := <-done; r.err != nil || r.a.Outcome != ledger.Full {
			t.Fatalf("the first of two racing admissions while full: %v %v, want Full", r.a.Outcome, r.err)
		}
	}
	w.cleanLap(cleaner)
	v, err := cleaner.Verify(w.ctx, nil)
	if err != nil || !v.OK() || v.Rows != 1 || v.CapacityUsed != 2 {
		t.Fatalf("verify after %d races: %+v %v", races, v, err)
	}
	t.Logf("after %d races while full: %d reservation(s) kept", races, v.Reservations)
	w.store.Advance(3 * time.Minute) // the dead admission's entry is past the grace: one slot frees
	w.admit(first, raced[0], ledger.Admitted)
	w.admit(second, w.delivery(time.Time{}), ledger.Full)
	w.cleanLap(cleaner)
	if st := w.exact(cleaner); st.Rows != 2 {
		t.Fatalf("%d rows, want 2", st.Rows)
	}
}
