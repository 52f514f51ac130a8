package objstore_test

import (
	"errors"
	"net/http"
	"sync"
	"time"
)

var errInjected = errors.New("injected transport failure")

// counter counts requests across every transport that shares it.
type counter struct {
	mu            sync.Mutex
	ops, listings int
	puts, deletes int
}

func (c *counter) snapshot() (ops, listings int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops, c.listings
}

func (c *counter) reset() {
	c.mu.Lock()
	c.ops, c.listings, c.puts, c.deletes = 0, 0, 0, 0
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
}

// fault is what a rule does to one request.
type fault int

const (
	pass         fault = iota
	failBefore         // an error before the request is sent
	loseResponse       // the request is applied, the answer lost
	slowDown           // a 503 SlowDown answer, nothing applied
	reset              // the connection is reset after the request is applied
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
	rule, latency := t.rule, t.latency
	t.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	t.count.mu.Lock()
	t.count.ops++
	if isListing(r) {
		t.count.listings++
	}
	t.count.mu.Unlock()
	f := pass
	if rule != nil {
		f = rule(r)
	}
	switch f {
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
	return resp, nil
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
