package providerapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxProviderWait bounds a wait read from a provider's answer (an hour is GitHub's rate-limit
// window), so that a wrong clock or header cannot park work for days.
const MaxProviderWait = time.Hour

// ProviderNow is the provider's own time at its answer, from its Date header (so that a wait
// computed from its clock does not depend on ours), or now when it sent none.
func ProviderNow(h http.Header, now time.Time) time.Time {
	if t, err := http.ParseTime(h.Get("Date")); err == nil {
		return t
	}
	return now
}

// RetryAfter reads a Retry-After header: delay-seconds, or an HTTP date measured against the
// answer's own Date (RFC 9110, section 10.2.3), bounded by MaxProviderWait. ok is false when
// there is none, or it is neither.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, MaxProviderWait), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(ProviderNow(h, now)), 0), MaxProviderWait), true
	}
	return 0, false
}

// ResetWait reads a rate limit's reset time, Unix seconds in the header name, against the
// answer's own Date, bounded by MaxProviderWait. ok is false when there is none.
func ResetWait(h http.Header, name string, now time.Time) (time.Duration, bool) {
	s, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
	if err != nil || s <= 0 {
		return 0, false
	}
	return min(max(time.Unix(s, 0).Sub(ProviderNow(h, now)), 0), MaxProviderWait), true
}

// maxAnswerText bounds how much of a provider's answer an error repeats.
const maxAnswerText = 300

// AnswerText is a provider's answer for an error message: trimmed and bounded.
func AnswerText(body []byte) string {
	s := strings.ToValidUTF8(strings.TrimSpace(string(body)), "�")
	if utf8.RuneCountInString(s) > maxAnswerText {
		s = string([]rune(s)[:maxAnswerText-1]) + "…"
	}
	return s
}

// Message is the "message" field of a provider's JSON error answer (GitHub, Gitea and GitLab
// send one), bounded, or "" when there is none.
func Message(body []byte) string {
	var m struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.Message) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(m.Message, &s) != nil {
		s = string(m.Message) // GitLab answers some refusals with an object of field errors
	}
	return AnswerText([]byte(s))
}

// Classify is the table every provider starts from, for an answer that is not a 2xx:
//
//   - 408, 409, 425, 429 and 5xx are transient (with the provider's Retry-After);
//   - 401, 403 and 404 are the operator's, and so is a redirect (the base URL names an address
//     the provider has moved from, or http where it wants https: a redirect is never followed,
//     since Go follows a POST's 301 as a GET without the body);
//   - every other 4xx (400, 410, 413, 422, ...) is permanent.
//
// A provider's package adjusts what its documentation says otherwise. The answer's request
// names the error (method and path; never a query, which may carry a name, nor a header).
func Classify(resp *http.Response, body []byte, now time.Time) *Error {
	method, path := requestOf(resp)
	code := resp.StatusCode
	e := &Error{Status: code, Message: Message(body), Err: fmt.Errorf("%s %s answered %d: %s", method, path, code, AnswerText(body))}
	if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		e.At = t
	}
	switch {
	case code/100 == 3:
		e.Class = Operator
		e.Err = fmt.Errorf("%s %s answered %d (a redirect to %q), which is never followed: set base_url to the address the provider serves its API at",
			method, path, code, resp.Header.Get("Location"))
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly,
		code == http.StatusTooManyRequests, code >= 500:
		e.Class = Transient
		e.RetryAfter, _ = RetryAfter(resp.Header, now)
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusNotFound:
		e.Class = Operator
	case code >= 400:
		e.Class = Permanent
	default: // 1xx: nothing this client understands; a later attempt may do better
		e.Class = Transient
	}
	return e
}

func requestOf(resp *http.Response) (method, path string) {
	if resp.Request == nil || resp.Request.URL == nil {
		return "a request", ""
	}
	return resp.Request.Method, resp.Request.URL.EscapedPath()
}
