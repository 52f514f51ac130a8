// Package gitlab is amiss's client of GitLab's REST API (/api/v4, gitlab.com or a self-managed
// instance): authenticated with a token in PRIVATE-TOKEN, answers classified by providerapi's
// table with GitLab's own rules (a 409 is its per-commit lock being busy; a 429 names its wait
// in Retry-After or RateLimit-Reset), and listings paged as GitLab documents offset pagination:
// page and per_page, the next page in X-Next-Page (empty on the last) or the Link header's
// rel="next".
package gitlab

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// BusyWait is the wait after a 409: GitLab's status service holds its per-commit lock for at
// most 5 s and retries it for about 2 s before answering 409.
const BusyWait = 3 * time.Second

// Client sends requests to one GitLab instance's API as one token. Its exported fields
// (MaxAttempts, Sleep, Now, HTTP) may be set before it is used.
type Client struct {
	providerapi.Client
	token string
}

// NewClient returns a client of the instance at baseURL (its root: the API is under /api/v4).
func NewClient(baseURL, token string, hc *http.Client) *Client {
	return &Client{Client: providerapi.Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: hc, Classify: classify}, token: token}
}

// classify is GitLab's table of answers: providerapi.Classify's, with a 409 transient for at
// least BusyWait (GitLab's "Another update to this commit status is in progress"), and a 429's
// wait read from RateLimit-Reset (Unix seconds) when it sends no Retry-After.
func classify(resp *http.Response, body []byte, now time.Time) *providerapi.Error {
	e := providerapi.Classify(resp, body, now)
	switch resp.StatusCode {
	case http.StatusConflict:
		e.Class = providerapi.Transient
		e.RetryAfter = max(e.RetryAfter, BusyWait)
	case http.StatusTooManyRequests:
		if e.RetryAfter == 0 {
			e.RetryAfter, _ = providerapi.ResetWait(resp.Header, "RateLimit-Reset", now)
		}
	}
	return e
}

// Do sends r (its URL under /api/v4, or a link the API gave) with the token.
func (c *Client) Do(ctx context.Context, r providerapi.Request) (*providerapi.Answer, error) {
	return c.Client.Do(ctx, r.WithHeader(http.Header{"PRIVATE-TOKEN": {c.token}}))
}

// Pages reads a listing: r, then the next page while GitLab names one (X-Next-Page, or the
// Link header's rel="next"; when an answer carries neither, as behind a proxy that strips
// them, or an X-Next-Page that is no page number, the next page number until a page is
// empty), at most maxPages (0:
// providerapi.DefaultMaxPages). visit reads each page and says whether to read on. A listing
// with more pages is a Transient error.
func (c *Client) Pages(ctx context.Context, r providerapi.Request, maxPages int, visit func(*providerapi.Answer) (more bool, err error)) error {
	return providerapi.Pages(ctx, c.Do, r, maxPages, func(a *providerapi.Answer) (string, error) { return nextPage(a), nil }, visit)
}

// nextPage is the URL of the page after a, or "".
func nextPage(a *providerapi.Answer) string {
	withPage := func(p int) string {
		q := a.URL.Query()
		q.Set("page", strconv.Itoa(p))
		u := *a.URL
		u.RawQuery = q.Encode()
		return u.String()
	}
	if v, ok := a.Header["X-Next-Page"]; ok {
		next := strings.TrimSpace(strings.Join(v, ""))
		if next == "" {
			return "" // empty on the last page
		}
		if n, err := strconv.Atoi(next); err == nil && n >= 1 {
			return withPage(n)
		}
		// Not a page number: not GitLab's, and no say on whether the listing ends here.
	}
	if next, linked := providerapi.NextLink(a.Header); linked {
		return next
	}
	var items []json.RawMessage
	if json.Unmarshal(a.Body, &items) != nil || len(items) == 0 {
		return ""
	}
	page, _ := strconv.Atoi(a.URL.Query().Get("page"))
	return withPage(max(page, 1) + 1)
}

// ProjectPath is /api/v4/projects/{id} of a project's path (group/sub/project), escaped as
// GitLab takes a path for an id.
func ProjectPath(project string) string {
	return "/api/v4/projects/" + url.PathEscape(project)
}
