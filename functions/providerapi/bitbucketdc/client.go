// Package bitbucketdc is amiss's client of Bitbucket Data Center's REST API (/rest/api/latest,
// and the build status API under /rest/api/latest/projects/{key}/repos/{slug}/commits/{id}/builds
// since 7.4): authenticated with a bearer token (an HTTP access token), answers classified by
// providerapi's table (Data Center answers its rate limit 429 with Retry-After), and listings
// paged as Bitbucket Data Center documents them: start and limit, each page's JSON saying
// isLastPage, and where the next starts (nextPageStart).
//
// The Data Center publisher (functions/publish) and the reader of what its webhooks lack
// (reads.go) speak through it.
package bitbucketdc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Client sends requests to one Bitbucket Data Center server's API as one token. Its exported
// fields (MaxAttempts, Sleep, Now, HTTP) may be set before it is used.
type Client struct {
	providerapi.Client
	token string
}

// NewClient returns a client of the server at baseURL (its root, or its context path: the API
// is under /rest).
func NewClient(baseURL, token string, hc *http.Client) *Client {
	return &Client{Client: providerapi.Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: hc, Classify: classify}, token: token}
}

// classify is providerapi.Classify's table, with Data Center's own message: its error answers
// carry their messages in errors[].message.
func classify(resp *http.Response, body []byte, now time.Time) *providerapi.Error {
	e := providerapi.Classify(resp, body, now)
	var answer struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if e.Message == "" && json.Unmarshal(body, &answer) == nil && len(answer.Errors) > 0 {
		e.Message = providerapi.AnswerText([]byte(answer.Errors[0].Message))
	}
	return e
}

// Do sends r (its URL under /rest) with the token.
func (c *Client) Do(ctx context.Context, r providerapi.Request) (*providerapi.Answer, error) {
	return c.Client.Do(ctx, r.WithHeader(http.Header{"Authorization": {"Bearer " + c.token}, "Accept": {"application/json"}}))
}

// Page is the envelope of a page of a listing.
type Page struct {
	Values        json.RawMessage `json:"values"`
	IsLastPage    bool            `json:"isLastPage"`
	NextPageStart *int            `json:"nextPageStart"`
}

// Pages reads a listing: r, then, while a page is not the last, the page from its
// nextPageStart (r's start parameter set to it), at most maxPages (0:
// providerapi.DefaultMaxPages). visit reads each page's values, told whether the page says it
// is the last, and says whether to read on. A listing with more pages is a Transient error.
func (c *Client) Pages(ctx context.Context, r providerapi.Request, maxPages int, visit func(values json.RawMessage, last bool) (more bool, err error)) error {
	var p Page
	page := 0
	return providerapi.Pages(ctx, c.Do, r, maxPages, func(a *providerapi.Answer) (string, error) {
		if p.NextPageStart == nil {
			return "", &providerapi.Error{Class: providerapi.Transient, Err: fmt.Errorf("%s: a page that is not the last names no nextPageStart", a.URL.EscapedPath())}
		}
		u := *a.URL
		q := u.Query()
		q.Set("start", strconv.Itoa(*p.NextPageStart))
		u.RawQuery = q.Encode()
		return u.String(), nil
	}, func(a *providerapi.Answer) (bool, error) {
		page++
		p = Page{}
		if err := a.Decode(fmt.Sprintf("page %d of %s", page, a.URL.EscapedPath()), &p); err != nil {
			return false, err
		}
		more, err := visit(p.Values, p.IsLastPage)
		return more && !p.IsLastPage, err
	})
}

// RepoPath is /rest/api/latest/projects/{projectKey}/repos/{repositorySlug} of repo
// (PROJECT/slug), escaped.
func RepoPath(repo string) (string, error) {
	project, slug, ok := strings.Cut(repo, "/")
	if !ok || project == "" || slug == "" || strings.Contains(slug, "/") {
		return "", &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("repository %q is not PROJECT/slug", repo)}
	}
	return "/rest/api/latest/projects/" + url.PathEscape(project) + "/repos/" + url.PathEscape(slug), nil
}
