package evaluate

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
)

// HTTP posts the change as JSON to an operator's URL and reads a verdict back. HTTP is no
// Needer: the change is as its webhook carried it, and the request says which inputs it holds
// whole and why each other one is not (request). The request is
// signed like a GitHub webhook (X-Amiss-Signature-256: sha256=<hex HMAC of the body>, with
// X-Amiss-Timestamp inside the signed content), so the endpoint can tell it comes from amiss.
type HTTP struct {
	URL     string
	Secret  []byte
	Client  *http.Client
	Timeout time.Duration // default 10 seconds
	Now     func() time.Time
}

// MaxAnswerBytes is the longest answer the HTTP evaluator reads; a longer one is no verdict.
const MaxAnswerBytes = 64 << 10

// request is what the HTTP evaluator posts: the change, with what it holds whole always said
// (an empty list included), and for each input it does not hold whole, why. An absent list is
// never to be read as an empty one: a pull request's webhook names no files.
type request struct {
	change.Change
	Whole  change.Inputs     `json:"whole"`
	Unread map[string]string `json:"unread"`
}

// notRead is why an input the change does not hold whole, and no read said why, is not:
// amiss reads nothing from the provider's API for an HTTP evaluator.
const notRead = "the webhook does not carry it whole; amiss reads nothing from the provider's API for an HTTP evaluator"

func requestOf(s change.Change) request {
	r := request{Change: s, Whole: s.Whole, Unread: map[string]string{}}
	(change.AllInputs &^ s.Whole).Each(func(in change.Inputs) {
		why := s.UnreadReason(in)
		if why == "" {
			why = notRead
		}
		r.Unread[in.Names()[0]] = why
	})
	return r
}

// Evaluate implements Evaluator. A 2xx answer with {"state": "success"|"failure"|"error",
// "description": "..."}, at most MaxAnswerBytes long, is the verdict; anything else is an
// error (retried), a redirect included: it is never followed.
func (e *HTTP) Evaluate(ctx context.Context, s change.Change) (Verdict, error) {
	body, err := json.Marshal(requestOf(s))
	if err != nil {
		return Verdict{}, err
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	mac := hmac.New(sha256.New, e.Secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, errors.New("evaluate: the evaluator's URL is not one a request can be sent to") // it may hold a credential
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amiss-Timestamp", ts)
	req.Header.Set("X-Amiss-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	// Redirects are never followed: a 307 or 308 would carry the signed request to another
	// host, and a 301, 302 or 303 turns the POST into a GET whose answer evaluates nothing.
	// The caller's client is copied, not changed (it may be shared).
	client := http.Client{}
	if e.Client != nil {
		client = *e.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// The evaluator's own timeout (the context above) bounds the call, not the client's: the
	// runner shares one client among routes, and a route may allow its evaluator longer.
	client.Timeout = 0
	// Errors name the endpoint without its credentials: the last attempt's error becomes the
	// commit's error verdict.
	endpoint := redacted(req.URL)
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL is the request's, query included
		}
		return Verdict{}, fmt.Errorf("evaluate: POST %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		return Verdict{}, fmt.Errorf("evaluate: %s answered %d, a redirect to %q: amiss follows no redirect; configure the evaluator's final URL",
			endpoint, resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp.StatusCode/100 != 2 {
		return Verdict{}, fmt.Errorf("evaluate: %s answered %d", endpoint, resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return Verdict{}, fmt.Errorf("evaluate: read answer: %w", err)
	}
	if len(raw) > MaxAnswerBytes {
		// What fits may read as a verdict that the rest contradicts.
		return Verdict{}, fmt.Errorf("evaluate: %s answered %d with more than %d KiB: no verdict", endpoint, resp.StatusCode, MaxAnswerBytes>>10)
	}
	var v Verdict
	if err := json.Unmarshal(raw, &v); err != nil {
		return Verdict{}, fmt.Errorf("evaluate: answer is not a verdict: %w", err)
	}
	switch v.State {
	case Success, Failure, Error:
		return v, nil
	}
	return Verdict{}, fmt.Errorf("evaluate: answer state %q is not success, failure or error", v.State)
}

// redacted is u without what may carry a credential: its user, query and fragment.
func redacted(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}
