package publish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// InstallationTokens gives GitHub App installation tokens (githubapp.Tokens implements it).
type InstallationTokens interface {
	// Token returns a token of the installation, valid for a while yet. An error that is an
	// *Error keeps its class (say Transient for GitHub's outage); any other is the operator's
	// (a refused installation, a revoked key).
	Token(ctx context.Context, installation int64) (string, error)
	// Forget drops token, which the API answered 401: the next Token call fetches a new one.
	Forget(installation int64, token string)
}

// ErrNoInstallation: a publisher authenticating as a GitHub App was given a verdict whose
// webhook named no installation, so there is no installation token to post with.
var ErrNoInstallation = errors.New("the webhook carried no installation: the GitHub App is not its sender " +
	"(a repository's or an organisation's own webhook delivered it); point the App's webhook at this route")

// githubAuth is how a GitHub publisher authenticates each request: with a static token, or,
// when tokens is set, with the installation token of the verdict's installation.
type githubAuth struct {
	token  string
	tokens InstallationTokens
}

// bearer returns the token a request for installation is sent with. Its failures are never
// Unknown: nothing was posted.
func (a githubAuth) bearer(ctx context.Context, installation int64) (string, error) {
	if a.tokens == nil {
		return a.token, nil
	}
	if installation == 0 {
		return "", &Error{Class: Operator, Err: ErrNoInstallation}
	}
	tok, err := a.tokens.Token(ctx, installation)
	if err == nil {
		return tok, nil
	}
	var pe *Error
	switch {
	case errors.As(err, &pe):
		e := *pe
		e.Unknown, e.Err = false, fmt.Errorf("token of installation %d: %w", installation, pe.Err)
		return "", &e
	case ctx.Err() != nil:
		return "", &Error{Class: Transient, Err: fmt.Errorf("token of installation %d: %w", installation, err)}
	}
	return "", &Error{Class: Operator, Err: fmt.Errorf("no token for installation %d: %w", installation, err)}
}

func githubHeader(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token, "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
}

// send makes one GitHub API request (body nil: none) for installation through c, with its
// quick retries. With installation tokens, a 401 makes it forget the token and send the
// request once more with a fresh one. That second send is safe for any method, a POST
// included: GitHub authenticates a request before acting on it, so a 401 says the request
// did nothing (and c sends a POST again within one call only after an answer that says it
// was not applied, so an earlier attempt did nothing either).
func (a githubAuth) send(ctx context.Context, c *client, installation int64, method, url string, body any) (int, []byte, error) {
	tok, err := a.bearer(ctx, installation)
	if err != nil {
		return 0, nil, err
	}
	code, answer, err := c.do(ctx, jsonRequest(method, url, body, githubHeader(tok)))
	if a.tokens == nil || StatusOf(err) != http.StatusUnauthorized {
		return code, answer, err
	}
	a.tokens.Forget(installation, tok)
	if tok, err = a.bearer(ctx, installation); err != nil {
		return 0, nil, err
	}
	return c.do(ctx, jsonRequest(method, url, body, githubHeader(tok)))
}
