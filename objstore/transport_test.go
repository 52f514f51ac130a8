package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

var errInjected = errors.New("injected transport failure")

// counter counts requests across every transport that shares it.
type counter struct {
	mu            sync.Mutex
	ops, listings int
	byKind        map[string]int // GET, PUT, DELETE, LIST (objects), LIST-VERSIONS
}

// kinds returns the requests counted by kind.
func (c *counter) kinds() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.byKind {
		out[k] = v
	}
	return out
}

func (c *counter) snapshot() (ops, listings int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops, c.listings
}

func (c *counter) reset() {
	c.mu.Lock()
	c.ops, c.listings, c.byKind = 0, 0, nil
	c.mu.Unlock()
}

// transport is the S3 client's HTTP transport with counting and fault injection: a crash
// (every request from the nth mutating one on fails before it is sent), listings that fail,
// and per-request faults chosen by a rule.
type transport struct {
	base  http.RoundTripper
	count *counter

	mu           sync.Mutex
	crashAfter   int // mutating requests left before the crash; -1: none
	dead         bool
	listingsLeft int // listings left before they fail; -1: none
	rule         func(req *http.Request) fault
	latency      time.Duration // added before every request, as from a Lambda to S3
	holds        []*hold
	// storeClock, when set, is the store's clock: every answer's Date header is rewritten
	// to it, so a test moves the time the store reports (the ledger's only clock).
	storeClock ledger.Clock
	// spanned, when set, is told of each request held in flight, or copied and sent later,
	// while the store's clock stepped (a ledgertest.NodeClock counts its steps).
	spanned func()
}

// A hold keeps the first request it matches in flight until the test releases it: a paused
// Lambda, a slow connection. The request then goes to the store as it was signed.
type hold struct {
	match   func(r *http.Request, body []byte) bool
	arrived chan struct{}
	release chan struct{}
	done    chan error // what the store answered, once it was sent
	taken   bool
}

// holdNext holds the next request that match accepts. arrived is closed when the request is
// held; release sends it; the returned hold's done receives the outcome once it was sent.
func (t *transport) holdNext(match func(r *http.Request, body []byte) bool) *hold {
	h := &hold{match: match, arrived: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	t.mu.Lock()
	t.holds = append(t.holds, h)
	t.mu.Unlock()
	return h
}

// waitHeld waits until the hold has caught its request, failing the test after a minute.
func (h *hold) waitHeld(t testing.TB) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(time.Minute):
		t.Fatalf("no request reached the hold")
	}
}

// land releases the held request and waits for the store's answer.
func (h *hold) land(t testing.TB) error {
	t.Helper()
	close(h.release)
	select {
	case err := <-h.done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("the held request never landed")
	}
	return nil
}

// fault is what a rule does to one request.
type fault int

const (
	pass         fault = iota
	failBefore         // an error before the request is sent
	loseResponse       // the request is applied, the answer lost
	slowDown           // a 503 SlowDown answer, nothing applied
	reset              // the connection is reset after the request is applied
	holdInFlight       // the request is held in flight a while, then sent (it lands late)
	duplicate          // the request is sent, and a copy of it again later (a network's retry)
	crash              // the handle dies: this request and every later one fail unsent
)

func newTransport(c *counter) *transport {
	return &transport{base: http.DefaultTransport, count: c, crashAfter: -1, listingsLeft: -1}
}

func isListing(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Has("list-type")
}

func isMutating(r *http.Request) bool {
	return r.Method == http.MethodPut || r.Method == http.MethodDelete || r.Method == http.MethodPost
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.dead {
		t.mu.Unlock()
		return nil, errInjected
	}
	if isMutating(r) && t.crashAfter >= 0 {
		if t.crashAfter == 0 {
			t.dead = true
			t.mu.Unlock()
			return nil, errInjected
		}
		t.crashAfter--
	}
	if isListing(r) && t.listingsLeft >= 0 {
		if t.listingsLeft == 0 {
			t.mu.Unlock()
			return nil, errInjected
		}
		t.listingsLeft--
	}
	rule, latency, storeClock, spanned := t.rule, t.latency, t.storeClock, t.spanned
	var held *hold
	if len(t.holds) > 0 {
		body, err := peekBody(r)
		if err != nil {
			t.mu.Unlock()
			return nil, err
		}
		for _, h := range t.holds {
			if !h.taken && h.match(r, body) {
				h.taken, held = true, h
				break
			}
		}
	}
	t.mu.Unlock()
	if held != nil {
		close(held.arrived)
		<-held.release
		resp, err := t.base.RoundTrip(r)
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("held %s %s answered %s", r.Method, r.URL.Path, resp.Status)
		}
		held.done <- err
		if err == nil {
			resp = t.dated(resp, storeClock)
		}
		return resp, err
	}
	if latency > 0 {
		time.Sleep(latency)
	}
	t.count.mu.Lock()
	t.count.ops++
	kind := r.Method
	switch {
	case isListing(r):
		t.count.listings++
		kind = "LIST"
	case r.Method == http.MethodGet && r.URL.Query().Has("versions"):
		t.count.listings++
		kind = "LIST-VERSIONS"
	}
	if t.count.byKind == nil {
		t.count.byKind = map[string]int{}
	}
	t.count.byKind[kind]++
	t.count.mu.Unlock()
	f := pass
	if rule != nil {
		f = rule(r)
	}
	switch f {
	case crash:
		t.mu.Lock()
		t.dead = true
		t.mu.Unlock()
		return nil, errInjected
	case holdInFlight:
		// Held until the store's clock has moved on by up to a minute (leases end, others
		// go on), or at most half a second of real time.
		if storeClock == nil {
			time.Sleep(time.Duration(5+rand.IntN(60)) * time.Millisecond)
			break
		}
		steps := clockSteps(storeClock)
		sent := storeClock.Now()
		until := sent.Add(time.Duration(1+rand.IntN(60)) * time.Second)
		for deadline := time.Now().Add(500 * time.Millisecond); storeClock.Now().Before(until) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if n, ok := storeClock.(ledgertest.NodeClock); ok {
			n.Holding() // the node's clock may step under it
		}
		if spanned != nil && clockSteps(storeClock) != steps {
			spanned()
		}
		if outlived(sent, storeClock) {
			return nil, errTooOld
		}
	case duplicate:
		// The copy goes out as signed, once the store's clock has moved on or half a second
		// has passed; nobody reads its answer.
		body, err := peekBody(r)
		if err != nil {
			return nil, err
		}
		cp := r.Clone(context.Background())
		steps := clockSteps(storeClock)
		go func() {
			if storeClock != nil {
				sent := storeClock.Now()
				until := sent.Add(time.Duration(1+rand.IntN(60)) * time.Second)
				for deadline := time.Now().Add(500 * time.Millisecond); storeClock.Now().Before(until) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				if outlived(sent, storeClock) {
					return
				}
			}
			if spanned != nil && clockSteps(storeClock) != steps {
				spanned()
			}
			cp.Body = io.NopCloser(bytes.NewReader(body))
			if resp, err := t.base.RoundTrip(cp); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	case failBefore:
		return nil, errInjected
	case slowDown:
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Slow Down", Proto: "HTTP/1.1",
			ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/xml"}},
			Body: http.NoBody, Request: r, ContentLength: 0}, nil
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if f == loseResponse || f == reset {
		resp.Body.Close()
		if f == reset {
			return nil, errors.New("read tcp: connection reset by peer (injected)")
		}
		return nil, errInjected
	}
	return t.dated(resp, storeClock), nil
}

// heldLife is how long, by its node's clock, a request held in flight or copied by the network
// may still land: the store refuses one older than the life of its signature. The test store
// checks signatures on the machine's clock, which does not move with the test's; a request
// held while the test's clock jumps on (hours at once) is refused here instead. (The ledger's
// RequestLife in such tests covers a landing this long after sending, node clocks that step
// meanwhile, and nodes apart.)
const heldLife = 3 * time.Minute

var errTooOld = errors.New("held past its life: the store refuses it (RequestTimeTooSkewed)")

// outlived reports whether a request sent at sent, by storeClock, would now be refused.
func outlived(sent time.Time, storeClock ledger.Clock) bool {
	return storeClock.Now().Sub(sent) > heldLife
}

// peekBody reads a request's body and puts it back.
func peekBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// dated rewrites the answer's Date to the store clock, when the test sets one (the clock of
// the store node the handle talks to reads it as an answer's), and the Last-Modified of a
// version read to the store clock's time when it was written (see landings).
func (t *transport) dated(resp *http.Response, storeClock ledger.Clock) *http.Response {
	if storeClock == nil {
		return resp
	}
	date := storeClock.Now
	if n, ok := storeClock.(ledgertest.NodeClock); ok {
		date = n.Answer
	}
	now := date().UTC()
	resp.Header.Set("Date", now.Format(http.TimeFormat))
	if resp.StatusCode/100 == 2 && resp.Request != nil {
		switch resp.Request.Method {
		case http.MethodPut:
			landings.LoadOrStore(versionOf(resp), now)
		case http.MethodGet:
			if resp.Header.Get("Last-Modified") != "" {
				at, _ := landings.LoadOrStore(versionOf(resp), now)
				resp.Header.Set("Last-Modified", at.(time.Time).Format(http.TimeFormat))
			}
		}
	}
	return resp
}

// landings holds, for every object version written through a transport that reports a test's
// store clock, that clock's time when the write was answered: the Last-Modified the store's
// clock would have given it (the store's own is the machine's). A version written some other
// way (a copy delivered straight to the store, a fixture) counts as written when a transport
// first reads it.
var landings sync.Map // versionOf -> time.Time

// versionOf names the object version an answer is about: its version id, or its ETag when the
// bucket kept none.
func versionOf(resp *http.Response) string {
	v := resp.Header.Get("X-Amz-Version-Id")
	if v == "" || v == "null" {
		v = "etag " + resp.Header.Get("ETag")
	}
	return resp.Request.URL.Path + " " + v
}

// clockSteps counts the steps of a store clock that steps (ledgertest.NodeClock).
func clockSteps(c ledger.Clock) int64 {
	if s, ok := c.(ledgertest.NodeClock); ok {
		return s.Steps()
	}
	return 0
}

func (t *transport) setSpanned(f func()) {
	t.mu.Lock()
	t.spanned = f
	t.mu.Unlock()
}

func (t *transport) setStoreClock(c ledger.Clock) {
	t.mu.Lock()
	t.storeClock = c
	t.mu.Unlock()
}

func (t *transport) crash(n int) {
	t.mu.Lock()
	t.crashAfter = n
	if n < 0 {
		t.dead = false
	}
	t.mu.Unlock()
}

func (t *transport) failListings(n int) {
	t.mu.Lock()
	t.listingsLeft = n
	t.mu.Unlock()
}

func (t *transport) setRule(f func(*http.Request) fault) {
	t.mu.Lock()
	t.rule = f
	t.mu.Unlock()
}
