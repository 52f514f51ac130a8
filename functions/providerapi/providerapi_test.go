package providerapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Retry-After is delay-seconds or an HTTP date; a date is measured against the answer's own
// Date, so this host's clock, however far off, does not change the wait; every wait is bounded
// by an hour.
func TestRetryAfterIsReadAgainstTheAnswersDate(t *testing.T) {
	date := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	hostClock := date.Add(-3 * time.Hour) // this host's clock, three hours slow
	for _, c := range []struct {
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{http.Header{"Retry-After": {"120"}}, 2 * time.Minute, true},
		{http.Header{"Retry-After": {" 0 "}}, 0, true},
		{http.Header{"Retry-After": {date.Add(20 * time.Minute).Format(http.TimeFormat)}, "Date": {date.Format(http.TimeFormat)}}, 20 * time.Minute, true},
		{http.Header{"Retry-After": {date.Add(-time.Minute).Format(http.TimeFormat)}, "Date": {date.Format(http.TimeFormat)}}, 0, true},
		{http.Header{"Retry-After": {"86400"}}, time.Hour, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
	} {
		got, ok := providerapi.RetryAfter(c.header, hostClock)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.header, got, ok, c.want, c.ok)
		}
	}
	h := http.Header{"Date": {date.Format(http.TimeFormat)}, "X-Reset": {fmt.Sprint(date.Add(15 * time.Minute).Unix())}}
	if got, ok := providerapi.ResetWait(h, "X-Reset", hostClock); !ok || got != 15*time.Minute {
		t.Errorf("a reset time: %v %v", got, ok)
	}
}

// The Link header's next page is found among the others, whatever their order, quoting or
// the commas inside a URL.
func TestTheNextLinkIsFoundInALinkHeader(t *testing.T) {
	for header, want := range map[string]string{
		`<https://a/x?page=2>; rel="next", <https://a/x?page=9>; rel="last"`:     "https://a/x?page=2",
		`<https://a/x?page=9>; rel="last", <https://a/x?p=1,2&page=3>; rel=next`: "https://a/x?p=1,2&page=3",
		`<https://a/x?page=1>; rel="prev first"`:                                 "",
		`<https://a/x?page=4>; title="a, b"; rel="prev next"`:                    "https://a/x?page=4",
	} {
		got, linked := providerapi.NextLink(http.Header{"Link": {header}})
		if got != want || !linked {
			t.Errorf("%s: %q, want %q", header, got, want)
		}
	}
	if _, linked := providerapi.NextLink(http.Header{}); linked {
		t.Error("no Link header read as linked")
	}
}

// A read applies nothing: its 500 is not Unknown, and it is tried again within the call. A
// write answered 500 may have applied: Unknown, and never sent again; answered 503, it did not
// apply, and is tried again.
func TestAWriteThatMayHaveAppliedIsNeverSentAgain(t *testing.T) {
	var requests atomic.Int32
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	c := &providerapi.Client{BaseURL: srv.URL, HTTP: srv.Client(), Sleep: func(context.Context, time.Duration) error { return nil }}
	for _, x := range []struct {
		method   string
		code     int
		unknown  bool
		requests int32
	}{
		{http.MethodGet, 500, false, 3},
		{http.MethodPost, 500, true, 1},
		{http.MethodPost, 502, true, 1},
		{http.MethodPost, 503, false, 3},
		{http.MethodPatch, 504, true, 1},
	} {
		requests.Store(0)
		code.Store(int32(x.code))
		_, err := c.Do(context.Background(), providerapi.Request{Method: x.method, URL: "/x"})
		if providerapi.Unknown(err) != x.unknown || requests.Load() != x.requests || providerapi.ClassOf(err) != providerapi.Transient {
			t.Errorf("%s answered %d: %v, unknown %v after %d requests; want unknown %v after %d", x.method, x.code, err,
				providerapi.Unknown(err), requests.Load(), x.unknown, x.requests)
		}
	}
}

// A redirect is never followed (a POST would be sent again as a GET without its body): it is
// the operator's base URL to fix. A link off the base URL's origin is never sent the
// credentials.
func TestNoRequestLeavesTheBaseURL(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.RedirectHandler(other.URL+"/x", http.StatusMovedPermanently))
	defer srv.Close()
	c := &providerapi.Client{BaseURL: srv.URL + "/api", HTTP: srv.Client()}
	_, err := c.Do(context.Background(), providerapi.Request{Method: http.MethodPost, URL: "/x", Body: map[string]string{"a": "b"}})
	if providerapi.ClassOf(err) != providerapi.Operator || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("a redirect: %v", err)
	}
	for _, ref := range []string{other.URL + "/api/x", srv.URL + "/elsewhere", "ftp" + strings.TrimPrefix(srv.URL, "http") + "/api/x"} {
		if _, err := c.Do(context.Background(), providerapi.Request{Method: http.MethodGet, URL: ref}); providerapi.ClassOf(err) != providerapi.Operator {
			t.Errorf("%s: %v", ref, err)
		}
	}
	if elsewhere.Load() != 0 {
		t.Fatalf("%d requests left the base URL", elsewhere.Load())
	}
}

// An answer longer than its bound is read up to it, and decoding it is a Transient error that
// says so: never a partial list taken as whole.
func TestAnAnswerPastItsBoundIsNotDecoded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[%s"x"]`, strings.Repeat(`"x",`, 1000))
	}))
	defer srv.Close()
	c := &providerapi.Client{BaseURL: srv.URL, HTTP: srv.Client()}
	a, err := c.Do(context.Background(), providerapi.Request{Method: http.MethodGet, URL: "/x", MaxBytes: 100})
	if err != nil || !a.Cut || len(a.Body) != 100 {
		t.Fatalf("%v, cut %v, %d bytes", err, a != nil && a.Cut, len(a.Body))
	}
	var v []string
	if err := a.Decode("the list", &v); providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("decoding a cut answer: %v", err)
	}
}
