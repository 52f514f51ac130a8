package catchup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
)

// Secrets reads a secret by reference (functions/secrets).
type Secrets interface {
	Get(ctx context.Context, ref string) (string, error)
}

// Sources returns the hooks the routes of cfg opted into catch-up for, with their clients:
// each credential is read through secrets now. hc sends the requests (nil: the clients'
// default). A route whose credential cannot be read is an error naming it; the other routes'
// sources are still returned.
func Sources(ctx context.Context, cfg *config.Config, secrets Secrets, hc *http.Client) ([]Source, error) {
	var out []Source
	var errs []error
	for _, name := range cfg.RouteNames() {
		r := cfg.Route(name)
		c, ok := r.CatchUpFrom()
		if !ok {
			continue
		}
		src, err := source(ctx, name, c, secrets, hc)
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s: catchup: %w", name, err))
			continue
		}
		out = append(out, src)
	}
	return out, errors.Join(errs...)
}

func source(ctx context.Context, route string, c config.CatchUp, secrets Secrets, hc *http.Client) (Source, error) {
	token := func() (string, error) {
		t, err := secrets.Get(ctx, c.Token.From)
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		return strings.TrimSpace(t), nil
	}
	switch c.Hook {
	case "app":
		key, err := secrets.Get(ctx, c.App.PrivateKey.From)
		if err != nil {
			return nil, fmt.Errorf("read the App's private key: %w", err)
		}
		app, err := github.NewApp(github.AppConfig{BaseURL: c.BaseURL, AppID: c.App.ID, PrivateKey: []byte(key), Client: hc})
		if err != nil {
			return nil, err
		}
		return &GitHub{Route: route, Hook: github.Hook{App: true}, Client: github.NewAppClient(app)}, nil
	case "repository", "organization":
		t, err := token()
		if err != nil {
			return nil, err
		}
		h := github.Hook{Repo: c.Owner, ID: c.ID}
		if c.Hook == "organization" {
			h = github.Hook{Org: c.Owner, ID: c.ID}
		}
		return &GitHub{Route: route, Hook: h, Client: github.NewTokenClient(c.BaseURL, t, hc)}, h.Validate()
	case "project", "group":
		t, err := token()
		if err != nil {
			return nil, err
		}
		h := gitlab.Hook{Project: c.Owner, ID: c.ID}
		if c.Hook == "group" {
			h = gitlab.Hook{Group: c.Owner, ID: c.ID}
		}
		return &GitLab{Route: route, Hook: h, Client: gitlab.NewClient(c.BaseURL, t, hc)}, h.Validate()
	}
	return nil, fmt.Errorf("unknown hook kind %q", c.Hook)
}

// RunAll runs r over every source, one after the other, and returns their reports; the errors
// of the runs that failed are joined (one hook's failure stops no other).
func (r *Runner) RunAll(ctx context.Context, sources []Source) ([]Report, error) {
	var reps []Report
	var errs []error
	for _, s := range sources {
		if ctx.Err() != nil {
			break
		}
		rep, err := r.Run(ctx, s)
		reps = append(reps, rep)
		errs = append(errs, err)
	}
	return reps, errors.Join(errs...)
}
