package objstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// The store's clock: every decision is made at the store's time, never a host's, and the
// time never goes back, even when the store's own clock steps back.

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
			BodyDigest: ledger.SumBody(body)}, Change: body}
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

// TestWarmHandleRefusesAReplayAfterTheStoreClockStepsBack: §3.2 of the design: "Cleanup
// persists the high-water before it deletes anything, so after a clock steps back, a request
// that was stale when its row was removed is still refused as Stale." On S3 the clock is the
// store's, and a handle re-reads the persisted high-water at most once a minute (of its own
// monotonic time), so for up to a minute after a removal every warm ingress decides on a
// high-water from before it. Interleaving (accepted age 40m, queue ceiling 1m, store time):
//
//	S       ingress (warm, high-water read at S): Admit(d signed S) -> Admitted; run, saved,
//	        completed
//	S+41m   cleaner: retention (S+41m) over, key aged (31m): the row is removed, the
//	        high-water S+41m persisted
//	        the store's clock steps back 2 minutes (NTP on a MinIO host): S+39m
//	S+39m   ingress: Admit(d signed S), a replay: decided at max(S+39m, its cached
//	        high-water S) -> fresh -> Admitted again, a new evaluation id: evaluated and
//	        published twice. A handle opened after the cleanup answers Stale.
//
// Needs the store's clock to step back by more than the queue ceiling; no held request.
// Fixed: each capacity shard carries the high-water of the last cleanup that recounted it, and
// an admission refuses there what it makes stale.
func TestWarmHandleRefusesAReplayAfterTheStoreClockStepsBack(t *testing.T) {
	w := newWorld(t)
	w.limits.SignedAgeCeiling = 40 * time.Minute // retention outlasts the life of a request
	w.limits.QueueCeiling = time.Minute
	ingress, _ := w.handle("ingress", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	first := w.saved(ingress, d, "first verdict")
	ledgertest.MustComplete(t, ingress, first)
	row, err := ingress.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	if row.RetainUntil.Before(row.CreatedAt.Add(objstore.RequestLife + time.Minute)) {
		t.Fatalf("retention %s is too short for this interleaving", row.RetainUntil.Sub(row.CreatedAt))
	}
	w.store.Set(row.RetainUntil.Add(time.Second))
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	w.store.Advance(-2 * time.Minute)
	fresh, _ := w.handle("ingress-new", 0, nil)
	if a, err := fresh.Admit(w.ctx, d); err != nil || a.Outcome != ledger.Stale {
		t.Fatalf("a handle opened after the cleanup: %v %v, want stale", a.Outcome, err)
	}
	a, err := ingress.Admit(w.ctx, d)
	if err == nil && a.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a delivery forgotten as stale was admitted again by a warm ingress (evaluation %s, first %s): "+
			"its high-water is cached for a minute, and the store's clock stepped back", a.EvaluationID, row.EvaluationID)
	}
}

// TestVoidedReservationOutlivesStoreClocksThatDisagree: the store is many nodes, whose clocks
// may disagree by minutes, and a node's clock may be stepped forward and back. The Date one
// handle reads and the clock that checks a held request's signature are then not the same
// clock, and a decision that a held write "can never land" made by comparing Dates is wrong.
// Interleaving (cap 1, one shard; the ingress and the first cleaner talk to a node at the
// store's time):
//
//	ingress  reservation PUT: its first attempt is held in the network and a retry lands; the
//	         slot is taken; every attempt of the row PUT (If-Match on the reservation's ETag)
//	         is held in the network, and the admission gives up
//	+3m      cleaner: the pending entry is past the grace: the reservation is voided and its
//	         slot given back
//	+14m     a cleaner whose Dates run 21 minutes ahead (another node, or the same one with its
//	         clock stepped forward) finds the void 32 minutes old, past the 31-minute life of a
//	         request, and removes it: the key is empty
//	         the held reservation attempt lands (signed 14 minutes ago: inside SigV4's 15) with
//	         the same bytes, so the same ETag; the held row write lands over it: a row that no
//	         slot counts, and the cap of 1 admits one more.
func TestVoidedReservationOutlivesStoreClocksThatDisagree(t *testing.T) {
	const ahead = 21 * time.Minute
	for _, c := range []struct {
		name string
		// stepped: the cleaner that voided is the one whose Date steps forward, and back.
		stepped bool
	}{{"NodesApart", false}, {"DateSteppedForwardAndBack", true}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.shards = 1
			w.limits.RecordCap = 1
			ingress, capt := w.captureHandle("ingress", nil)
			cleaner, cleanerTr := w.handle("cleaner", 0, nil)
			late, lateTr := cleaner, cleanerTr
			if !c.stepped {
				late, lateTr = w.handle("cleaner-ahead", 0, nil)
			}

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
			w.cleanLap(cleaner) // the reservation is voided, its slot given back
			w.store.Advance(11 * time.Minute)
			lateTr.setStoreClock(offsetClock{w.store, ahead})
			w.cleanLap(late)
			lateTr.setStoreClock(w.store)

			code, msg := res.deliver(t, 0)
			t.Logf("held reservation attempt, 14 minutes after it was signed: %d %s", code, msg)
			code, msg = rowPut.deliver(t, 0)
			t.Logf("held row write: %d %s", code, msg)
			w.store.Advance(10 * time.Minute)
			w.cleanLap(cleaner)
			st := w.exact(cleaner)
			other := w.delivery(time.Time{})
			a, err := cleaner.Admit(w.ctx, other)
			after := w.exact(cleaner)
			if st.Rows != 0 || after.Rows > w.limits.RecordCap {
				t.Fatalf("%d row(s) after the held writes landed, then another delivery was answered %v %v: %d rows under a cap of %d",
					st.Rows, a.Outcome, err, after.Rows, w.limits.RecordCap)
			}
		})
	}
}

// TestNodeBehindDecidesNoLowerThanTheLastCleanupsHighWater: the ledger's clock never goes back,
// across the store's nodes too: a cleanup on a node ahead that forgets a row persists its now
// as the high-water first, and a handle on a node two minutes behind (whose copy of the root is
// up to a minute old) must decide no lower than it. A re-admission of a delivery stale by that
// high-water is Stale, and a row admitted after it starts there: a lease granted on it ends no
// sooner than the high-water plus the lease.
func TestNodeBehindDecidesNoLowerThanTheLastCleanupsHighWater(t *testing.T) {
	behind := func(w *world, name string) *objstore.Ledger {
		l, tr := w.handle(name, 0, nil)
		tr.setStoreClock(offsetClock{w.store, -2 * time.Minute})
		return l
	}
	ahead := func(w *world, name string) *objstore.Ledger {
		l, tr := w.handle(name, 0, nil)
		tr.setStoreClock(offsetClock{w.store, 3 * time.Minute})
		return l
	}
	t.Run("ReadmissionIsStale", func(t *testing.T) {
		w := newWorld(t)
		fast, _ := w.handle("ingress", 0, nil)
		slow := behind(w, "ingress-behind")
		cleaner := ahead(w, "cleaner-ahead")
		forgotten := w.delivery(w.store.Now()) // past its retention when the cleaner runs
		ledgertest.MustComplete(t, fast, w.saved(fast, forgotten, "verdict"))
		w.store.Advance(w.limits.SignedAgeCeiling + w.limits.QueueCeiling)
		w.store.Advance(3 * time.Minute)
		d := w.delivery(w.store.Now())
		w.admit(fast, d, ledger.Admitted)
		w.store.Advance(3 * time.Minute) // the cleaner's node says d is 6 minutes old
		if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
			t.Fatalf("cleanup removed %d rows, want the one past its retention", len(rep.Removed))
		}
		if a, err := slow.Admit(w.ctx, d); err != nil || a.Outcome != ledger.Stale {
			t.Fatalf("a re-admission of a delivery signed 6 minutes before the last cleanup's high-water (accepted age 5m), "+
				"through a node 2 minutes behind: %v %v, want Stale", a.Outcome, err)
		}
	})
	t.Run("NewRowStartsAtIt", func(t *testing.T) {
		w := newWorld(t)
		fast, _ := w.handle("worker", 0, nil)
		cleaner := ahead(w, "cleaner-ahead")
		d := w.delivery(w.store.Now())
		ledgertest.MustComplete(t, fast, w.saved(fast, d, "verdict"))
		row, err := fast.Inspect(w.ctx, d.Key())
		if err != nil {
			t.Fatal(err)
		}
		w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute))
		slow := behind(w, "ingress-behind") // its copy of the root is read now, before the cleanup
		if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
			t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
		}
		rep, err := cleaner.Cleanup(w.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		again := d
		again.SignedAt = w.store.Now().Add(-90 * time.Second) // fresh on both nodes
		w.admit(slow, again, ledger.Admitted)
		const leaseFor = time.Minute
		c, err := slow.Claim(w.ctx, d.Key(), d.Binding.Digest(), "runner-behind", leaseFor)
		if err != nil || c.Outcome != ledger.Execute {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if c.Lease.Expires.Before(rep.HighWater.Add(leaseFor)) {
			t.Fatalf("a lease of %s granted after a cleanup whose high-water is %s ends at %s: decided %s below the high-water",
				leaseFor, rep.HighWater.Format(time.TimeOnly), c.Lease.Expires.Format(time.TimeOnly), rep.HighWater.Add(leaseFor).Sub(c.Lease.Expires))
		}
	})
}

// TestForgottenRowsKeyOutlivesItsRequestsOnNodesHalfAMinuteApart: forgetting a row empties its
// key, and late copies of its admission's reservation PUT and row write (captured as signed
// and delivered later) would bring it back on the empty key. The key is emptied only when
// RequestLife (31 minutes) has passed since the reservation, by the cleaner's reading of the
// store's clock; a request lands within 30 minutes of its signing (15 of SigV4, 15 of a host
// clock stepped after the SDK measured its skew) or never. The docs assume store nodes agree
// within about half a minute: a cleaner on a node 30 s ahead, 30 minutes after the
// reservation by the ingress's node, keeps the row, and the copies are refused; one minute
// later it forgets the row.
func TestForgottenRowsKeyOutlivesItsRequestsOnNodesHalfAMinuteApart(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.QueueCeiling = time.Minute // a retention that ends well within RequestLife
	ingress, capt := w.captureHandle("ingress", nil)
	cleaner, cleanerTr := w.handle("cleaner-ahead", 0, nil)
	cleanerTr.setStoreClock(offsetClock{w.store, 30 * time.Second})

	d := w.delivery(w.store.Now())
	res := capt.add(both(rowRequest(d, http.MethodPut), objectKind("reservation")), 1)
	rowPut := capt.add(both(rowRequest(d, http.MethodPut), objectKind("row")), 1)
	ledgertest.MustComplete(t, ingress, w.saved(ingress, d, "verdict"))
	if len(res.got) != 1 || len(rowPut.got) != 1 {
		t.Fatalf("captured %d reservation and %d row writes", len(res.got), len(rowPut.got))
	}
	row, err := ingress.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	reservedAt := row.CreatedAt.Add(time.Second) // the reservation's answer, rounded up to the second
	w.store.Set(reservedAt.Add(30 * time.Minute))
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 0 {
		t.Fatalf("a cleaner 30 s ahead forgot the row 30 minutes after its reservation (by the ingress's node), " +
			"while a copy of its reservation PUT signed then can still land")
	}
	if code, msg := res.deliver(t, 0); code/100 == 2 {
		t.Fatalf("the late reservation copy landed: %d %s", code, msg)
	}
	if code, msg := rowPut.deliver(t, 0); code/100 == 2 {
		t.Fatalf("the late row write copy landed: %d %s", code, msg)
	}
	if got, err := ingress.Inspect(w.ctx, d.Key()); err != nil || got.State != ledger.StateDone || got.EvaluationID != row.EvaluationID {
		t.Fatalf("after the late copies: %v %v, want the done row", got.State, err)
	}
	w.store.Advance(time.Minute)
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows 31 minutes after the reservation, want 1", len(rep.Removed))
	}
	if st := w.exact(cleaner); st.Rows != 0 {
		t.Fatalf("%d rows left", st.Rows)
	}
}

// TestOrderOnACommitHoldsOnNodesTenSecondsApart: the order on a commit rests on one clock
// assumption, the store's nodes agree within 10 s, which the runner's settle wait carries on
// top of the route's settle time (10 s: functions/runner's clockAllowance). A post whose
// outcome was unknown may be applied by the provider until the route's settle time after its
// runner gave up on it; a newer verdict is called standing only once the record's settle time
// (the report's time, on its node, plus the route's settle time and the allowance) has come on
// the node the newer one asks. With the nodes 10 s apart, that is no sooner than the older post
// could still land:
//
//	T        runner-a (on a node at the store's time) gives up on X's post and reports it unknown
//	T+1s     runner-b (on a node 10 s ahead) posts Y, newer; it is to confirm at the record's
//	         settle time, by its node
//	         runner-b asks again at that time by its node, reads back, and Y is called standing:
//	         X's post, applied as late as the provider may, must have landed before.
func TestOrderOnACommitHoldsOnNodesTenSecondsApart(t *testing.T) {
	const (
		apart       = 10 * time.Second // the bound docs/s3-ledger.md and docs/runner.md state
		routeSettle = time.Minute      // a route's default settle time
		allowance   = 10 * time.Second // functions/runner's clockAllowance
	)
	w := newWorld(t)
	a, _ := w.handle("runner-a", 0, nil)
	b, bTr := w.handle("runner-b", 0, nil)
	bTr.setStoreClock(offsetClock{w.store, apart})
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("d", 40),
		Context: "amiss"}
	request := func(name string, event time.Duration) ledger.SubjectRequest {
		w.seq++
		return ledger.SubjectRequest{Subject: subject, Order: ledger.Order{Key: ledger.Key(ledger.SumBody([]byte(w.prefix + name))),
			EventAt: w.store.Now().Add(event), AdmittedAt: w.store.Now()}, EvaluationID: name, HoldFor: 70 * time.Second,
			Settle: routeSettle + allowance}
	}
	x, y := request("X", -2*time.Second), request("Y", -time.Second)

	gx, err := a.AcquireSubject(w.ctx, x)
	if err != nil || gx.Outcome != ledger.SubjectPost {
		t.Fatalf("X asks: %+v %v", gx, err)
	}
	gaveUp := w.store.Now() // runner-a gives up on X's post, and reports it
	if ax, err := a.ReportSubject(w.ctx, gx, ledger.PostUnknown); err != nil || ax.Outcome != ledger.SubjectRetry {
		t.Fatalf("X reports unknown: %+v %v", ax, err)
	}
	lastLanding := gaveUp.Add(routeSettle) // the provider applies X's post by then, or never

	w.store.Advance(time.Second)
	gy, err := b.AcquireSubject(w.ctx, y)
	if err != nil || gy.Outcome != ledger.SubjectPost {
		t.Fatalf("Y asks: %+v %v", gy, err)
	}
	ay, err := b.ReportSubject(w.ctx, gy, ledger.PostApplied)
	if err != nil || ay.Outcome != ledger.SubjectConfirm {
		t.Fatalf("Y reports applied while X's post may still land: %+v %v, want confirm", ay, err)
	}
	// runner-b comes back when its node says so, and confirms by reading back.
	w.store.Set(ay.RetryAt.Add(-apart))
	for i := 0; ; i++ {
		g, err := b.AcquireSubject(w.ctx, y)
		if err != nil {
			t.Fatalf("Y asks again: %v", err)
		}
		if g.Outcome == ledger.SubjectPost {
			g, err = b.ReportSubject(w.ctx, g, ledger.PostApplied) // read back: Y stands
			if err != nil {
				t.Fatalf("Y confirms: %v", err)
			}
		}
		if g.Outcome == ledger.SubjectStanding {
			break
		}
		if i == 5 || g.Outcome != ledger.SubjectWait && g.Outcome != ledger.SubjectConfirm {
			t.Fatalf("Y is not called standing: %+v", g)
		}
		w.store.Set(g.RetryAt.Add(-apart))
	}
	if standing := w.store.Now(); standing.Before(lastLanding) {
		t.Fatalf("Y was called standing at %s (the store's time), while X's post could still land until %s: nodes %s apart break the order",
			standing.Format(time.TimeOnly), lastLanding.Format(time.TimeOnly), apart)
	}
}
