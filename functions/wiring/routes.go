package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/secrets"
)

// Routes returns the runner's route lookup: each call builds the route's evaluator and
// publisher, and, where the route has a credential to read its provider's API, the reader of
// what its webhooks lack (Inputs) and of what the provider shows now of a pull request
// (PullNow), reading their secrets through the resolver (which caches them briefly), so a
// rotated token is used without a redeploy. Every request to the provider, reads included, is
// bounded by the route's publish timeout. The lookup's ctx bounds those reads: the runner
// passes its invocation's, so a read that hangs ends before the deadline.
func Routes(cfg *config.Config, secrets secrets.Source, hc *http.Client, log *slog.Logger) func(context.Context, string) (*runner.Route, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	apps := &appTokens{}
	return func(ctx context.Context, name string) (*runner.Route, error) {
		r := cfg.Route(name)
		if r == nil {
			return nil, fmt.Errorf("route %q is not configured", name)
		}
		var ev evaluate.Evaluator
		if r.Evaluator.URL != "" {
			secret, err := secrets.Get(ctx, r.Evaluator.Secret.From)
			if err != nil {
				return nil, fmt.Errorf("route %s: evaluator secret: %w", name, err)
			}
			ev = &evaluate.HTTP{URL: r.Evaluator.URL, Secret: []byte(secret), Client: hc, Timeout: r.Evaluator.Timeout}
		} else {
			rules, err := evaluate.NewRules(r.Rules)
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", name, err)
			}
			ev = rules
		}
		p, ok := provider.Publishing(r.Publish.Provider)
		if !ok {
			return nil, fmt.Errorf("route %s: publisher %q", name, r.Publish.Provider)
		}
		// Each request to the provider is bounded by the route's timeout.
		pc := *hc
		pc.Timeout = r.Publish.Timeout
		target := provider.Target{BaseURL: r.Publish.BaseURL, Client: &pc, Log: log}
		switch {
		case r.Publish.App != nil:
			tokens, err := apps.forRoute(ctx, r, secrets, &pc)
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", name, err)
			}
			target.Tokens = tokens
		case p.Remote:
			token, err := secrets.Get(ctx, r.Publish.Token.From)
			if err != nil {
				return nil, fmt.Errorf("route %s: publish token: %w", name, err)
			}
			target.Token = token
		}
		pub := p.Publisher(target)
		route := &runner.Route{Evaluator: ev, Publisher: pub, Context: r.Publish.Context, TargetURL: r.Publish.TargetURL,
			Destination: r.Publish.Destination(), OldDestinations: cfg.OldDestinations(r.Publish.Destination()),
			Timeout: r.Publish.Timeout, Settle: r.Publish.Settle, Concurrency: r.Publish.Concurrency}
		reader, err := readerFor(ctx, r, target, apps, secrets, &pc)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", name, err)
		}
		if reader != nil {
			route.Inputs = reader
			// What the provider shows now of a pull request, read with the reader's
			// credential: it orders two verdicts of one second (runner.Route.PullNow).
			if pn, ok := reader.(pullReader); ok {
				route.PullNow = pn.PullNow
			}
		}
		return route, nil
	}
}

// pullReader reads what a provider shows now of a pull request (every provider client that
// reads what a webhook lacks does).
type pullReader interface {
	PullNow(ctx context.Context, s change.Change) (change.PullState, error)
}

// readerFor builds the reader of what r's webhooks lack from its provider's API (nil when the
// route has no credential to read it, or its provider no reader yet: the rules that need a
// read then fail closed, saying so). It reads with the route's read block, or with the
// publisher's credential (pub: its base URL, token or App tokens) when the route publishes to
// the API its webhooks come from.
func readerFor(ctx context.Context, r *config.Route, pub provider.Target, apps *appTokens, src secrets.Source,
	hc *http.Client) (runner.InputReader, error) {
	p, ok := provider.Sender(r.Provider)
	if !ok || p.Reader == nil {
		return nil, nil
	}
	rd, ok := r.ReadFrom()
	if !ok {
		return nil, nil
	}
	target := pub
	if r.Read != nil {
		target = provider.Target{BaseURL: rd.BaseURL, Client: hc}
		if rd.App != nil {
			app, err := apps.forApp(ctx, "read "+r.Name, rd.BaseURL, rd.App, src, hc)
			if err != nil {
				return nil, fmt.Errorf("read: %w", err)
			}
			target.Tokens = app
		} else {
			token, err := src.Get(ctx, rd.Token.From)
			if err != nil {
				return nil, fmt.Errorf("read token: %w", err)
			}
			target.Token = token
		}
	}
	if api, ok := provider.Lookup(rd.Provider); ok {
		target.API = api.API
	}
	reader := p.Reader(target)
	if reader == nil {
		return nil, nil
	}
	return reader, nil
}
