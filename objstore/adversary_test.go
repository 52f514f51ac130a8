package objstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Adversarial cases against the S3 ledger's reservations, settlement and versioned deletes,
// written by a reviewer who tried to break them; each failed before the fix its comment names.

type admitResult struct {
	a   ledger.Admission
	err error
}

// TestAdversaryHeldReservationReadmitsAForgottenDelivery: admission decides freshness once, at the
// store time it read before its first request, and never again. Interleaving (store time, the
// hold is 3 minutes, well inside SigV4's 15):
//
//	S+4m   ingress-slow: Admit(d) decides "fresh" (accepted age 5m); its reservation PUT
//	       (If-None-Match: *) is held in flight
//	S+4m   ingress-fast: Admit(d) (the sender's retry) is Admitted, run, saved, completed
//	S+7m+1 cleanup: retention (S + 5m + 2m queue ceiling) is over; the row is forgotten and
//	       the high-water says d is stale
//	       the held reservation PUT lands on the now empty key; ingress-slow takes a slot and
//	       creates a row: d is Admitted a second time, with a new evaluation id, and is run
//	       and published again.
//
// The same happens with no hold at all when the ingress is paused between reading the store's
// time and signing its first PUT (then the 15-minute bound does not apply either).
//
// Fixed: admission decides again at the store's time of its reservation's answer.
func TestAdversaryHeldReservationReadmitsAForgottenDelivery(t *testing.T) {
	w := newWorld(t)
	w.limits.QueueCeiling = 2 * time.Minute
	slow, slowTr := w.handle("ingress-slow", 0, nil)
	fast, _ := w.handle("ingress-fast", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	w.store.Advance(4 * time.Minute)
	held := slowTr.holdNext(rowRequest(d, http.MethodPut))
	done := make(chan admitResult, 1)
	go func() { a, err := slow.Admit(w.ctx, d); done <- admitResult{a, err} }()
	held.waitHeld(t)

	first := w.saved(fast, d, "first verdict")
	ledgertest.MustComplete(t, fast, first)
	row, err := fast.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	// Past its retention, and past the life of any request that could write its reservation
	// again (the key is not emptied sooner; its reservation landed a second or so after the
	// row's creation time).
	w.store.Set(ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute))
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	if a, err := fast.Admit(w.ctx, d); err != nil || a.Outcome != ledger.Stale {
		t.Fatalf("replay after cleanup: %v %v, want stale", a.Outcome, err)
	}
	if err := held.land(t); err != nil {
		t.Logf("held reservation PUT: %v", err)
	}
	res := <-done
	if res.err == nil && res.a.Outcome == ledger.Admitted {
		c, cerr := fast.Claim(w.ctx, d.Key(), d.Binding.Digest(), "second-runner", time.Minute)
		t.Fatalf("delivery admitted a second time after its row was forgotten as stale (evaluation %s, first %s); "+
			"a claim now answers %v %v: the delivery is evaluated and published twice",
			res.a.EvaluationID, row.EvaluationID, c.Outcome, cerr)
	}
}

// TestAdversaryFullWhileACapSlotIsHeldByAnAdmissionThatIsOver: two admissions of one delivery (a
// sender's retry) race; the loser's pending entry is written after the winner took its key
// over, and nobody settles it until the grace is over. Interleaving (cap 2, one shard):
//
//	ingress-slow: reservation R1 at K; its read of the capacity shard is held
//	ingress-fast: takes K over (R2), takes a slot, creates the row: Admitted
//	ingress-slow: the read lands; it adds its own pending entry (slots used 2), its row
//	       write over R1 loses, and it answers Pending. Its admission is over.
//	another delivery: Full, though one row exists, the cap is 2, and no admission is in
//	       flight (invariant 11: Full only when the whole cap is in use).
func TestAdversaryFullWhileACapSlotIsHeldByAnAdmissionThatIsOver(t *testing.T) {
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

// v1Shard encodes a capacity shard as format 1 wrote it: pending entries name no reservation.
func v1Shard(t *testing.T, quota, used int64, pending ledger.Key, at time.Time) []byte {
	t.Helper()
	return v1Object(t, "capacity-shard", "v1-writer", map[string]any{"quota": quota, "used": used, "applied_batch": 0,
		"pending": []map[string]any{{"key": pending, "at_unix_nano": at.UnixNano()}}})
}

// v1Object frames payload as format 1 wrote an object of the given kind: the JSON data, a
// write token, and the CRC-32C of the data.
func v1Object(t *testing.T, kind, token string, payload any) []byte {
	t.Helper()
	data, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"kind": kind, "v": 1, "token": token, "data": json.RawMessage(data),
		"crc32c": crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestAdversaryFormatOnePendingEntryKeepsASecondSlotForOneRow: a format 1 admission took a slot
// (its pending entry names no reservation) and died before creating its row; the ledger is
// upgraded, and the sender's retry of the same delivery is admitted by format 2 code within
// the grace. Settlement judges the format 1 entry "its row exists" (any row at the key) and
// keeps its slot, besides the slot the format 2 admission took: one row, two slots, for good.
// After settlement and cleanup the capacity record must count the rows exactly.
func TestAdversaryFormatOnePendingEntryKeepsASecondSlotForOneRow(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	l, _ := w.handle("ingress", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(time.Time{})
	// The format 1 admission of d, cut off after its slot: used 1, d pending, no row.
	body := v1Shard(t, w.limits.RecordCap, 1, d.Key(), w.store.Now())
	if _, err := minioRaw.PutObject(w.ctx, testBucket, w.prefix+"capacity/00.json", bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	w.store.Advance(30 * time.Second)
	w.admit(l, d, ledger.Admitted)
	w.store.Advance(10 * time.Minute) // every pending entry is settled from here on
	w.cleanLap(cleaner)
	w.exact(cleaner)
}

// capture sits in front of a handle's transport: requests that match are copied as signed and
// not sent (the client sees a failure before sending), so the test can deliver the copy later,
// as a request held in the network and delivered after the client gave up and retried.
type capture struct {
	base http.RoundTripper

	mu    sync.Mutex
	rules []*captureRule
}

type captureRule struct {
	match func(r *http.Request, body []byte) bool
	times int // requests still to capture; -1 every one
	got   []*http.Request
	body  [][]byte
}

func (c *capture) add(match func(*http.Request, []byte) bool, times int) *captureRule {
	r := &captureRule{match: match, times: times}
	c.mu.Lock()
	c.rules = append(c.rules, r)
	c.mu.Unlock()
	return r
}

func (c *capture) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := peekBody(r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for _, rule := range c.rules {
		if rule.times != 0 && rule.match(r, body) {
			if rule.times > 0 {
				rule.times--
			}
			rule.got = append(rule.got, r.Clone(r.Context()))
			rule.body = append(rule.body, body)
			c.mu.Unlock()
			return nil, errInjected
		}
	}
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// deliver sends the i-th captured request as it was signed, straight to the store.
func (rule *captureRule) deliver(t *testing.T, i int) (int, string) {
	t.Helper()
	if len(rule.got) <= i {
		t.Fatalf("only %d request(s) captured", len(rule.got))
	}
	r := rule.got[i].Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(rule.body[i]))
	r.ContentLength = int64(len(rule.body[i]))
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		t.Fatalf("deliver %s %s: %v", r.Method, r.URL.Path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(msg)
}

// captureHandle opens a handle whose requests pass through a capture first.
func (w *world) captureHandle(name string, adjust func(*objstore.Config)) (*objstore.Ledger, *capture) {
	w.t.Helper()
	tr := newTransport(&counter{})
	tr.setStoreClock(w.store)
	c := &capture{base: tr}
	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: c, Timeout: 2 * time.Minute},
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
	return l, c
}

func objectKind(kind string) func(*http.Request, []byte) bool {
	return func(_ *http.Request, body []byte) bool { return bytes.Contains(body, []byte(`"kind":"`+kind+`"`)) }
}

func both(a, b func(*http.Request, []byte) bool) func(*http.Request, []byte) bool {
	return func(r *http.Request, body []byte) bool { return a(r, body) && b(r, body) }
}

// TestAdversaryReplayedReservationLetsAHeldRowWriteLandWithoutASlot: an ETag names bytes, not a
// write. The reservation body is the same in every attempt of its PUT, so a first attempt
// delivered late re-creates, on a key that settlement voided and cleanup emptied, an object
// with the very ETag the admission's row write is conditioned on. Interleaving (cap 1):
//
//	ingress: reservation PUT attempt 1 is held in the network; the SDK's attempt 2 creates
//	       R (ETag E); the ingress takes the slot; its row PUT (If-Match: E) is held in the
//	       network and the ingress gives up (Admit fails)
//	+3m    cleanup: the pending entry is past the grace: R is voided, the slot given back;
//	       the next pass removes the void reservation by version: the key is empty
//	       attempt 1 of the reservation lands: If-None-Match passes, R is back with ETag E
//	       the row PUT lands: If-Match E passes: a row that no slot counts
//
// Every request lands within a few minutes of its signature.
func TestAdversaryReplayedReservationLetsAHeldRowWriteLandWithoutASlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 1
	ingress, c := w.captureHandle("ingress", nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(time.Time{})
	row := both(rowRequest(d, http.MethodPut), objectKind("row"))
	res := c.add(both(rowRequest(d, http.MethodPut), objectKind("reservation")), 1)
	rowPut := c.add(row, -1)
	if a, err := ingress.Admit(w.ctx, d); err == nil {
		t.Fatalf("admit succeeded (%v) although every row write failed", a.Outcome)
	}
	if len(res.got) != 1 || len(rowPut.got) == 0 {
		t.Fatalf("captured %d reservation and %d row writes", len(res.got), len(rowPut.got))
	}
	w.store.Advance(3 * time.Minute)
	for i := 0; i < 3; i++ {
		w.cleanLap(cleaner)
	}
	// Fixed: the void reservation stays until no copy of its PUT can land any more (16
	// minutes by the store's clock), so the key is never empty while one could.
	if _, err := minioRaw.StatObject(w.ctx, testBucket, w.prefix+objstore.RowName(d.Key()), minio.StatObjectOptions{}); err != nil {
		t.Fatalf("cleanup removed the void reservation within the life of its requests: %v", err)
	}
	st := w.exact(cleaner)
	if st.Rows != 0 {
		t.Fatalf("%d rows before the late requests", st.Rows)
	}
	code, msg := res.deliver(t, 0)
	if code/100 == 2 {
		t.Fatalf("the late reservation attempt landed: %d %s", code, msg)
	}
	code, msg = rowPut.deliver(t, 0)
	t.Logf("late row write: %d %s", code, msg)
	if code/100 != 2 {
		w.exact(cleaner)
		return // refused: the row cannot land
	}
	st, err := cleaner.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	after, err := cleaner.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Rows > after.CapacityUsed || st.Rows > st.CapacityUsed {
		other := w.delivery(time.Time{})
		a, aerr := cleaner.Admit(w.ctx, other)
		t.Fatalf("a row no slot counts: %d row(s), capacity records %d (after settlement and cleanup: %d rows, %d slots); "+
			"another delivery under a cap of 1 is then answered %v %v", st.Rows, st.CapacityUsed, after.Rows, after.CapacityUsed, a.Outcome, aerr)
	}
}

// suspendedClock is a host's monotonic clock that does not count the time the host was
// suspended (Linux CLOCK_MONOTONIC, which Go's time.Now reads for elapsed time, stops while the
// machine sleeps): it follows the store's clock less the time spent suspended.
type suspendedClock struct {
	store *ledger.ManualClock
	mu    sync.Mutex
	slept time.Duration
}

func (c *suspendedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.store.Now().Add(-c.slept)
}

func (c *suspendedClock) sleep(d time.Duration) {
	c.mu.Lock()
	c.slept += d
	c.mu.Unlock()
}

// TestAdversarySuspendedHostSavesAfterItsLeaseEnded: the store-clock estimate adds the host's
// elapsed monotonic time to the last Date seen, and a decision on a cached row makes no
// request before it decides. A host that was suspended (a VM paused, a laptop asleep) counts
// none of that time: its estimate is behind the store by the whole suspension, not "a second
// plus one answer's transit". Interleaving:
//
//	T      worker: Claim -> Execute, lease 30s (the row is cached)
//	       the host is suspended for 10 minutes; nobody else claims
//	T+10m  worker: Save under the lease that ended 9.5 minutes ago: decided on the cached row
//	       at "T" and written (If-Match holds: nobody wrote the row). Invariant 4: an owner
//	       whose lease expired cannot Save, even if no one else claimed.
func TestAdversarySuspendedHostSavesAfterItsLeaseEnded(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	worker, _ := w.handle("worker", 0, func(c *objstore.Config) { c.Clock = host })
	d := w.delivery(time.Time{})
	w.admit(worker, d, ledger.Admitted)
	c, err := worker.Claim(w.ctx, d.Key(), d.Binding.Digest(), "worker", 30*time.Second)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	w.store.Advance(10 * time.Minute)
	host.sleep(10 * time.Minute)
	if _, err := worker.Save(w.ctx, *c.Lease, []byte("late verdict")); !errors.Is(err, ledger.ErrLeaseLost) {
		row, _ := worker.Inspect(w.ctx, d.Key())
		t.Fatalf("save 10 minutes (store time) after a 30s lease ended: %v, want ErrLeaseLost; the row is %v "+
			"(lease until %s, store now %s)", err, row.State, c.Lease.Expires.Format(time.TimeOnly), w.store.Now().Format(time.TimeOnly))
	}
}

// TestAdversarySuspendedIngressReadmitsAForgottenDelivery: admission decides freshness on the
// estimate before its first request, and the estimate of a host that was suspended is behind
// by the whole suspension (see above). No request is held here. Interleaving (accepted age 5m,
// queue ceiling 2m, so retention ends at S+7m):
//
//	S+1m   ingress-a answers something (its estimate is S+1m), then its host is suspended
//	S+1m   ingress-b admits d; it is run, saved and completed
//	S+7m+1 cleanup forgets the row; the high-water says d is stale
//	S+8m   ingress-a wakes; the sender's replay of d arrives: decided fresh at "S+1m", the key
//	       is empty, d is Admitted again and evaluated a second time.
func TestAdversarySuspendedIngressReadmitsAForgottenDelivery(t *testing.T) {
	w := newWorld(t)
	w.limits.QueueCeiling = 2 * time.Minute
	host := &suspendedClock{store: w.store}
	a, _ := w.handle("ingress-a", 0, func(c *objstore.Config) { c.Clock = host })
	b, _ := w.handle("ingress-b", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(w.store.Now())
	w.store.Advance(time.Minute)
	w.admit(a, w.delivery(time.Time{}), ledger.Admitted) // ingress-a's last answer before it sleeps
	ledgertest.MustComplete(t, b, w.saved(b, d, "first verdict"))
	row, err := b.Inspect(w.ctx, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	asleep := ledger.MaxTime(row.RetainUntil, row.CreatedAt.Add(objstore.RequestLife)).Add(time.Minute).Sub(w.store.Now())
	w.store.Advance(asleep)
	host.sleep(asleep)
	if rep := w.cleanLap(cleaner); len(rep.Removed) != 1 {
		t.Fatalf("cleanup removed %d rows, want 1", len(rep.Removed))
	}
	got, err := a.Admit(w.ctx, d)
	if err == nil && got.Outcome == ledger.Admitted {
		t.Fatalf("a replay of a delivery forgotten as stale was admitted again (evaluation %s, first %s) by an ingress "+
			"whose host had been suspended: it is evaluated and published twice", got.EvaluationID, row.EvaluationID)
	}
}

// TestAdversaryOneAdmissionReadsEveryRecentlyAdmittedKey: a successful admission leaves its
// pending entry in the shard; nobody settles it until it is past the grace, and then the next
// admission that touches the shard judges every such entry, one GET of its key each (up to
// maxPending, 512, per shard). The requests of one admission then grow with the number of
// admissions of the last minutes, not bounded by a constant (invariant 10: admission issues a
// bounded number of object operations; the documented count is 4).
func TestAdversaryOneAdmissionReadsEveryRecentlyAdmittedKey(t *testing.T) {
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
	if ops, _ := tr.count.snapshot(); ops > 8 {
		t.Fatalf("one admission after a burst of %d made %d requests (%v); uncontended it makes 4", burst, ops, tr.count.kinds())
	}
}

var _ = fmt.Sprintf
