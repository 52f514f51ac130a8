package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Duplicated and replayed writes, and answers that do not tell what happened: a copy of a
// request reaches the store before the original (a proxy that re-sends or hedges), a copy
// captured as signed is delivered minutes later, a write lands and its answer is lost. A writer
// recognises its own write by its token; a late copy can only land where its condition still
// holds.

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
	var d *dupTransport
	l, _, err := w.openVia(name, 0, func(tr *transport) http.RoundTripper { d = &dupTransport{base: tr}; return d }, adjust)
	if err != nil {
		w.t.Fatalf("open %s: %v", name, err)
	}
	return l, d
}

// TestDuplicatedShardWriteHoldsNoSecondSlot: store.put answers errRaced for a 412 to its
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
//	recount: both entries name R and K holds R's row: both "the row's": used stays 2
//	another delivery: Full, with one row under a cap of 2, for good (cleanup never gives
//	         the second slot back; invariant 11, and "slots used equal to rows").
//
// slowDownThenCopy is the same through the other branch: the first attempt is answered 503
// (nothing applied, sent stays false) while a copy of it lands between the read-back (which
// finds the shard unchanged) and the second attempt, which is answered 412 -> errRaced.
func TestDuplicatedShardWriteHoldsNoSecondSlot(t *testing.T) {
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
				t.Fatalf("after one admission whose shard write was duplicated, and recount and cleanup: %d row(s), "+
					"capacity records %d; another delivery under a cap of %d is answered %v %v",
					st.Rows, st.CapacityUsed, w.limits.RecordCap, b.Outcome, berr)
			}
		})
	}
}

// TestDuplicatedRowCreateAnswersAdmitted: the same premise on the row write
// of an admission. The copy of the row PUT (If-Match on the reservation) lands first, the
// original is answered 412 -> errRaced -> recountShard finds the row and keeps the slot, the
// admission decides again, finds a row (its own) and answers Pending. A new delivery is answered
// as if someone had admitted it before (the model refuses this history: Pending for a key no
// call admitted), as the SDK's own retry of a row PUT would.
func TestDuplicatedRowCreateAnswersAdmitted(t *testing.T) {
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

// TestDuplicatedClaimWriteAnswersExecute: the same premise on a Claim. The
// copy of the claim's row write lands (Execute granted to this owner, fence 1), the original is
// answered 412 -> errRaced -> decided again on a fresh read: the lease is live (its own) -> Busy.
// The only claimer is told to come back when the lease it holds has ended; the answer names no
// lease, and the fence granted is never used. (No second verdict; linearizability and progress.)
func TestDuplicatedClaimWriteAnswersExecute(t *testing.T) {
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

// TestIfMatchOnARemovedRowIsALostRace: a handle holds a cached copy of a row that another
// handle completed and cleanup removed. Its next write (If-Match on a key that is gone, which
// MinIO answers 404, not 412) must be recounted as a lost race: the row is unknown now.
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
	var c *capture
	l, _, err := w.openVia(name, 0, func(tr *transport) http.RoundTripper { c = &capture{base: tr}; return c }, adjust)
	if err != nil {
		w.t.Fatalf("open %s: %v", name, err)
	}
	return l, c
}

// TestReplayedReservationLetsNoHeldRowWriteLandWithoutASlot: an ETag names bytes, not a
// write. The reservation body is the same in every attempt of its PUT, so a first attempt
// delivered late re-creates, on a key that recount voided and cleanup emptied, an object
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
func TestReplayedReservationLetsNoHeldRowWriteLandWithoutASlot(t *testing.T) {
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
	if _, err := minioRaw.StatObject(w.ctx, w.bucket, w.prefix+objstore.RowName(d.Key()), minio.StatObjectOptions{}); err != nil {
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
		t.Fatalf("a row no slot counts: %d row(s), capacity records %d (after recount and cleanup: %d rows, %d slots); "+
			"another delivery under a cap of 1 is then answered %v %v", st.Rows, st.CapacityUsed, after.Rows, after.CapacityUsed, a.Outcome, aerr)
	}
}
