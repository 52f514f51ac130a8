package providerapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// A client's credential and media type are set over what a request carries, whatever the case
// of its keys, and the caller's request is left as it was (a retry of it starts clean).
func TestAClientsHeaderIsSetOverTheRequestsOwn(t *testing.T) {
	r := providerapi.Request{Method: http.MethodGet, URL: "/x", Header: http.Header{"accept": {"text/plain"}, "If-None-Match": {`"v1"`}}}
	got := r.WithHeader(http.Header{"Accept": {"application/json"}, "PRIVATE-TOKEN": {"secret"}})
	want := http.Header{"Accept": {"application/json"}, "Private-Token": {"secret"}, "If-None-Match": {`"v1"`}}
	if len(got.Header) != len(want) {
		t.Fatalf("header %v, want %v", got.Header, want)
	}
	for k, vs := range want {
		if g := got.Header.Values(k); len(g) != 1 || g[0] != vs[0] {
			t.Errorf("%s: %v, want %v", k, g, vs)
		}
	}
	if len(r.Header) != 2 || r.Header["accept"][0] != "text/plain" {
		t.Errorf("the caller's request changed: %v", r.Header)
	}
}

// A request is sent only before the context's SendBefore bound by the wall clock given: at or
// past it, the call answers a transient error saying the request was not sent (nothing was
// applied), whatever the context's own deadline says; a retry within the call that would go
// past it is not sent either.
func TestNoRequestIsSentPastItsWallClockBound(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	bound := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	wall := bound.Add(-time.Second)
	c := &providerapi.Client{BaseURL: srv.URL, HTTP: srv.Client(), MaxAttempts: 3,
		Sleep: func(context.Context, time.Duration) error { wall = wall.Add(time.Second); return nil }}
	ctx := providerapi.SendBefore(context.Background(), bound, func() time.Time { return wall })
	_, err := c.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: "/statuses/abc", Body: []byte(`{}`)})
	var e *providerapi.Error
	if !errors.As(err, &e) || e.Class != providerapi.Transient || e.Unknown || !strings.Contains(err.Error(), "POST /statuses/abc not sent") {
		t.Fatalf("a call whose retry falls at the bound: %v, want a transient error saying the request was not sent", err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("%d requests sent, want 1 (the first, before the bound; its retry at the bound not)", n)
	}

	wall = bound.Add(time.Hour)
	if _, err := c.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: "/statuses/abc"}); !errors.As(err, &e) || e.Unknown {
		t.Fatalf("a read past the bound: %v, want not sent", err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("%d requests sent after the bound, want none", n-1)
	}
}
