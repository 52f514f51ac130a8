// Package github is amiss's one client of GitHub's REST API (api.github.com, and GitHub
// Enterprise Server at https://HOST/api/v3): every request amiss sends to GitHub goes through
// a Client, whoever sends it (the statuses and check-runs publishers, the App's token
// exchange, the reader of a re-run's inputs).
//
// A Client authenticates in one of three ways, fixed when it is made: with a token
// (NewTokenClient), with the installation tokens of a GitHub App (NewInstallationClient: each
// request names its installation), or as the App itself with its JWT (an App's own client,
// for the App endpoints). It sends GitHub's media type and API version, classifies GitHub's
// answers (classify: GitHub's rate limits are 403 or 429), and pages through a listing by its
// Link header (Pages), as GitHub documents.
//
// Authenticating as an App behaves as GitHub App authors expect from @octokit/auth-app:
//
//   - a JWT refused for its iat or exp is signed again with the offset between this host's
//     clock and GitHub's Date, and the offset is kept for the App's later JWTs;
//   - a 401 to an installation token issued within ReplicationDelay is GitHub's replication
//     delay (a new token is not yet known everywhere): the request is sent again after a
//     short wait, not reported; a 401 to an older token drops it, and the request is sent once
//     more with a new one;
//   - installation tokens are cached per App, base URL and installation, whatever key signed
//     the JWT (a TokenCache shared by the App's keys), until shortly before they expire.
//
// Failures are *providerapi.Error: Transient, Operator or Permanent, with GitHub's wait.
// Neither a token, a JWT nor the key ever appears in an error.
package github

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// DefaultBaseURL is GitHub's API.
const DefaultBaseURL = "https://api.github.com"

// GitHub's media type and the API version amiss speaks.
const (
	MediaType  = "application/vnd.github+json"
	APIVersion = "2022-11-28"
)

// ReplicationDelay is how long after its creation an installation token may still be refused
// 401 by a GitHub server it has not reached yet. A 401 within it is waited out (1 s, then 2 s,
// ...) and the request sent again.
const ReplicationDelay = 5 * time.Second

// replicationWaits bounds the waits for a token's replication (1 s, 2 s, 3 s: past
// ReplicationDelay), whatever the clock says.
const replicationWaits = 3

// InstallationTokens gives installation tokens of a GitHub App (*App implements it).
type InstallationTokens interface {
	// Token returns a token of the installation, valid for a while yet. Its failure is a
	// *providerapi.Error when classified (GitHub's outage is Transient); any other is the
	// operator's.
	Token(ctx context.Context, installation int64) (InstallationToken, error)
	// Forget drops token, which the API refused (401) past its replication: the next Token
	// call exchanges a new one.
	Forget(installation int64, token string)
}

// InstallationToken is a token of an installation and when it was issued, on this host's clock
// (zero: unknown, taken as old).
type InstallationToken struct {
	Value  string
	Issued time.Time
}

// Client sends requests to GitHub's REST API as one identity. Its exported fields (those of
// providerapi.Client: MaxAttempts, Sleep, Now, HTTP) may be set before it is used.
type Client struct {
	providerapi.Client
	token  string
	tokens InstallationTokens
	app    *App
}

func newClient(baseURL string, hc *http.Client) *Client {
	base := strings.TrimRight(baseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	return &Client{Client: providerapi.Client{BaseURL: base, HTTP: hc, Classify: classify}}
}

// NewTokenClient returns a client that sends token (a personal access token, any token GitHub
// takes as a bearer).
func NewTokenClient(baseURL, token string, hc *http.Client) *Client {
	c := newClient(baseURL, hc)
	c.token = token
	return c
}

// NewInstallationClient returns a client that sends each request with a token of the
// installation it names, taken from tokens. A request that names no installation is refused
// as the operator's to fix (ErrNoInstallation), with nothing sent.
func NewInstallationClient(baseURL string, tokens InstallationTokens, hc *http.Client) *Client {
	c := newClient(baseURL, hc)
	c.tokens = tokens
	return c
}

// ErrNoInstallation: a client authenticating with installation tokens was asked for a
// request that names no installation (its webhook carried none).
var ErrNoInstallation = fmt.Errorf("the webhook carried no installation: the GitHub App is not its sender " +
	"(a repository's or an organisation's own webhook delivered it); point the App's webhook at this route")

// Header is what every request to GitHub carries: the credential, GitHub's media type and the
// API version.
func Header(authorization string) http.Header {
	return http.Header{"Authorization": {authorization}, "Accept": {MediaType}, "X-Github-Api-Version": {APIVersion}}
}

// credential is what one request is sent with.
type credential struct {
	authorization string
	token         string
	issued        time.Time
}

// credential returns the credential of a request for installation. Its failures are never
// Unknown: nothing was sent.
func (c *Client) credential(ctx context.Context, installation int64) (credential, error) {
	switch {
	case c.app != nil:
		jwt, err := c.app.JWT()
		if err != nil {
			return credential{}, &providerapi.Error{Class: providerapi.Operator, Err: err}
		}
		return credential{authorization: "Bearer " + jwt}, nil
	case c.tokens == nil:
		return credential{authorization: "Bearer " + c.token}, nil
	case installation == 0:
		return credential{}, &providerapi.Error{Class: providerapi.Operator, Err: ErrNoInstallation}
	}
	tok, err := c.tokens.Token(ctx, installation)
	if err == nil {
		return credential{authorization: "Bearer " + tok.Value, token: tok.Value, issued: tok.Issued}, nil
	}
	class := providerapi.Operator
	if ctx.Err() != nil {
		class = providerapi.Transient
	}
	return credential{}, providerapi.Known(providerapi.Wrap(err, class, fmt.Sprintf("token of installation %d", installation)))
}

// Do sends r on behalf of installation (0: none) with the client's credential and GitHub's
// headers, with the quick retries of providerapi.Client.Do. A 401 is handled as the identity
// calls for (see the package documentation); every 401 that remains is the operator's.
// Sending again after a 401 is safe for any method, a POST included: GitHub authenticates a
// request before acting on it, so a 401 says the request did nothing.
func (c *Client) Do(ctx context.Context, installation int64, r providerapi.Request) (*providerapi.Answer, error) {
	cred, err := c.credential(ctx, installation)
	if err != nil {
		return nil, err
	}
	renewed, reclocked := false, false
	waits := 0
	for {
		r = r.WithHeader(Header(cred.authorization))
		a, err := c.Client.Do(ctx, r)
		if providerapi.StatusOf(err) != http.StatusUnauthorized {
			return a, err
		}
		switch {
		case c.app != nil:
			// The App's JWT: refused for its times when this host's clock is off; signed again
			// once with GitHub's clock.
			if reclocked || !c.app.reclock(err, c.now()) {
				return nil, err
			}
			reclocked = true
		case c.tokens == nil:
			return nil, err
		case !cred.issued.IsZero() && c.now().Sub(cred.issued) < ReplicationDelay && waits < replicationWaits:
			waits++
			if werr := c.Wait(ctx, time.Duration(waits)*time.Second); werr != nil {
				return nil, err
			}
			continue
		case renewed || waits > 0:
			if waits > 0 {
				err = providerapi.Wrap(err, providerapi.Operator, fmt.Sprintf("a token issued %s before still refused after %d waits for GitHub's replication",
					c.now().Sub(cred.issued).Round(time.Second), waits))
			}
			return nil, err
		default:
			c.tokens.Forget(installation, cred.token)
			renewed = true
		}
		if cred, err = c.credential(ctx, installation); err != nil {
			return nil, err
		}
	}
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Pages reads a listing: r, then each page the answer's Link header names rel="next" (GitHub's
// paging; the link keeps r's per_page), at most maxPages pages (0: providerapi.DefaultMaxPages).
// visit reads each page and says whether to read on. A listing with more pages than that is a
// Transient error: never a list taken as whole.
func (c *Client) Pages(ctx context.Context, installation int64, r providerapi.Request, maxPages int, visit func(page *providerapi.Answer) (more bool, err error)) error {
	send := func(ctx context.Context, r providerapi.Request) (*providerapi.Answer, error) {
		return c.Do(ctx, installation, r)
	}
	return providerapi.Pages(ctx, send, r, maxPages, func(a *providerapi.Answer) (string, error) {
		next, _ := providerapi.NextLink(a.Header)
		return next, nil
	}, visit)
}

// classify is GitHub's table of answers: providerapi.Classify's, and GitHub's rate limits,
// which it answers with 403 or 429. The primary limit says x-ratelimit-remaining: 0 and resets
// at x-ratelimit-reset (Unix seconds, measured against the answer's Date); a secondary limit
// sends Retry-After, or asks for at least a minute. Any other 403 is a token's scope or an
// installation's permission.
func classify(resp *http.Response, body []byte, now time.Time) *providerapi.Error {
	e := providerapi.Classify(resp, body, now)
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return e
	}
	h := resp.Header
	if d, ok := providerapi.RetryAfter(h, now); ok {
		e.Class, e.RetryAfter = providerapi.Transient, d
	} else if h.Get("X-Ratelimit-Remaining") == "0" {
		e.Class, e.RetryAfter = providerapi.Transient, time.Minute
		if d, ok := providerapi.ResetWait(h, "X-Ratelimit-Reset", now); ok {
			e.RetryAfter = d
		}
	} else if resp.StatusCode == http.StatusTooManyRequests || strings.Contains(strings.ToLower(e.Message), "rate limit") {
		e.Class, e.RetryAfter = providerapi.Transient, time.Minute
	}
	return e
}
