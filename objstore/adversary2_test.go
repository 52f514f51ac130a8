package objstore_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Attacks of a second review round on the S3 ledger, each fixed since. Each test names the break it showed and
// gives its interleaving. Helpers: the world of safety_test.go, the transport of
// transport_test.go, capture and suspendedClock of adversary_test.go.

// dupMode says how a duplicating transport treats the request it matches.
type dupMode int

const (
	// copyFirst: a copy of the request (as signed) reaches the store first and lands; the
	// original follows and its answer (412: the copy's write is there) goes to the client.
	// A proxy that re-sends a PUT on a timeout, or hedges it, does this; the client's first
	// and only attempt is answered 412 for its own write.
	copyFirst dupMode = iota
	// slowDownThenCopy: the store answers the original 503 SlowDown (nothing applied), while a
	// copy of it is still in the network; the copy lands just after the client's read-back
	// of the object (which finds it unchanged), before the client's next attempt.
	slowDownThenCopy
)

// dupTransport duplicates the first request match accepts, once armed.
type dupTransport struct {
	base http.RoundTripper

	mu     sync.Mutex
	match  func(*http.Request, []byte) bool
	mode   dupMode
	armed  bool
	fired  bool
	copyOf *http.Request // slowDownThenCopy: the copy still in the network
	body   []byte
	object string // its path: the copy lands after the next GET of it
	landed int    // the status the copy was answered
}

func (d *dupTransport) arm(mode dupMode, match func(*http.Request, []byte) bool) {
	d.mu.Lock()
	d.mode, d.match, d.armed, d.fired = mode, match, true, false
	d.mu.Unlock()
}

func (d *dupTransport) send(r *http.Request, body []byte) int {
	cp := r.Clone(context.Background())
	cp.Body = io.NopCloser(bytes.NewReader(body))
	cp.ContentLength = int64(len(body))
	resp, err := d.base.RoundTrip(cp)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (d *dupTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := peekBody(r)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.copyOf != nil && r.Method == http.MethodGet && r.URL.Path == d.object {
		cp, cb := d.copyOf, d.body
		d.copyOf = nil
		d.mu.Unlock()
		resp, err := d.base.RoundTrip(r) // the read-back: unchanged
		d.mu.Lock()
		d.landed = d.send(cp, cb) // then the copy lands
		d.mu.Unlock()
		return resp, err
	}
	if !d.armed || d.fired || !d.match(r, body) {
		d.mu.Unlock()
		return d.base.RoundTrip(r)
	}
	d.fired = true
	switch d.mode {
	case copyFirst:
		d.landed = d.send(r, body)
		d.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		return d.base.RoundTrip(r)
	default: // slowDownThenCopy
		d.copyOf, d.body, d.object = r.Clone(context.Background()), body, r.URL.Path
		d.mu.Unlock()
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Slow Down", Proto: "HTTP/1.1",
			ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/xml"}},
			Body:    io.NopCloser(strings.NewReader(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)),
			Request: r}, nil
	}
}

func (d *dupTransport) copyStatus() (fired bool, status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fired, d.landed
}

// dupHandle opens a handle whose requests pass through a duplicating transport (in front of
// the world's transport, which reports the store's clock).
func (w *world) dupHandle(name string, adjust func(*objstore.Config)) (*objstore.Ledger, *dupTransport) {
	w.t.Helper()
	tr := newTransport(&counter{})
	tr.setStoreClock(w.store)
	d := &dupTransport{base: tr}
	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: d, Timeout: 2 * time.Minute},
		Retryer: fastRetryer, DisableClockSkewCorrection: true})
	if err != nil {
		w.t.Fatal(err)
	}
	cfg := objstore.Config{Client: client, Bucket: testBucket, Prefix: w.prefix, Limits: w.limits,
		Clock: offsetClock{w.store, 0}, Create: true, Shards: w.shards, Owner: name}
	if adjust != nil {
		adjust(&cfg)
	}
	l, err := objstore.Open(w.ctx, cfg)
	if err != nil {
		w.t.Fatalf("open %s: %v", name, err)
	}
	return l, d
}

func putOf(kind string) func(*http.Request, []byte) bool {
	return func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPut && bytes.Contains(body, []byte(`"kind":"`+kind+`"`))
	}
}

// TestAdversaryDuplicatedShardWriteHoldsASlotForGood: store.put answers errRaced for a 412 to its
// first attempt (or to any attempt after only 503s) without reading back, on the premise that
// nothing of its own can have landed. A copy of the request in the network breaks the premise
// (DESIGN §6: "after a 412 or a transport error, read back and treat your own token as
// success"). Interleaving (cap 2, one shard):
//
//	ingress: reservation R at K; reads the shard (used 0); PUT shard {used 1, pending K/R}
//	         (If-Match E0): a copy of it lands first (E1); the original is answered 412
//	         -> errRaced -> reserveIn reads the shard again, finds its own entry (K/R, young,
//	         R in place: "in flight", kept) and adds a second one: {used 2, pending K/R, K/R}
//	ingress: the row over R lands: Admitted
//	settlement: both entries name R and K holds R's row: both "the row's": used stays 2
//	another delivery: Full, with one row under a cap of 2, for good (cleanup never gives
//	         the second slot back; invariant 11, and "slots used equal to rows").
//
// slowDownThenCopy is the same through the other branch: the first attempt is answered 503
// (nothing applied, sent stays false) while a copy of it lands between the read-back (which
// finds the shard unchanged) and the second attempt, which is answered 412 -> errRaced.
func TestAdversaryDuplicatedShardWriteHoldsASlotForGood(t *testing.T) {
	for _, mode := range []struct {
		name string
		mode dupMode
	}{{"CopyOvertakesFirstAttempt", copyFirst}, {"SlowDownThenCopyLands", slowDownThenCopy}} {
		t.Run(mode.name, func(t *testing.T) {
			w := newWorld(t)
			w.shards = 1
			w.limits.RecordCap = 2
			ingress, dup := w.dupHandle("ingress", nil)
			cleaner, _ := w.handle("cleaner", 0, nil)

			d := w.delivery(time.Time{})
			dup.arm(mode.mode, putOf("capacity-shard"))
			a, err := ingress.Admit(w.ctx, d)
			if fired, status := dup.copyStatus(); !fired || status/100 != 2 {
				t.Fatalf("the duplicate did not land (fired %v, status %d)", fired, status)
			}
			if err != nil || a.Outcome != ledger.Admitted {
				t.Fatalf("admit: %v %v", a.Outcome, err)
			}
			w.store.Advance(10 * time.Minute) // every pending entry past the grace
			w.cleanLap(cleaner)
			st, err := cleaner.Stats(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			other := w.delivery(time.Time{})
			b, berr := cleaner.Admit(w.ctx, other)
			if st.CapacityUsed != st.Rows || berr != nil || b.Outcome != ledger.Admitted {
				t.Fatalf("after one admission whose shard write was duplicated, and settlement and cleanup: %d row(s), "+
					"capacity records %d; another delivery under a cap of %d is answered %v %v",
					st.Rows, st.CapacityUsed, w.limits.RecordCap, b.Outcome, berr)
			}
		})
	}
}

// TestAdversaryDuplicatedRowCreateAnswersPendingForItsOwnRow: the same premise on the row write
// of an admission. The copy of the row PUT (If-Match on the reservation) lands first, the
// original is answered 412 -> errRaced -> settleShard finds the row and keeps the slot, the
// admission decides again, finds a row (its own) and answers Pending. A new delivery is answered
// as if someone had admitted it before (the model refuses this history: Pending for a key no
// call admitted), the same defect reliability.md lists as found and fixed for the SDK's retry.
func TestAdversaryDuplicatedRowCreateAnswersPendingForItsOwnRow(t *testing.T) {
	w := newWorld(t)
	ingress, dup := w.dupHandle("ingress", nil)
	d := w.delivery(w.store.Now())
	dup.arm(copyFirst, both(rowRequest(d, http.MethodPut), objectKind("row")))
	a, err := ingress.Admit(w.ctx, d)
	if fired, status := dup.copyStatus(); !fired || status/100 != 2 {
		t.Fatalf("the duplicate did not land (fired %v, status %d)", fired, status)
	}
	if err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("the first admission of a new delivery, whose row write landed (by a copy), answered %v %v, want Admitted",
			a.Outcome, err)
	}
}

// TestAdversaryDuplicatedClaimWriteAnswersBusyForItsOwnLease: the same premise on a Claim. The
// copy of the claim's row write lands (Execute granted to this owner, fence 1), the original is
// answered 412 -> errRaced -> decided again on a fresh read: the lease is live (its own) -> Busy.
// The only claimer is told to come back when the lease it holds has ended; the answer names no
// lease, and the fence granted is never used. (No second verdict; linearizability and progress.)
func TestAdversaryDuplicatedClaimWriteAnswersBusyForItsOwnLease(t *testing.T) {
	w := newWorld(t)
	runner, dup := w.dupHandle("runner", nil)
	d := w.delivery(time.Time{})
	w.admit(runner, d, ledger.Admitted)
	dup.arm(copyFirst, rowWrite(d, ledger.StateRunning))
	c, err := runner.Claim(w.ctx, d.Key(), d.Binding.Digest(), "runner", time.Minute)
	if fired, status := dup.copyStatus(); !fired || status/100 != 2 {
		t.Fatalf("the duplicate did not land (fired %v, status %d)", fired, status)
	}
	if err != nil || c.Outcome != ledger.Execute {
		row, _ := runner.Inspect(w.ctx, d.Key())
		t.Fatalf("the only claim of a pending row answered %v %v, want Execute; the row is %v, owner %q, fence %d",
			c.Outcome, err, row.State, row.Owner, row.Fence)
	}
}

var _ = ledgertest.Epoch

// TestAdversaryReplayAdmittedThroughAHighWaterCachedForAMinute: §3.2 of the design: "Cleanup
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
// Fixed: each capacity shard carries the high-water of the last cleanup that settled it, and
// an admission refuses there what it makes stale.
func TestAdversaryReplayAdmittedThroughAHighWaterCachedForAMinute(t *testing.T) {
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

// TestAdversaryFullAnswerJudgesEveryPendingEntry: docs/s3-ledger.md: "An admission judges at most
// four pending entries of others (one read each), so its requests stay bounded under any
// traffic". An admission that finds every shard full settles every shard thoroughly before it
// answers Full: it reads the key of every pending entry of every shard, that is of every
// admission of the last minutes (up to maxPending, 512, per shard). Here a burst of 64
// admissions fills a cap of 64 (4 shards) and the next admission makes one GET per admission
// of the burst. (Progress, invariant 10; not a wrong answer.)
func TestAdversaryFullAnswerJudgesEveryPendingEntry(t *testing.T) {
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

// v1Row encodes a row as format 1 wrote it: created with If-None-Match alone, no reservation.
func v1Row(t *testing.T, row ledger.Row) []byte {
	t.Helper()
	return v1Object(t, "row", "v1-row-writer", map[string]any{"row": row, "shard": 0})
}

// TestAdversaryFormatOneAdmissionInFlightLandsARowWithoutASlot: during the rollout of format 2,
// a format 1 admission (old code still running) has taken its slot (a pending entry with no
// reservation) and its row create (If-None-Match: *) is held in flight. judgePending frees a
// format 1 entry once it is older than the grace when its key holds nothing ("the format 1
// one died"), with nothing to stop the create from landing afterwards: a void reservation
// written at the empty key would. Interleaving (cap 2, one shard, store time):
//
//	T      format 1 ingress: slot taken (used 1, pending d, no reservation); its row PUT
//	       (If-None-Match: *) is held in the network
//	T+3m   format 2 cleanup: the entry is past the grace, the key is empty: slot given back
//	       (used 0)
//	T+3m   the held row PUT lands (signed 3 minutes ago, inside SigV4's 15): a row no slot
//	       counts; two more deliveries are admitted: 3 rows under a cap of 2
func TestAdversaryFormatOneAdmissionInFlightLandsARowWithoutASlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(time.Time{})
	body := v1Shard(t, w.limits.RecordCap, 1, d.Key(), w.store.Now())
	if _, err := minioRaw.PutObject(w.ctx, testBucket, w.prefix+"capacity/00.json", bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	row, _, err := ledger.NewRow(d, w.limits, w.store.Now(), "format1evaluation0000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	held := v1Row(t, row) // the format 1 ingress's row PUT, held in flight

	w.store.Advance(3 * time.Minute)
	w.cleanLap(cleaner)

	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutObject(w.ctx, &s3.PutObjectInput{Bucket: aws.String(testBucket), Key: aws.String(w.prefix + objstore.RowName(d.Key())),
		Body: bytes.NewReader(held), ContentLength: aws.Int64(int64(len(held))), IfNoneMatch: aws.String("*")}); err != nil {
		t.Logf("the held format 1 create was refused: %v", err)
		w.exact(cleaner)
		return
	}
	for range 2 {
		if a, err := cleaner.Admit(w.ctx, w.delivery(time.Time{})); err != nil || a.Outcome != ledger.Admitted {
			break
		}
	}
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	st, err := cleaner.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows > w.limits.RecordCap || st.CapacityUsed != st.Rows {
		t.Fatalf("the held format 1 create landed on the key whose entry was freed: %d rows under a cap of %d, capacity records %d",
			st.Rows, w.limits.RecordCap, st.CapacityUsed)
	}
}

// TestAdversarySuspendedIngressRefusesAFreshDeliveryAsAhead: the first decision of an admission
// is made before any request, on the store-clock estimate, which after the host was suspended
// is behind the store by the whole suspension. A delivery signed a second ago by the store's
// clock then looks minutes ahead of that estimate and was refused as Stale (401: the sender
// does not retry it), though it is fresh by the store's time. Found by the S3 history soak.
//
//	T      ingress: answers something (its estimate is T), then its host is suspended 2 minutes
//	T+2m   a sender signs d at T+2m; ingress admits it: its estimate still says T
func TestAdversarySuspendedIngressRefusesAFreshDeliveryAsAhead(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	ingress, _ := w.handle("ingress", 0, func(c *objstore.Config) { c.Clock = host })
	w.admit(ingress, w.delivery(time.Time{}), ledger.Admitted)
	w.store.Advance(2 * time.Minute)
	host.sleep(2 * time.Minute)
	d := w.delivery(w.store.Now().Add(-time.Second))
	a, err := ingress.Admit(w.ctx, d)
	if err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("a delivery signed a second ago by the store's clock, admitted by a host that was suspended: %v %v, want Admitted", a.Outcome, err)
	}
}
