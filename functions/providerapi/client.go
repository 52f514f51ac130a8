package providerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of one call's own retries. Longer waits are the caller's to schedule.
const (
	DefaultAttempts = 3
	firstWait       = time.Second
	// MaxCallWait is the longest wait a call sleeps through; a provider asking for more gets
	// the error back with its RetryAfter, and the caller (the runner) schedules the attempt.
	MaxCallWait = 10 * time.Second
	// DefaultTimeout bounds one request when the caller gives no client.
	DefaultTimeout = 15 * time.Second
)

// Bounds of an answer read, by default: a write's answer (a status, a check run) is small; a
// read's is a page of a listing (100 statuses with their descriptions and links, or 100 files
// with their patches).
const (
	DefaultWriteAnswer = 64 << 10
	DefaultReadAnswer  = 4 << 20
)

// Client sends requests to one provider API: JSON in, a bounded answer out, a few quick
// retries within one call. It follows no redirect and sends nothing outside its base URL's
// origin. It is safe for concurrent use once set up.
type Client struct {
	// BaseURL is the API's base, without a trailing slash.
	BaseURL string
	// HTTP sends the requests (nil: one with DefaultTimeout). Its Timeout bounds each
	// request; its redirects are never followed.
	HTTP *http.Client
	// MaxAttempts is the attempts within one call (0: DefaultAttempts).
	MaxAttempts int
	// Sleep waits between attempts (nil: a timer, cut short by the context).
	Sleep func(context.Context, time.Duration) error
	// Now is this host's clock, used where an answer carries no Date (nil: time.Now).
	Now func() time.Time
	// Classify reads an answer that is not a 2xx (nil: Classify).
	Classify func(resp *http.Response, body []byte, now time.Time) *Error
}

// Request is one request to the API.
type Request struct {
	Method string
	// URL is a path with its query, joined to the base URL, or an absolute URL on the base
	// URL's origin (a next page's link).
	URL string
	// Header is set on the request (credentials, media types).
	Header http.Header
	// Body, when not nil, is sent as JSON.
	Body any
	// MaxBytes bounds the answer read (0: DefaultReadAnswer for a GET, DefaultWriteAnswer
	// otherwise). A longer answer is cut, and Answer.Cut says so.
	MaxBytes int64
}

// WithHeader returns r with each field of h set over r's own (a credential, a media type), its
// keys canonical. r's Header is copied, never changed.
func (r Request) WithHeader(h http.Header) Request {
	out := make(http.Header, len(r.Header)+len(h))
	for k, vs := range r.Header {
		out[http.CanonicalHeaderKey(k)] = vs
	}
	for k, vs := range h {
		out[http.CanonicalHeaderKey(k)] = vs
	}
	r.Header = out
	return r
}

// Answer is a provider's 2xx answer.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// Cut: the answer was longer than the request's MaxBytes; Body holds its beginning.
	Cut bool
	// URL is the URL the request was sent to (next-page links are resolved against it).
	URL *url.URL
	// Now is the provider's time at the answer (its Date), or this host's when it sent none.
	Now time.Time
}

// ErrAnswerTooLong marks the error of an answer longer than the bound its request named. It
// is Transient for a publisher (what the provider holds stays unknown); a reader of what a
// webhook lacks takes it for good, since asking again gets the same answer: the input is
// marked unread, naming the bound.
var ErrAnswerTooLong = errors.New("answer too long")

// ReadAgain reports whether a reader of what a webhook lacks should ask again later: a
// Transient failure, but not an answer longer than its bound (asking again gets the same).
func ReadAgain(err error) bool {
	return ClassOf(err) == Transient && !errors.Is(err, ErrAnswerTooLong)
}

// Decode reads the answer's JSON into v. An answer cut at its bound (ErrAnswerTooLong), or not
// JSON, leaves what the provider holds unknown for now: a Transient error naming what was read.
func (a *Answer) Decode(what string, v any) error {
	if a.Cut {
		return &Error{Class: Transient, Status: a.Status, Err: fmt.Errorf("%s is longer than the %d MiB amiss reads of an answer (%w)",
			what, len(a.Body)>>20, ErrAnswerTooLong)}
	}
	if err := json.Unmarshal(a.Body, v); err != nil {
		return &Error{Class: Transient, Status: a.Status, Err: fmt.Errorf("%s does not decode: %v", what, err)}
	}
	return nil
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// SleepCtx waits d, or until ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wait sleeps d through the client's Sleep.
func (c *Client) Wait(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return SleepCtx(ctx, d)
}

// httpClient is the caller's client (default: DefaultTimeout) made to follow no redirect: Go
// follows a 301, 302 or 303 on a POST as a GET without the body, and the GET of a statuses
// path lists the commit's statuses with a 200 that would be taken for a posted status.
func (c *Client) httpClient() *http.Client {
	hc := http.Client{Timeout: DefaultTimeout}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

// URL returns the absolute URL of ref: a path joined to the base URL, or an absolute URL,
// which must be on the base URL's origin (scheme and host) and under its path, so that a
// link in an answer can never send the credentials elsewhere.
func (c *Client) URL(ref string) (*url.URL, error) {
	base, err := url.Parse(c.BaseURL)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("base URL %q is not an absolute URL", c.BaseURL)
	}
	if !strings.Contains(ref, "://") {
		return url.Parse(strings.TrimRight(c.BaseURL, "/") + ref)
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) ||
		!strings.HasPrefix(u.EscapedPath(), strings.TrimRight(base.EscapedPath(), "/")+"/") {
		return nil, fmt.Errorf("%s://%s%s is outside the base URL %s", u.Scheme, u.Host, u.EscapedPath(), c.BaseURL)
	}
	return u, nil
}

func (c *Client) build(ctx context.Context, r Request) (*http.Request, error) {
	u, err := c.URL(r.URL)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Do sends r, retrying within the call what may succeed at once: a transient failure of a
// read, or of a write that surely did not apply (the provider's own refusal, a connection
// never made), waiting at least the provider's Retry-After and at most MaxCallWait. A write
// that may have applied is never sent again: its error is Unknown, and the caller reads back
// first. No attempt is sent past ctx's SendBefore bound. It returns a 2xx answer, or an
// *Error.
func (c *Client) Do(ctx context.Context, r Request) (*Answer, error) {
	attempts := c.MaxAttempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	classify := c.Classify
	if classify == nil {
		classify = Classify
	}
	wait := firstWait
	for i := 0; ; i++ {
		req, err := c.build(ctx, r)
		if err != nil {
			// Nothing was sent: the base URL (or a name put into the path) cannot make a
			// request. An operator's to fix, like a token that cannot be read.
			return nil, &Error{Class: Operator, Err: fmt.Errorf("no request can be built (check base_url): %w", err)}
		}
		if e := tooLateToSend(ctx, req); e != nil {
			return nil, e
		}
		a, e := c.send(req, r, classify)
		if e == nil {
			return a, nil
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			e.Unknown = false // a read applies nothing
		}
		if e.Class != Transient || e.Unknown || i+1 >= attempts || ctx.Err() != nil {
			return nil, e
		}
		w := max(wait, e.RetryAfter)
		if w > MaxCallWait {
			return nil, e // the caller schedules a wait this long
		}
		if err := c.Wait(ctx, w); err != nil {
			return nil, e
		}
		wait *= 2
	}
}

// send makes one request and reads its answer.
func (c *Client) send(req *http.Request, r Request, classify func(*http.Response, []byte, time.Time) *Error) (*Answer, *Error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, &Error{Class: Transient, Unknown: sent(err), Err: fmt.Errorf("%s %s: %w", req.Method, req.URL.EscapedPath(), stripURL(err))}
	}
	defer resp.Body.Close()
	limit := r.MaxBytes
	switch {
	case limit > 0:
	case req.Method == http.MethodGet:
		limit = DefaultReadAnswer
	default:
		limit = DefaultWriteAnswer
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	now := c.now()
	if resp.StatusCode/100 != 2 {
		e := classify(resp, body[:min(int64(len(body)), limit)], now)
		e.Unknown = e.Unknown || mayHaveApplied(resp.StatusCode)
		return nil, e
	}
	if rerr != nil {
		// The provider answered 2xx and the body was cut in transit: applied, answer lost.
		return nil, &Error{Class: Transient, Status: resp.StatusCode, Unknown: true,
			Err: fmt.Errorf("%s %s answered %d and its answer was cut: %v", req.Method, req.URL.EscapedPath(), resp.StatusCode, rerr)}
	}
	a := &Answer{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: req.URL, Now: ProviderNow(resp.Header, now)}
	if int64(len(body)) > limit {
		a.Body, a.Cut = body[:limit], true
	}
	return a, nil
}

// stripURL drops the URL a *url.Error repeats (its query may name a repository or a branch;
// the path is in the message already).
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// mayHaveApplied reports whether an answer with this HTTP status leaves open whether the
// provider applied the request: a 500 (it failed somewhere, maybe after the write) and a
// gateway's 502 or 504 (the provider behind it may have finished). Every other answer is the
// provider's own, and says it did not (4xx, 501, 503).
func mayHaveApplied(code int) bool {
	return code == http.StatusInternalServerError || code == http.StatusBadGateway || code == http.StatusGatewayTimeout
}

// sent reports whether a request that failed in transport may have reached the provider: it
// did unless the connection was never made.
func sent(err error) bool {
	var op *net.OpError
	return !(errors.As(err, &op) && op.Op == "dial")
}
