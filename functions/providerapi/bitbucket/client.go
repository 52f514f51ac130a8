// Package bitbucket is amiss's client of Bitbucket Cloud's REST API (2.0, at
// https://api.bitbucket.org): authenticated with a bearer token (a repository, project or
// workspace access token), answers classified by providerapi's table (Bitbucket Cloud answers
// its rate limits 429, with Retry-After when it names a wait), listings paged as Bitbucket
// Cloud documents them (each page's JSON names the next page's URL in "next", absent on the
// last), and a read's redirect followed within the base URL, where Bitbucket Cloud documents
// one (a pull request's diffstat). The Bitbucket Cloud publisher (functions/publish) and the
// reader of what its webhooks lack (reads.go) speak through it.
package bitbucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// DefaultBaseURL is Bitbucket Cloud's API.
const DefaultBaseURL = "https://api.bitbucket.org"

// Client sends requests to Bitbucket Cloud's API as one token. Its exported fields
// (MaxAttempts, Sleep, Now, HTTP) may be set before it is used.
type Client struct {
	providerapi.Client
	token string
}

// NewClient returns a client of the API at baseURL (https://api.bitbucket.org; its paths
// start /2.0).
func NewClient(baseURL, token string, hc *http.Client) *Client {
	base := strings.TrimRight(baseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	return &Client{Client: providerapi.Client{BaseURL: base, HTTP: hc, Classify: classify}, token: token}
}

// classify is providerapi.Classify's table, with Bitbucket Cloud's own message: its error
// answers carry their message in error.message.
func classify(resp *http.Response, body []byte, now time.Time) *providerapi.Error {
	e := providerapi.Classify(resp, body, now)
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
		e.Err = &redirected{location: loc, err: e.Err}
	}
	var answer struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if e.Message == "" && json.Unmarshal(body, &answer) == nil && answer.Error.Message != "" {
		e.Message = providerapi.AnswerText([]byte(answer.Error.Message))
	}
	return e
}

// maxRedirects bounds the redirects one read follows.
const maxRedirects = 3

// Do sends r (its URL under /2.0, or a link the API gave) with the token. A GET answered with
// a redirect within the base URL is sent again to where it points (Bitbucket Cloud answers a
// pull request's diffstat with a redirect to the repository's diffstat), at most maxRedirects
// times; a redirect elsewhere, or of any other request, is the operator's error, as
// providerapi.Classify says.
func (c *Client) Do(ctx context.Context, r providerapi.Request) (*providerapi.Answer, error) {
	r = r.WithHeader(http.Header{"Authorization": {"Bearer " + c.token}, "Accept": {"application/json"}})
	for hops := 0; ; hops++ {
		a, err := c.Client.Do(ctx, r)
		var re *redirected
		if r.Method != http.MethodGet || hops >= maxRedirects || !errors.As(err, &re) {
			return a, err
		}
		from, ferr := c.URL(r.URL)
		if ferr != nil {
			return a, err
		}
		to, terr := from.Parse(re.location)
		if terr != nil {
			return a, err
		}
		if _, terr := c.URL(to.String()); terr != nil {
			return a, err // outside the base URL: never followed with the token
		}
		r.URL = to.String()
	}
}

// redirected is a 3xx answer's target, kept for a read that may follow it.
type redirected struct {
	location string
	err      error
}

func (r *redirected) Error() string { return r.err.Error() }
func (r *redirected) Unwrap() error { return r.err }

// Pages reads a listing: r, then the page each page's "next" names, at most maxPages (0:
// providerapi.DefaultMaxPages). visit reads each page and says whether to read on. A listing
// with more pages is a Transient error.
func (c *Client) Pages(ctx context.Context, r providerapi.Request, maxPages int, visit func(*providerapi.Answer) (more bool, err error)) error {
	page := 0
	return providerapi.Pages(ctx, c.Do, r, maxPages, func(a *providerapi.Answer) (string, error) {
		var p struct {
			Next string `json:"next"`
		}
		err := a.Decode(fmt.Sprintf("page %d of %s", page, a.URL.EscapedPath()), &p)
		return p.Next, err
	}, func(a *providerapi.Answer) (bool, error) {
		page++
		return visit(a)
	})
}

// RepoPath is /2.0/repositories/{workspace}/{repo_slug} of repo (workspace/slug), escaped.
func RepoPath(repo string) (string, error) {
	ws, slug, ok := strings.Cut(repo, "/")
	if !ok || ws == "" || slug == "" || strings.Contains(slug, "/") {
		return "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("repository %q is not workspace/slug", repo)}
	}
	return "/2.0/repositories/" + url.PathEscape(ws) + "/" + url.PathEscape(slug), nil
}

// Values decodes a page's values (every Bitbucket Cloud listing's items) into v.
func Values(a *providerapi.Answer, what string, v any) error {
	var p struct {
		Values json.RawMessage `json:"values"`
	}
	if err := a.Decode(what, &p); err != nil {
		return err
	}
	if err := json.Unmarshal(p.Values, v); err != nil {
		return &providerapi.Error{Class: providerapi.Transient, Status: a.Status, Err: fmt.Errorf("%s: values do not decode: %v", what, err)}
	}
	return nil
}
