package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// The tests in this file each hold a request in flight, run other handles meanwhile and let
// the held request land late, or give handles clocks minutes apart: the ways the S3 ledger
// was broken by an adversary. Each failed on the ledger before versioned deletes, reservations
// and the store's clock.

// offsetClock is a host's clock: another clock moved by a fixed skew.
type offsetClock struct {
	base ledger.Clock
	skew time.Duration
}

func (c offsetClock) Now() time.Time { return c.base.Now().Add(c.skew) }

// world is one ledger prefix with a store whose clock the test moves (the Date of every
// answer), and handles on it, each with its own transport and a host clock of its own.
type world struct {
	t      *testing.T
	ctx    context.Context
	prefix string
	store  *ledger.ManualClock
	limits ledger.Limits
	shards int
	seq    int
}

func newWorld(t *testing.T) *world {
	requireMinIO(t)
	t.Parallel()
	return &world{t: t, ctx: context.Background(), prefix: newPrefix(t), store: ledger.NewManualClock(ledgertest.Epoch),
		limits: ledgertest.Limits(), shards: 4}
}

// handle opens a handle whose host clock is skew away from the store's.
func (w *world) handle(name string, skew time.Duration, adjust func(*objstore.Config)) (*objstore.Ledger, *transport) {
	w.t.Helper()
	tr := newTransport(&counter{})
	tr.setStoreClock(w.store)
	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 2 * time.Minute},
		Retryer: fastRetryer, DisableClockSkewCorrection: true})
	if err != nil {
		w.t.Fatal(err)
	}
	cfg := objstore.Config{Client: client, Bucket: testBucket, Prefix: w.prefix, Limits: w.limits,
		Clock: offsetClock{w.store, skew}, Create: true, Shards: w.shards, Owner: name}
	if adjust != nil {
		adjust(&cfg)
	}
	l, err := objstore.Open(w.ctx, cfg)
	if err != nil {
		w.t.Fatalf("open %s: %v", name, err)
	}
	return l, tr
}

// delivery makes a new delivery signed at signedAt (zero: permanent).
func (w *world) delivery(signedAt time.Time) ledger.Delivery {
	w.seq++
	body := fmt.Appendf(nil, `{"safety":%d}`, w.seq)
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{Binding: ledger.Binding{Route: "safety", Scheme: scheme, Identity: fmt.Sprintf("%s-%d", w.prefix, w.seq),
		BodyDigest: ledger.SumBody(body)}, Subject: body, SignedAt: signedAt}
}

func (w *world) admit(l ledger.Ledger, d ledger.Delivery, want ledger.AdmitOutcome) {
	w.t.Helper()
	a, err := l.Admit(w.ctx, d)
	if err != nil || a.Outcome != want {
		w.t.Fatalf("admit %s: %v %v, want %v", d.Binding.Identity, a.Outcome, err, want)
	}
}

// saved admits d and brings it to saved under l, returning the staged result.
func (w *world) saved(l ledger.Ledger, d ledger.Delivery, report string) ledger.Staged {
	w.t.Helper()
	w.admit(l, d, ledger.Admitted)
	return ledgertest.MustSave(w.t, l, *ledgertest.MustClaim(w.t, l, d, ledger.Execute).Lease, report)
}

// cleanLap runs cleanup passes on l until a lap is done.
func (w *world) cleanLap(l ledger.Ledger) ledger.CleanupReport {
	w.t.Helper()
	var all ledger.CleanupReport
	for cur, i := ledger.Cursor(""), 0; ; i++ {
		if i > 100 {
			w.t.Fatalf("cleanup never finished a lap")
		}
		rep, err := l.Cleanup(w.ctx, cur)
		if err != nil {
			w.t.Fatalf("cleanup: %v", err)
		}
		all.Removed = append(all.Removed, rep.Removed...)
		if rep.Done {
			return all
		}
		cur = rep.Next
	}
}

// exact checks that the capacity record counts the rows stored, no more and no less.
func (w *world) exact(l ledger.Ledger) ledger.Stats {
	w.t.Helper()
	st, err := l.Stats(w.ctx)
	if err != nil {
		w.t.Fatalf("stats: %v", err)
	}
	if st.CapacityUsed != st.Rows {
		w.t.Fatalf("capacity records %d slots for %d rows (cap %d)", st.CapacityUsed, st.Rows, st.Limits.RecordCap)
	}
	return st
}

// rowRequest matches a request on the row object of d with the given method.
func rowRequest(d ledger.Delivery, method string) func(*http.Request, []byte) bool {
	name := objstore.RowName(d.Key())
	return func(r *http.Request, _ []byte) bool {
		return r.Method == method && strings.HasSuffix(r.URL.Path, "/"+name)
	}
}

// rowWrite matches the write of d's row in the given state (not a reservation of its key).
func rowWrite(d ledger.Delivery, state ledger.State) func(*http.Request, []byte) bool {
	put := rowRequest(d, http.MethodPut)
	return func(r *http.Request, body []byte) bool {
		return put(r, body) && bytes.Contains(body, []byte(`"state":"`+state.String()+`"`))
	}
}

// TestLateDeleteCannotRemoveALiveRow: a cleaner judges a row removable and its DELETE is held
// in flight; its maintenance lease ends, another cleaner finishes the batch, the same identity
// is admitted again, claimed and saved; then the held DELETE lands. The new row and its saved
// verdict must survive.
func TestLateDeleteCannotRemoveALiveRow(t *testing.T) {
	w := newWorld(t)
	lease := 5 * time.Minute
	slow, slowTr := w.handle("cleaner-slow", 0, func(c *objstore.Config) { c.MaintenanceLease = lease })
	other, _ := w.handle("cleaner-other", 0, func(c *objstore.Config) { c.MaintenanceLease = lease })
	worker, _ := w.handle("worker", 0, nil)

	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, worker, w.saved(worker, d, "first life"))
	w.store.Advance(2 * time.Hour)
	held := slowTr.holdNext(rowRequest(d, http.MethodDelete))
	slowDone := make(chan error, 1)
	go func() { _, err := slow.Cleanup(w.ctx, ""); slowDone <- err }()
	held.waitHeld(t)

	w.store.Advance(lease + time.Minute) // the slow cleaner's lease has ended
	w.cleanLap(other)
	if _, err := worker.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("the other cleaner did not finish the batch: %v", err)
	}
	again := d
	again.SignedAt = w.store.Now()
	s := w.saved(worker, again, "second life")

	held.land(t)
	<-slowDone // the slow cleaner may report its lost lease; it must not have removed anything
	if err := worker.Complete(w.ctx, s); err != nil {
		t.Fatalf("complete of the second life after the late DELETE: %v", err)
	}
	row, err := worker.Inspect(w.ctx, d.Key())
	if err != nil || row.State != ledger.StateDone || row.Report.Digest != ledger.SumBody([]byte("second life")) {
		t.Fatalf("second life after the late DELETE: %+v %v", row, err)
	}
	w.exact(worker)
}

// TestDeleteRacingRetentionExtensionLetsNoReplayIn: cleanup decides to remove a signed row and
// its DELETE is held; a re-signed retry of the same identity is answered Duplicate and
// lengthens retention; the DELETE lands. The re-signed request replayed must still be
// Duplicate, never admitted and evaluated again (invariant 9).
func TestDeleteRacingRetentionExtensionLetsNoReplayIn(t *testing.T) {
	w := newWorld(t)
	cleaner, tr := w.handle("cleaner", 0, nil)
	ingress, _ := w.handle("ingress", 0, nil)

	d := w.delivery(w.store.Now())
	ledgertest.MustComplete(t, ingress, w.saved(ingress, d, "verdict"))
	row, _ := ingress.Inspect(w.ctx, d.Key())
	w.store.Set(row.RetainUntil.Add(time.Second))
	held := tr.holdNext(rowRequest(d, http.MethodDelete))
	done := make(chan error, 1)
	go func() { _, err := cleaner.Cleanup(w.ctx, ""); done <- err }()
	held.waitHeld(t)

	resigned := d
	resigned.SignedAt = w.store.Now()
	w.admit(ingress, resigned, ledger.Duplicate)
	held.land(t)
	<-done
	w.admit(ingress, resigned, ledger.Duplicate)
	w.cleanLap(cleaner)
	w.admit(ingress, resigned, ledger.Duplicate)
	w.exact(ingress)
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

// TestHeldAdmissionCannotCreateARowWithoutASlot: an admission's row write is held past the
// pending grace; another admission settles its pending entry; then the held write lands. No
// row may exist that no slot counts: with a cap of 2, never 3 rows.
func TestHeldAdmissionCannotCreateARowWithoutASlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	grace := 2 * time.Minute
	slow, slowTr := w.handle("ingress-slow", 0, func(c *objstore.Config) { c.PendingGrace = grace })
	fast, _ := w.handle("ingress-fast", 0, func(c *objstore.Config) { c.PendingGrace = grace })

	w.admit(fast, w.delivery(time.Time{}), ledger.Admitted)
	b := w.delivery(time.Time{})
	held := slowTr.holdNext(rowWrite(b, ledger.StatePending))
	type result struct {
		a   ledger.Admission
		err error
	}
	done := make(chan result, 1)
	go func() { a, err := slow.Admit(w.ctx, b); done <- result{a, err} }()
	held.waitHeld(t)

	w.store.Advance(grace + time.Minute)
	c := w.delivery(time.Time{})
	w.admit(fast, c, ledger.Admitted)
	held.land(t)
	res := <-done
	st, err := fast.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows > 2 {
		t.Fatalf("%d rows under a cap of 2 (capacity records %d): the held admission (%v %v) made a row no slot counts",
			st.Rows, st.CapacityUsed, res.a.Outcome, res.err)
	}
	if res.err == nil && res.a.Outcome == ledger.Admitted {
		t.Fatalf("the held admission was answered Admitted although the cap was in use")
	}
	w.cleanLap(fast)
	w.exact(fast)
}

// TestDoneRowIsForgottenAfterCleanupRacedItsCompletion: cleanup runs while Complete is between
// its index entry and its row write. Once the row is done and its retention over, a later
// cleanup must still forget it and give its slot back.
func TestDoneRowIsForgottenAfterCleanupRacedItsCompletion(t *testing.T) {
	w := newWorld(t)
	l, tr := w.handle("worker", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	s := w.saved(l, d, "verdict")
	row, _ := l.Inspect(w.ctx, d.Key())
	held := tr.holdNext(rowWrite(d, ledger.StateDone))
	done := make(chan error, 1)
	go func() { done <- l.Complete(w.ctx, s) }()
	held.waitHeld(t)

	w.store.Set(row.RetainUntil.Add(time.Second))
	w.cleanLap(cleaner)
	held.land(t)
	if err := <-done; err != nil {
		t.Fatalf("complete: %v", err)
	}
	w.store.Advance(time.Minute)
	rep := w.cleanLap(cleaner)
	if len(rep.Removed) != 1 {
		t.Fatalf("the done row past its retention was not forgotten (removed %d)", len(rep.Removed))
	}
	if st := w.exact(cleaner); st.Rows != 0 {
		t.Fatalf("%d rows left", st.Rows)
	}
}

// TestIfMatchOnARemovedRowIsALostRace: a handle holds a cached copy of a row that another
// handle completed and cleanup removed. Its next write (If-Match on a key that is gone, which
// MinIO answers 404, not 412) must be settled as a lost race: the row is unknown now.
func TestIfMatchOnARemovedRowIsALostRace(t *testing.T) {
	w := newWorld(t)
	stale, _ := w.handle("stale", 0, nil)
	other, _ := w.handle("other", 0, nil)

	d := w.delivery(w.store.Now())
	s := w.saved(stale, d, "verdict")
	ledgertest.MustComplete(t, other, s)
	row, _ := other.Inspect(w.ctx, d.Key())
	w.store.Set(row.RetainUntil.Add(time.Second))
	if rep := w.cleanLap(other); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows", len(rep.Removed))
	}
	err := stale.Complete(w.ctx, s)
	if !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("complete through a stale cache of a removed row: %v, want ErrUnknownDelivery", err)
	}
	_, err = stale.Renew(w.ctx, s.Lease, time.Minute)
	if !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("renew of a removed row: %v, want ErrUnknownDelivery", err)
	}
}

// TestClientClocksDecideNothing: hosts whose clocks are minutes off decide with the store's
// time. Against the store's real Date (no test clock at all).
func TestClientClocksDecideNothing(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	open := func(prefix string, skew time.Duration) *objstore.Ledger {
		t.Helper()
		client, err := objstore.NewClient(context.Background(), objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint,
			PathStyle: true, AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Timeout: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		l, err := objstore.Open(context.Background(), objstore.Config{Client: client, Bucket: testBucket, Prefix: prefix,
			Limits: ledgertest.Limits(), Clock: offsetClock{ledger.SystemClock{}, skew}, Create: true, Shards: 2,
			Owner: fmt.Sprintf("host%+v", skew)})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return l
	}
	ctx := context.Background()
	permanent := func(n int) ledger.Delivery {
		body := fmt.Appendf(nil, `{"clock":%d,"at":%d}`, n, time.Now().UnixNano())
		return ledger.Delivery{Binding: ledger.Binding{Route: "clocks", Scheme: "github-sha256", Identity: string(body),
			BodyDigest: ledger.SumBody(body)}, Subject: body}
	}
	const leaseFor = time.Minute

	t.Run("AheadGetsNoExecuteOnALiveLease", func(t *testing.T) {
		prefix := newPrefix(t)
		right, ahead := open(prefix, 0), open(prefix, 2*time.Minute)
		d := permanent(1)
		ledgertest.MustAdmit(t, right, d)
		if c, err := right.Claim(ctx, d.Key(), d.Binding.Digest(), "right", leaseFor); err != nil || c.Outcome != ledger.Execute {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if c, err := ahead.Claim(ctx, d.Key(), d.Binding.Digest(), "ahead", leaseFor); err != nil || c.Outcome != ledger.Busy {
			t.Fatalf("a host two minutes ahead claimed a live lease: %v %v", c.Outcome, err)
		}
	})
	t.Run("AheadGetsNoPublishWhileAPublishLeaseIsLive", func(t *testing.T) {
		prefix := newPrefix(t)
		right, ahead := open(prefix, 0), open(prefix, 2*time.Minute)
		d := permanent(2)
		ledgertest.MustAdmit(t, right, d)
		c, err := right.Claim(ctx, d.Key(), d.Binding.Digest(), "right", leaseFor)
		if err != nil || c.Outcome != ledger.Execute {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if _, err := right.Save(ctx, *c.Lease, []byte("verdict")); err != nil {
			t.Fatal(err)
		}
		if c, err := ahead.Claim(ctx, d.Key(), d.Binding.Digest(), "ahead", leaseFor); err != nil || c.Outcome != ledger.Busy {
			t.Fatalf("a host two minutes ahead was handed a live publication: %v %v", c.Outcome, err)
		}
	})
	t.Run("SlowAdmitsNoStaleRequest", func(t *testing.T) {
		slow := open(newPrefix(t), -2*time.Minute)
		d := permanent(3)
		d.Binding.Scheme = "standard-webhooks"
		d.SignedAt = time.Now().Add(-6 * time.Minute) // the accepted age is 5 minutes
		if a, err := slow.Admit(ctx, d); err != nil || a.Outcome != ledger.Stale {
			t.Fatalf("a host two minutes slow admitted a request signed 6 minutes ago: %v %v", a.Outcome, err)
		}
	})
	t.Run("FastCleanerCannotMakeFreshDeliveriesStale", func(t *testing.T) {
		prefix := newPrefix(t)
		fast := open(prefix, 10*time.Minute)
		if _, err := fast.Cleanup(ctx, ""); err != nil {
			t.Fatal(err)
		}
		right := open(prefix, 0)
		d := permanent(4)
		d.Binding.Scheme = "standard-webhooks"
		d.SignedAt = time.Now()
		if a, err := right.Admit(ctx, d); err != nil || a.Outcome != ledger.Admitted {
			t.Fatalf("after a cleaner ten minutes fast, a fresh delivery was answered %v %v", a.Outcome, err)
		}
	})
}

// TestRetriedWriteIsNotALostRaceWithoutReadingBack: a conditional write lands but its
// connection is reset; the SDK's retry is answered 412 (by the write's own landing), and the
// read-back that would tell the two apart fails. That is not a lost race: taking it for one,
// an admission wrote a second pending entry for one reservation (a slot held for good), or
// answered Pending for the row it had just created. The answer must be an error of unknown
// outcome, and capacity must end exact.
func TestRetriedWriteIsNotALostRaceWithoutReadingBack(t *testing.T) {
	for _, target := range []string{"capacity-shard", "row"} {
		t.Run(target, func(t *testing.T) {
			w := newWorld(t)
			w.shards = 1
			l, tr := w.handle("ingress", 0, nil)
			d := w.delivery(time.Time{})
			// 0: waiting for the write; 1: it was applied and its answer lost (the SDK retries
			// and gets 412); from 2: every attempt of the read-back fails.
			var step atomic.Int32
			tr.setRule(func(r *http.Request) fault {
				body, _ := peekBody(r)
				switch {
				case step.Load() == 0 && r.Method == http.MethodPut && bytes.Contains(body, []byte(`"kind":"`+target+`"`)):
					step.Store(1)
					return reset
				case step.Load() >= 1 && step.Load() < 4 && r.Method == http.MethodGet && !isListing(r):
					step.Add(1)
					return failBefore
				}
				return pass
			})
			a, err := l.Admit(w.ctx, d)
			tr.setRule(nil)
			if step.Load() < 2 {
				t.Fatalf("the faults did not fire (step %d)", step.Load())
			}
			if err == nil && a.Outcome != ledger.Admitted {
				t.Fatalf("an admission of a new delivery answered %v: it made the row, or it must say it cannot tell", a.Outcome)
			}
			if err == nil {
				t.Logf("admitted after the ambiguous write")
			}
			w.store.Advance(10 * time.Minute)
			w.cleanLap(l)
			if st := w.exact(l); st.Rows > 1 {
				t.Fatalf("%d rows for one delivery", st.Rows)
			}
		})
	}
}
