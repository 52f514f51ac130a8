// Package publish posts verdicts as commit statuses: GitHub (and GitHub Enterprise),
// Gitea/Forgejo, GitLab and Bitbucket Cloud, and a log publisher for local use. Transient
// failures (429, 5xx, transport errors) are retried with backoff, honouring Retry-After; a
// permanent refusal (401, 403, 404, 422, other 4xx) is ErrPermanent, and the runner abandons
// the delivery.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is one commit status to post. State is success, failure or error: never pending.
type Status struct {
	Repository  string
	SHA         string
	State       string
	Description string
	Context     string
	TargetURL   string
}

// Publisher posts statuses.
type Publisher interface {
	Publish(ctx context.Context, s Status) error
}

// ErrPermanent: the provider refused the status for good; retrying cannot help.
var ErrPermanent = errors.New("publish: refused for good")

// Description limits by provider (GitHub documents 140 characters; the others are kept to 255).
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

// client sends JSON requests with retries.
type client struct {
	HTTP        *http.Client
	MaxAttempts int
	Sleep       func(context.Context, time.Duration) error
}

func (c *client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 15 * time.Second}
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

// retryAfter reads a Retry-After header (seconds or an HTTP date).
func retryAfter(h http.Header, fallback time.Duration) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return fallback
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
		return 0
	}
	return fallback
}

// do sends the request built by build, retrying transient failures. It returns the final
// answer's status and body; a permanent refusal is ErrPermanent.
func (c *client) do(ctx context.Context, build func() (*http.Request, error)) (int, []byte, error) {
	attempts := c.MaxAttempts
	if attempts <= 0 {
		attempts = 4
	}
	sleep := c.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	backoff := 500 * time.Millisecond
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if err := sleep(ctx, backoff); err != nil {
				return 0, nil, fmt.Errorf("publish: %w (last: %v)", err, last)
			}
			backoff = min(backoff*2, 30*time.Second)
		}
		req, err := build()
		if err != nil {
			return 0, nil, err
		}
		resp, err := c.httpClient().Do(req.WithContext(ctx))
		if err != nil {
			last = err
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2:
			return resp.StatusCode, body, nil
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			last = fmt.Errorf("%s %s answered %d", req.Method, req.URL.Path, resp.StatusCode)
			backoff = max(backoff, retryAfter(resp.Header, backoff))
			continue
		default:
			return resp.StatusCode, body, fmt.Errorf("%w: %s %s answered %d: %s", ErrPermanent, req.Method, req.URL.Path,
				resp.StatusCode, strings.TrimSpace(string(body)))
		}
	}
	return 0, nil, fmt.Errorf("publish: gave up after %d attempts: %v", attempts, last)
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
		return "", "", fmt.Errorf("%w: repository %q is not owner/name", ErrPermanent, repo)
	}
	return owner, name, nil
}

// Log prints verdicts instead of posting them: the local default.
type Log struct{ Logger *slog.Logger }

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
