package config

import (
	"fmt"
	"strings"

	"github.com/amiss-ci/amiss/functions/provider"
)

// Read is where and as whom the runner reads from a route's provider's API what its webhooks
// do not carry whole and its rules need: a pull request's files and commits, a push's commits
// and changed paths beyond what the webhook lists. Without it, a route that publishes to its
// own provider's API reads with the publisher's base URL and credential (a GitHub App's
// installation tokens, or the publish token); any other route reads nothing, and the rules that
// need a read fail closed.
type Read struct {
	// Provider names the API to read as a publisher names it: needed where the route's
	// webhooks come from more than one API (bitbucket: bitbucket for Bitbucket Cloud,
	// bitbucket-datacenter for a Data Center server); elsewhere the route's provider, the
	// default.
	Provider string    `yaml:"provider"`
	BaseURL  string    `yaml:"base_url"`
	Token    SecretRef `yaml:"token"`
	// App reads as a GitHub App with installation tokens (github only), instead of Token.
	App *App `yaml:"app"`
}

// ReadFrom returns where the route reads its provider's API, and whether it can: its read
// block, or else its publisher's base URL and credential when it publishes to an API its
// webhooks come from. Provider names the API read, in either case.
func (r *Route) ReadFrom() (Read, bool) {
	if r.Read != nil {
		rd := *r.Read
		if rd.Provider == "" {
			rd.Provider = r.Provider
		}
		return rd, true
	}
	from, ok := provider.Sender(r.Provider)
	to, ok2 := provider.Publishing(r.Publish.Provider)
	if !ok || !ok2 || from.API == "" || !from.Receives(to.API) {
		return Read{}, false
	}
	return Read{Provider: r.Publish.Provider, BaseURL: r.Publish.BaseURL, Token: r.Publish.Token, App: r.Publish.App}, true
}

// API names the one API of those the route's webhooks may come from that the route publishes
// to or reads from (bitbucket: Bitbucket Cloud's or a Data Center server's), or "" when it is
// bound to none (its webhooks come from one API, or it publishes elsewhere and reads nothing).
func (r *Route) API() string {
	from, ok := provider.Sender(r.Provider)
	if !ok || len(from.SenderAPIs) == 0 {
		return ""
	}
	if rd, ok := r.ReadFrom(); ok {
		if p, ok := provider.Lookup(rd.Provider); ok {
			return p.API
		}
	}
	return ""
}

// Takes says why the route refuses a webhook that came from api (change.Change.API), or nil
// when it takes it: a route bound to one of its provider's APIs (API) takes no webhook of
// another, whose verdict would be posted to, and whose inputs read from, a server that does not
// hold its repository.
func (r *Route) Takes(api string) error {
	bound := r.API()
	if api == "" || bound == "" || api == bound {
		return nil
	}
	field := "publish.provider"
	if r.Read != nil {
		field = "read.provider"
	}
	return fmt.Errorf("this webhook came from %s, and the route's %s is %s: set it to %s (with that API's base URL and token), "+
		"or send this webhook to a route of its own", apiName(api), field, bound, api)
}

// apiName is how a message names an API a webhook came from.
func apiName(api string) string {
	switch api {
	case provider.Bitbucket:
		return "Bitbucket Cloud"
	case provider.BitbucketDataCenter:
		return "a Bitbucket Data Center server"
	}
	return api
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
	switch target, ok := provider.Lookup(rd.Provider); {
	case rd.Provider == "" && len(p.SenderAPIs) > 0:
		return fieldErr("read.provider", "%s's webhooks come from %s: name the one this route reads", route.Provider,
			strings.Join(p.SenderAPIs, " or "))
	case rd.Provider != "" && (!ok || !p.Receives(target.API)):
		want := p.SenderAPIs
		if len(want) == 0 {
			want = []string{route.Provider}
		}
		return fieldErr("read.provider", "%q: %s's webhooks come from %s", rd.Provider, route.Provider, strings.Join(want, " or "))
	case len(p.SenderAPIs) > 0:
		// A route reads and publishes to one of its webhooks' APIs, never one of each.
		if pub, ok := provider.Publishing(route.Publish.Provider); ok && p.Receives(pub.API) && pub.API != target.API {
			return fieldErr("read.provider", "%s, but publish.provider is %s: a route's webhooks come from one of them; name the same in both",
				rd.Provider, route.Publish.Provider)
		}
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
