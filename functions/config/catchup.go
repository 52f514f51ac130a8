package config

import (
	"time"

	"github.com/amiss-ci/amiss/functions/provider"
)

// CatchUp opts a route into catch-up (docs/catchup.md): on the cleanup schedule, and with
// `amiss catchup`, the provider's list of the hook's deliveries is read and the ones that
// failed are asked for again. GitHub: the App's webhook (hook: app, authenticated with the
// App's JWT), an organization's (hook: organization) or a repository's (hook: repository), by
// their id, with a token that administers hooks; GitLab: a project's (hook: project) or a
// group's (hook: group) webhook, by its id, with a Maintainer's or an Owner's token.
type CatchUp struct {
	// Hook is app, repository or organization (GitHub), project or group (GitLab).
	Hook string `yaml:"hook"`
	// ID is the hook's id (every hook but app): X-GitHub-Hook-ID of its deliveries, or the id
	// GitLab shows under Settings, Webhooks.
	ID int64 `yaml:"id"`
	// Owner is the repository (owner/name), the organization, the GitLab project's path (or
	// numeric id) or the group's path.
	Owner string `yaml:"owner"`
	// BaseURL is the provider's API (default: the route's read base URL, else GitHub's).
	BaseURL string `yaml:"base_url"`
	// Token reads and redelivers the hook's deliveries (every hook but app).
	Token SecretRef `yaml:"token"`
	// App is the GitHub App whose webhook this is (hook: app; default: the route's read or
	// publish App).
	App *App `yaml:"app"`
	// Lookback is how far back the hook's first run looks (default and ceiling: the
	// provider's window, 72h on GitHub, 7 days on GitLab).
	Lookback time.Duration `yaml:"lookback"`
}

// CatchUpFrom returns the route's catch-up block with its defaults filled in (base URL, App),
// and whether the route opted in.
func (r *Route) CatchUpFrom() (CatchUp, bool) {
	if r.CatchUp == nil {
		return CatchUp{}, false
	}
	c := *r.CatchUp
	rd, ok := r.ReadFrom()
	if c.BaseURL == "" && ok {
		c.BaseURL = rd.BaseURL
	}
	if c.Hook == "app" && c.App == nil {
		switch {
		case ok && rd.App != nil:
			c.App = rd.App
		case r.Publish.App != nil:
			c.App = r.Publish.App
		}
	}
	return c, true
}

// validate checks the catch-up block against the route's provider.
func (c *CatchUp) validate(route *Route) error {
	if c == nil {
		return nil
	}
	p, ok := provider.Sender(route.Provider)
	hooks := map[string][]string{provider.GitHub: {"app", "repository", "organization"}, provider.GitLab: {"project", "group"}}
	kinds := hooks[p.API]
	if !ok || kinds == nil {
		return fieldErr("catchup", "provider %s has no API that lists a webhook's deliveries: catch-up covers GitHub and GitLab "+
			"(docs/catchup.md says what to do by hand): remove the catchup block", route.Provider)
	}
	if !contains(kinds, c.Hook) {
		return fieldErr("catchup.hook", "%q: want one of %v", c.Hook, kinds)
	}
	full, _ := route.CatchUpFrom()
	switch {
	case full.BaseURL == "" && p.API == provider.GitLab:
		return fieldErr("catchup.base_url", "the GitLab instance's URL is needed")
	case full.BaseURL != "":
		if err := checkBaseURL(full.BaseURL); err != nil {
			return fieldErr("catchup.base_url", "%q: %v", full.BaseURL, err)
		}
	}
	if c.Lookback < 0 {
		return fieldErr("catchup.lookback", "must not be negative, got %s", c.Lookback)
	}
	if c.Hook == "app" {
		switch {
		case c.ID != 0 || c.Owner != "":
			return fieldErr("catchup", "hook: app names the App's own webhook: remove id and owner")
		case c.Token.From != "":
			return fieldErr("catchup.token", "the App's webhook is read with the App's JWT: remove the token")
		case full.App == nil:
			return fieldErr("catchup.app", "hook: app needs the GitHub App {id, private_key} (or a route that reads or publishes as one)")
		case !appID.MatchString(full.App.ID):
			return fieldErr("catchup.app.id", "%q: want the App's id or client id", full.App.ID)
		}
		if err := full.App.PrivateKey.check(); err != nil {
			return fieldErr("catchup.app.private_key.from", "%v", err)
		}
		return nil
	}
	if c.ID <= 0 {
		return fieldErr("catchup.id", "the hook's id is needed (X-GitHub-Hook-ID of its deliveries, or GitLab's Settings, Webhooks)")
	}
	if c.Owner == "" {
		return fieldErr("catchup.owner", "name the %s whose hook this is", c.Hook)
	}
	if c.App != nil {
		return fieldErr("catchup.app", "only hook: app is read as the App")
	}
	if err := c.Token.check(); err != nil {
		return fieldErr("catchup.token.from", "%v", err)
	}
	return nil
}
