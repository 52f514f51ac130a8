// Package gitea is amiss's client of the Gitea and Forgejo REST API (/api/v1; Forgejo's is
// Gitea's): authenticated with a token ("Authorization: token ..."), answers classified by
// providerapi's table (Gitea documents no rate limit of its own; a proxy's 429 and its
// Retry-After are honoured), and listings paged as Gitea documents them: page and limit, the
// Link header naming the next page, and X-Total-Count the total (the combined status of a ref
// sends the count alone).
package gitea

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Client sends requests to one Gitea or Forgejo server's API as one token. Its exported
// fields (MaxAttempts, Sleep, Now, HTTP) may be set before it is used.
type Client struct {
	providerapi.Client
	token string
}

// NewClient returns a client of the server at baseURL (its root: the API is under /api/v1).
func NewClient(baseURL, token string, hc *http.Client) *Client {
	return &Client{Client: providerapi.Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: hc}, token: token}
}

// Do sends r (its URL under /api/v1, or a link the API gave) with the token.
func (c *Client) Do(ctx context.Context, r providerapi.Request) (*providerapi.Answer, error) {
	return c.Client.Do(ctx, r.WithHeader(http.Header{"Authorization": {"token " + c.token}, "Accept": {"application/json"}}))
}

// Pages reads a listing: r, then the next page while there is one (the Link header's
// rel="next"; without a Link header, the next page number while page*limit is short of
// X-Total-Count; with neither, as behind a proxy that drops them, the next page number until
// visit stops at an empty page), at most maxPages (0: providerapi.DefaultMaxPages). visit
// reads each page and says whether to read on. A listing with more pages is a Transient error.
func (c *Client) Pages(ctx context.Context, r providerapi.Request, maxPages int, visit func(*providerapi.Answer) (more bool, err error)) error {
	return providerapi.Pages(ctx, c.Do, r, maxPages, func(a *providerapi.Answer) (string, error) { return nextPage(a), nil }, visit)
}

// nextPage is the URL of the page after a, or "".
func nextPage(a *providerapi.Answer) string {
	if next, linked := providerapi.NextLink(a.Header); linked {
		return next
	}
	q := a.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if page < 1 {
		return ""
	}
	if total, err := strconv.Atoi(a.Header.Get("X-Total-Count")); err == nil && (limit < 1 || page*limit >= total) {
		return ""
	}
	q.Set("page", strconv.Itoa(page+1))
	u := *a.URL
	u.RawQuery = q.Encode()
	return u.String()
}

// RepoPath is /api/v1/repos/{owner}/{repo} of repo (owner/name), escaped.
func RepoPath(repo string) (string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("repository %q is not owner/name", repo)}
	}
	return "/api/v1/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name), nil
}
