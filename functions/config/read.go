package config

import (
	"github.com/amiss-ci/amiss/functions/provider"
)

// Read is where and as whom the runner reads from a route's provider's API what its webhooks
// do not carry whole and its rules need: a pull request's files and commits, a push's commits
// and changed paths beyond what the webhook lists. Without it, a route that publishes to its
// own provider's API reads with the publisher's base URL and credential (a GitHub App's
// installation tokens, or the publish token); any other route reads nothing, and the rules that
// need a read fail closed.
type Read struct {
	BaseURL string    `yaml:"base_url"`
	Token   SecretRef `yaml:"token"`
	// App reads as a GitHub App with installation tokens (github only), instead of Token.
	App *App `yaml:"app"`
}

// ReadFrom returns where the route reads its provider's API, and whether it can: its read
// block, or else its publisher's base URL and credential when it publishes to the API its
// webhooks come from.
func (r *Route) ReadFrom() (Read, bool) {
	if r.Read != nil {
		return *r.Read, true
	}
	from, ok := provider.Sender(r.Provider)
	to, ok2 := provider.Publishing(r.Publish.Provider)
	if !ok || !ok2 || from.API == "" || from.API != to.API {
		return Read{}, false
	}
	return Read{BaseURL: r.Publish.BaseURL, Token: r.Publish.Token, App: r.Publish.App}, true
}

// validate checks an explicit read block against the route's provider.
func (rd *Read) validate(route *Route) error {
	if rd == nil {
		return nil
	}
	p, ok := provider.Sender(route.Provider)
	if !ok || p.API == "" {
		return fieldErr("read", "provider %s has no API to read from: remove the read block", route.Provider)
	}
	if err := checkBaseURL(rd.BaseURL); err != nil {
		return fieldErr("read.base_url", "%q: %v", rd.BaseURL, err)
	}
	if rd.App != nil {
		if p.API != provider.GitHub {
			return fieldErr("read.app", "a GitHub App reads GitHub only, not %s", route.Provider)
		}
		if rd.Token.From != "" || rd.Token.ID != "" {
			return fieldErr("read.token", "read.app and read.token are exclusive: remove one")
		}
		if !appID.MatchString(rd.App.ID) {
			return fieldErr("read.app.id", "%q: want the App's id (digits) or client id (Iv…), from the App's settings page", rd.App.ID)
		}
		if err := rd.App.PrivateKey.check(); err != nil {
			return fieldErr("read.app.private_key.from", "%v", err)
		}
		return nil
	}
	if err := rd.Token.check(); err != nil {
		return fieldErr("read.token.from", "%v (a token that may read the repository's pull requests and contents)", err)
	}
	return nil
}
