// Package publish posts verdicts as commit statuses: GitHub (and GitHub Enterprise),
// Gitea/Forgejo, GitLab and Bitbucket Cloud, and a log publisher for local use.
//
// A publisher makes a few quick attempts within one call (transport errors, 5xx, 429 and
// GitLab's busy 409, honouring a short Retry-After) and then answers an *Error that classifies
// the provider's last answer, so that the runner can schedule the next attempt:
//
//   - Transient: the provider or the network failed; retry later (RetryAfter, when the provider
//     named a wait: Retry-After, or a rate limit's reset).
//   - Operator: 401, 403 or 404: a token, a scope or a repository name an operator must fix;
//     retry later, and say so loudly.
//   - Permanent: a refusal that can never succeed for this verdict (for example 422 for a commit
//     the provider does not know); errors.Is(err, ErrPermanent) holds.
//
// The table of answers for each provider is in docs/providers/*.md.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is one verdict to post: a commit status, or a check run. State is success, failure or
// error: never pending.
type Status struct {
	Repository  string
	SHA         string
	State       string
	Description string
	Context     string
	TargetURL   string
	// Installation is the GitHub App installation the delivery's webhook came from (0: none);
	// a publisher authenticating as the App posts with its token.
	Installation int64
	// ExternalID names the delivery (its ledger key): a check run carries it, and a publisher
	// finds its own check run again by it.
	ExternalID string
	// Files are the files the verdict's rules refused, for the publishers that can show them
	// on the file (a check run's annotations); the others leave them out. FilesLeftOut counts
	// those the frozen verdict had no room for.
	Files        []File
	FilesLeftOut int
}

// File is a file a rule refused: its path, the rule's short name, and why.
type File struct {
	Path    string
	Rule    string
	Message string
}

// Publisher posts statuses, and reads back what stands.
type Publisher interface {
	// Publish posts s. A failure is an *Error; Unknown(err) says whether the provider may have
	// applied the status all the same (a timeout, a cut connection, a gateway's 5xx).
	Publish(ctx context.Context, s Status) error
	// Standing reads back the latest status the provider holds for s's repository, commit and
	// context, and says whether it is s (as Publish would have posted it), another, or none.
	Standing(ctx context.Context, s Status) (Standing, error)
}

// Resolver is a publisher that names some commits by another hash than the one it posts to
// (Bitbucket Cloud's pull requests abbreviate them): Resolve returns s with the hash the
// status is posted against.
type Resolver interface {
	Resolve(ctx context.Context, s Status) (Status, error)
}

// Standing is what a read-back found.
type Standing int

// What a read-back can find.
const (
	// StandingNone: no status for the context.
	StandingNone Standing = iota + 1
	// StandingOurs: the latest status for the context is the one asked about.
	StandingOurs
	// StandingOther: the latest status for the context is another.
	StandingOther
)

func (s Standing) String() string {
	switch s {
	case StandingNone:
		return "none"
	case StandingOurs:
		return "ours"
	case StandingOther:
		return "other"
	}
	return fmt.Sprintf("Standing(%d)", int(s))
}

// ErrPermanent: the provider refused the status for good; retrying cannot help.
var ErrPermanent = errors.New("publish: refused for good")

// Class says what a failed publication means for the verdict.
type Class int

// The classes of failure.
const (
	// Transient: the provider or the network failed; a later attempt may succeed.
	Transient Class = iota + 1
	// Operator: the provider refused the credentials or cannot see the repository (401, 403,
	// 404); an operator fixes it, so it is retried on the long schedule and reported as an error.
	Operator
	// Permanent: the provider refused this status for good.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Operator:
		return "operator"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a failed publication: the class of the provider's last answer, its HTTP status (0
// for a transport error), whether the provider may have applied the status all the same, and
// the wait the provider asked for, if any.
type Error struct {
	Class  Class
	Status int
	// Unknown: the request may have been applied (it was sent, and the answer was cut, timed
	// out, or came from a gateway that does not say what the provider did).
	Unknown bool
	// RetryAfter is the provider's own wait before the next attempt (Retry-After, a rate
	// limit's reset), zero when it named none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Class == Permanent {
		return fmt.Sprintf("%v: %v", ErrPermanent, e.Err)
	}
	return fmt.Sprintf("publish: %v (%v)", e.Err, e.Class)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) hold for a permanent refusal.
func (e *Error) Is(target error) bool { return target == ErrPermanent && e.Class == Permanent }

// ClassOf classifies an error a publisher returned: its *Error's class, Permanent for an error
// wrapping ErrPermanent, and Transient for anything else (a cancelled context, an unknown
// failure).
func ClassOf(err error) Class {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	if errors.Is(err, ErrPermanent) {
		return Permanent
	}
	return Transient
}

// RetryAfterOf returns the wait the provider asked for, or zero.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// Unknown reports whether a failed publication may have been applied all the same: a status
// the provider created although its answer never arrived. Such a publication is read back
// before it is posted again.
func Unknown(err error) bool {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Unknown
	}
	return err != nil && !errors.Is(err, ErrPermanent) // an error no publisher classified: assume the worst
}

// StatusOf returns the provider's HTTP status in err, or zero.
func StatusOf(err error) int {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}

// Description limits by provider (GitHub documents 140 characters; GitLab 255; the others are
// kept to 255).
const (
	githubDescription = 140
	otherDescription  = 255
)

// cutRunes shortens s to n characters, marking the cut with an ellipsis.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Defaults of one call's own retries. Longer waits are the runner's to schedule.
const (
	defaultAttempts = 3
	firstWait       = time.Second
	// maxCallWait is the longest wait a call sleeps through; a provider asking for more gets
	// the error back with its RetryAfter, and the runner schedules the attempt.
	maxCallWait = 10 * time.Second
	// maxProviderWait bounds a wait computed from a provider's header (an hour is GitHub's
	// rate-limit window), so a wrong clock or header cannot park a verdict for days.
	maxProviderWait = time.Hour
)

// client sends JSON requests with a few quick retries.
type client struct {
	HTTP *http.Client
	// MaxAttempts is the attempts within one call (default 3).
	MaxAttempts int
	// Sleep waits between attempts (default: a timer, cut short by the context).
	Sleep func(context.Context, time.Duration) error
	// classify reads a provider's non-2xx answer (default: classify).
	classify func(resp *http.Response, body []byte) *Error
	// maxBody bounds the answer read (default: 64 KiB for a POST's or a PATCH's answer, a
	// status or a check run; maxPageBytes for a GET's, a page of a listing); a longer one is
	// cut, and fails to decode.
	maxBody int64
}

// maxPageBytes bounds a listing's page read back by default: 100 statuses of a combined status
// or of a ref's list, each with a description and a link of up to a few KB, and the
// repository object.
const maxPageBytes = 4 << 20

// httpClient is the caller's client (default: a 15 s timeout) made to follow no redirect: Go
// follows a 301, 302 or 303 on a POST as a GET without the body, and the GET of a statuses
// path lists the commit's statuses with a 200 that would be taken for a posted status. A
// redirect is answered as it came (see classify).
func (c *client) httpClient() *http.Client {
	hc := http.Client{Timeout: 15 * time.Second}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// providerNow is the provider's own time, from its Date header (so that waits computed from
// its clock do not depend on ours), or our clock when it sent none.
func providerNow(h http.Header) time.Time {
	if t, err := http.ParseTime(h.Get("Date")); err == nil {
		return t
	}
	return time.Now()
}

// retryAfter reads a Retry-After header (seconds, or an HTTP date measured against the
// answer's own Date), bounded by maxProviderWait. ok is false when there is none.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxProviderWait), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(providerNow(h)), 0), maxProviderWait), true
	}
	return 0, false
}

// resetWait reads a rate limit's reset time (Unix seconds in header name) against the
// answer's own Date, bounded by maxProviderWait.
func resetWait(h http.Header, name string) (time.Duration, bool) {
	s, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
	if err != nil || s <= 0 {
		return 0, false
	}
	return min(max(time.Unix(s, 0).Sub(providerNow(h)), 0), maxProviderWait), true
}

// answerText is a provider's answer for an error message: trimmed and bounded.
func answerText(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = cutRunes(s[:300], 299)
	}
	return s
}

// classify is the table every provider starts from: 408, 425, 429 and 5xx are transient (with
// the provider's Retry-After); 401, 403 and 404 are the operator's, and so is a redirect (the
// base URL names an address the provider has moved from, or http where it wants https); 409
// is transient; every other 4xx (400, 410, 413, 422, ...) is permanent.
func classify(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, Err: fmt.Errorf("%s %s answered %d: %s", resp.Request.Method, resp.Request.URL.Path,
		resp.StatusCode, answerText(body))}
	if code := resp.StatusCode; code/100 == 3 {
		e.Class = Operator
		e.Err = fmt.Errorf("%s %s answered %d (a redirect to %q), which is never followed: set base_url to the address the provider serves its API at",
			resp.Request.Method, resp.Request.URL.Path, code, resp.Header.Get("Location"))
		return e
	}
	switch code := resp.StatusCode; {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code >= 500,
		code == http.StatusConflict:
		e.Class = Transient
		e.RetryAfter, _ = retryAfter(resp.Header)
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusNotFound:
		e.Class = Operator
	case code >= 400:
		e.Class = Permanent
	default: // 1xx: nothing this client understands; a later attempt may do better
		e.Class = Transient
	}
	return e
}

// do sends the request built by build, retrying transient failures within the call. It
// returns the answer's status and body on 2xx, and an *Error otherwise.
func (c *client) do(ctx context.Context, build func() (*http.Request, error)) (int, []byte, error) {
	attempts := c.MaxAttempts
	if attempts <= 0 {
		attempts = defaultAttempts
	}
	sleep := c.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	cls := c.classify
	if cls == nil {
		cls = classify
	}
	wait := firstWait
	for i := 0; ; i++ {
		req, err := build()
		if err != nil {
			// Nothing was sent: the base URL (or a name put into the path) cannot make a
			// request. An operator's to fix, like a token that cannot be read.
			return 0, nil, &Error{Class: Operator, Err: fmt.Errorf("no request can be built (check base_url): %w", err)}
		}
		var e *Error
		resp, err := c.httpClient().Do(req.WithContext(ctx))
		if err != nil {
			e = &Error{Class: Transient, Unknown: sent(err), Err: err}
		} else {
			limit := c.maxBody
			switch {
			case limit > 0:
			case req.Method == http.MethodGet:
				limit = maxPageBytes
			default:
				limit = 64 << 10
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return resp.StatusCode, body, nil
			}
			e = cls(resp, body)
			e.Unknown = mayHaveApplied(resp.StatusCode)
		}
		// A request that may have been applied is not sent again blindly: a POST would create a
		// second status. The caller reads back first (a GET is repeated freely).
		if e.Class != Transient || (e.Unknown && req.Method != http.MethodGet) || i+1 >= attempts || ctx.Err() != nil {
			return 0, nil, e
		}
		w := max(wait, e.RetryAfter)
		if w > maxCallWait {
			return 0, nil, e // the runner schedules a wait this long
		}
		if err := sleep(ctx, w); err != nil {
			return 0, nil, e
		}
		wait *= 2
	}
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

func jsonRequest(method, url string, body any, header map[string]string) func() (*http.Request, error) {
	return func() (*http.Request, error) {
		var r io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			r = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, url, r)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return req, nil
	}
}

func splitRepo(repo string) (string, string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" {
		return "", "", &Error{Class: Permanent, Err: fmt.Errorf("repository %q is not owner/name", repo)}
	}
	return owner, name, nil
}

// Log prints verdicts instead of posting them: the local default. It never fails, and has
// nothing to read back (Standing answers StandingNone).
type Log struct{ Logger *slog.Logger }

// Standing implements Publisher: a log holds no status.
func (Log) Standing(context.Context, Status) (Standing, error) { return StandingNone, nil }

// Publish implements Publisher.
func (l Log) Publish(ctx context.Context, s Status) error {
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("verdict", "repository", s.Repository, "sha", s.SHA, "state", s.State, "context", s.Context,
		"description", s.Description, "target_url", s.TargetURL)
	return nil
}
