package wiring

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/githubapp"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/secrets"
)

// appTokens keeps one githubapp.Tokens per App, base URL and private key for the life of the
// process, so installation tokens are cached across deliveries (routes are built per
// delivery). A rotated key (the secret reads differently) gets a Tokens of its own; the old
// one is dropped.
type appTokens struct {
	mu    sync.Mutex
	byApp map[string]*appEntry
}

type appEntry struct {
	keySum [32]byte
	tokens publishTokens
}

// forRoute returns the installation tokens of r's App, reading its private key through src.
func (a *appTokens) forRoute(ctx context.Context, r *config.Route, src secrets.Source, hc *http.Client) (publish.InstallationTokens, error) {
	return a.forApp(ctx, r.Publish.BaseURL, r.Publish.App, src, hc)
}

// forApp returns the installation tokens of app at baseURL, reading its private key through
// src.
func (a *appTokens) forApp(ctx context.Context, baseURL string, app *config.App, src secrets.Source, hc *http.Client) (publish.InstallationTokens, error) {
	pem, err := src.Get(ctx, app.PrivateKey.From)
	if err != nil {
		return nil, fmt.Errorf("GitHub App private key: %w", err)
	}
	id := strings.TrimRight(baseURL, "/") + " " + app.ID
	sum := sha256.Sum256([]byte(pem))
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.byApp[id]; ok && e.keySum == sum {
		return e.tokens, nil
	}
	t, err := githubapp.New(githubapp.Config{BaseURL: baseURL, AppID: app.ID, PrivateKey: []byte(pem), Client: hc})
	if err != nil {
		return nil, fmt.Errorf("GitHub App %s: %w", app.ID, err)
	}
	if a.byApp == nil {
		a.byApp = map[string]*appEntry{}
	}
	a.byApp[id] = &appEntry{keySum: sum, tokens: publishTokens{t}}
	return a.byApp[id].tokens, nil
}

// publishTokens gives the publishers githubapp's tokens, its failures classed as the
// publishers class theirs: GitHub's outage or rate limit is transient (with GitHub's wait),
// a refused key or installation is the operator's.
type publishTokens struct{ t *githubapp.Tokens }

func (p publishTokens) Token(ctx context.Context, installation int64) (string, error) {
	tok, err := p.t.Token(ctx, installation)
	if err == nil {
		return tok, nil
	}
	pe := &publish.Error{Class: publish.Operator, Err: err}
	var ge *githubapp.Error
	if errors.As(err, &ge) {
		pe.Status = ge.Status
		if ge.Retryable {
			pe.Class, pe.RetryAfter = publish.Transient, ge.RetryAfter
		}
	} else if githubapp.Temporary(err) || ctx.Err() != nil {
		pe.Class = publish.Transient
	}
	return "", pe
}

func (p publishTokens) Forget(installation int64, token string) { p.t.Forget(installation, token) }
