package wiring

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/secrets"
)

// appTokens keeps the GitHub App of each route for the life of the process, every App over one
// token cache, so that installation tokens are cached across deliveries (routes are built per
// delivery) and shared by the routes of one App and base URL, whichever of the App's keys each
// names. A route whose key was rotated (its secret reads differently) gets an App of its own;
// the tokens stay.
type appTokens struct {
	mu      sync.Mutex
	cache   *github.TokenCache
	byRoute map[string]appEntry
}

type appEntry struct {
	keySum [32]byte
	app    *github.App
}

// forRoute returns the App of r, reading its private key through src. Its failures are
// already classed as the publishers class theirs (github.App's errors): GitHub's outage or
// rate limit is transient, with GitHub's wait; a refused key or installation is the
// operator's.
func (a *appTokens) forRoute(ctx context.Context, r *config.Route, src secrets.Source, hc *http.Client) (*github.App, error) {
	return a.forApp(ctx, "publish "+r.Name, r.Publish.BaseURL, r.Publish.App, src, hc)
}

// forApp returns app at baseURL, kept under name, reading its private key through src.
func (a *appTokens) forApp(ctx context.Context, name, baseURL string, app *config.App, src secrets.Source, hc *http.Client) (*github.App, error) {
	pem, err := src.Get(ctx, app.PrivateKey.From)
	if err != nil {
		return nil, fmt.Errorf("GitHub App private key: %w", err)
	}
	sum := sha256.Sum256([]byte(pem))
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.byRoute[name]; ok && e.keySum == sum {
		return e.app, nil
	}
	if a.cache == nil {
		a.cache, a.byRoute = github.NewTokenCache(), map[string]appEntry{}
	}
	ga, err := github.NewApp(github.AppConfig{BaseURL: baseURL, AppID: app.ID, PrivateKey: []byte(pem), Client: hc, Cache: a.cache})
	if err != nil {
		return nil, fmt.Errorf("GitHub App %s: %w", app.ID, err)
	}
	a.byRoute[name] = appEntry{keySum: sum, app: ga}
	return ga, nil
}
