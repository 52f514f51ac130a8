package githubapp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The refusals a caller tells apart with errors.Is.
var (
	// ErrInstallationRefused: GitHub refused the installation (404 or 403 on the token
	// exchange or the installation lookup): the App is not installed there (or no longer),
	// the installation is suspended, or it lacks a permission. Retrying does not help until
	// someone with access to the account changes the installation.
	ErrInstallationRefused = errors.New("installation refused")
	// ErrKeyRefused: GitHub refused the App's JWT (401): the App id is wrong, the private key
	// is revoked or belongs to another App, or this host's clock is off by minutes.
	ErrKeyRefused = errors.New("App JWT refused")
)

// Error is a request to GitHub's App endpoints that failed. It never holds a token, a JWT
// or the key.
type Error struct {
	// Op says what was asked, for example "create an installation token for installation 42".
	Op string
	// Status is GitHub's HTTP status; 0 when there was no answer.
	Status int
	// Message is GitHub's own message, when it sent one.
	Message string
	// Retryable: the network, a timeout, a 5xx or a rate limit; the same request may succeed
	// later (after RetryAfter, when GitHub named a wait).
	Retryable  bool
	RetryAfter time.Duration
	// Kind is ErrInstallationRefused, ErrKeyRefused or nil.
	Kind error
	// Err is the underlying cause (a network error), or nil.
	Err error
	// Hint says what to do.
	Hint string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("githubapp: ")
	b.WriteString(e.Op)
	switch {
	case e.Status != 0:
		fmt.Fprintf(&b, ": GitHub answered %d", e.Status)
		if e.Message != "" {
			fmt.Fprintf(&b, " %q", e.Message)
		}
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Kind != nil {
		fmt.Fprintf(&b, " (%v)", e.Kind)
	}
	if e.Hint != "" {
		b.WriteString(": ")
		b.WriteString(e.Hint)
	}
	if e.Retryable {
		b.WriteString(" (temporary")
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, ", retry after %s", e.RetryAfter)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As the kind and the cause.
func (e *Error) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Temporary reports whether err is a failure the same request may overcome later: the
// network, a timeout, a 5xx or a rate limit (not a refusal, not the caller's own cancelled
// context).
func Temporary(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// maxMessage bounds how much of GitHub's message an error repeats.
const maxMessage = 300

// keyHint is the remedy of a refused JWT.
const keyHint = "check the App id (publish.app.id: the App's id or client id, on its settings page), " +
	"that the private key is a current key of that App (a revoked or deleted key is refused; generate a new one), " +
	"and that this host's clock is right (GitHub refuses a JWT whose times are off by more than a minute or so)"

// classify turns an answer that is not the expected success into an *Error. installation is
// the installation concerned (0: none).
func classify(op string, resp *http.Response, body []byte, now time.Time) *Error {
	e := &Error{Op: op, Status: resp.StatusCode, Message: message(body)}
	rateLimited := resp.Header.Get("X-Ratelimit-Remaining") == "0" || resp.Header.Get("Retry-After") != "" ||
		strings.Contains(strings.ToLower(e.Message), "rate limit")
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests || (code == http.StatusForbidden && rateLimited):
		e.Retryable, e.RetryAfter = true, retryAfter(resp.Header, now)
		e.Hint = "GitHub's rate limit"
	case code >= 500:
		e.Retryable = true
	case code == http.StatusUnauthorized:
		e.Kind, e.Hint = ErrKeyRefused, keyHint
		if d, ok := clockOffset(resp.Header, now); ok {
			e.Hint += fmt.Sprintf("; this host's clock is %s %s GitHub's", d.Abs().Round(time.Second), map[bool]string{true: "behind", false: "ahead of"}[d > 0])
		}
	case code >= 300 && code < 400:
		e.Hint = "GitHub answered a redirect to " + strconv.Quote(resp.Header.Get("Location")) + ": check publish.base_url"
	}
	return e
}

// clockOffset is how far GitHub's clock (its Date header) is ahead of now, when it is more
// than the minute the JWT's iat allows for.
func clockOffset(h http.Header, now time.Time) (time.Duration, bool) {
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return 0, false
	}
	d := date.Sub(now)
	return d, d.Abs() > time.Minute
}

// retryAfter reads Retry-After (seconds) or x-ratelimit-reset (a Unix time); a minute when
// GitHub named neither.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-Ratelimit-Reset")), 10, 64); err == nil {
		if d := time.Unix(s, 0).Sub(now); d > 0 {
			return min(d, time.Hour)
		}
	}
	return time.Minute
}
