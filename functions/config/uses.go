package config

import (
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/ledger"
)

// SecretUse is one secret a configuration refers to, with where it is referred to.
type SecretUse struct {
	// Path is the YAML path of the reference, such as routes.acme.secrets[0].from.
	Path  string
	Route string
	// What says what the secret is for: "webhook secret ID", "evaluator secret", "publish
	// token", "GitHub App private key", "read token" or "catch-up token".
	What string
	// From is the reference: env:NAME, file:PATH or aws-secretsmanager:ARN[#key].
	From string
	// Webhook marks a webhook secret (the ingress reads it); CatchUp a credential catch-up
	// reads a hook's deliveries with (the cleanup reads it, docs/catchup.md); the others
	// (evaluator secrets, publish and read tokens and keys) are the runner's. A publishing
	// App's key that catch-up also reads is listed twice, once for each.
	Webhook bool
	CatchUp bool
}

// SecretUses lists every secret the configuration refers to, route by route in name order:
// webhook secrets, evaluator secrets, publish tokens, GitHub App private keys, read tokens
// and catch-up credentials.
func (c *Config) SecretUses() []SecretUse {
	var out []SecretUse
	for _, name := range c.RouteNames() {
		r := c.Routes[name]
		for i, s := range r.Secrets {
			out = append(out, SecretUse{Path: fmt.Sprintf("routes.%s.secrets[%d].from", name, i), Route: name,
				What: "webhook secret " + s.ID, From: s.From, Webhook: true})
		}
		if r.Evaluator.URL != "" {
			out = append(out, SecretUse{Path: "routes." + name + ".evaluator.secret.from", Route: name,
				What: "evaluator secret", From: r.Evaluator.Secret.From})
		}
		if p, ok := provider.Publishing(r.Publish.Provider); ok && p.Remote && r.Publish.Token.From != "" {
			out = append(out, SecretUse{Path: "routes." + name + ".publish.token.from", Route: name,
				What: "publish token", From: r.Publish.Token.From})
		}
		if a := r.Publish.App; a != nil {
			out = append(out, SecretUse{Path: "routes." + name + ".publish.app.private_key.from", Route: name,
				What: "GitHub App private key", From: a.PrivateKey.From})
		}
		if rd := r.Read; rd != nil && rd.App != nil {
			out = append(out, SecretUse{Path: "routes." + name + ".read.app.private_key.from", Route: name,
				What: "GitHub App private key (reads)", From: rd.App.PrivateKey.From})
		} else if rd != nil {
			out = append(out, SecretUse{Path: "routes." + name + ".read.token.from", Route: name,
				What: "read token", From: rd.Token.From})
		}
		if u, ok := r.catchUpUse(name); ok {
			out = append(out, u)
		}
	}
	return out
}

// catchUpUse is the credential the route's catch-up block reads deliveries with: its token,
// or the App's private key (for hook: app), named where it is configured (the block's own
// app, else the route's read or publish App it falls back to).
func (r *Route) catchUpUse(name string) (SecretUse, bool) {
	c, ok := r.CatchUpFrom()
	if !ok {
		return SecretUse{}, false
	}
	if c.Hook != "app" {
		return SecretUse{Path: "routes." + name + ".catchup.token.from", Route: name, What: "catch-up token", From: c.Token.From, CatchUp: true}, true
	}
	if c.App == nil {
		return SecretUse{}, false // refused by validate: no App to read the App's webhook as
	}
	path := "routes." + name + ".catchup.app.private_key.from"
	switch {
	case r.CatchUp.App != nil:
	case r.Read != nil && r.Read.App == c.App:
		path = "routes." + name + ".read.app.private_key.from"
	default:
		path = "routes." + name + ".publish.app.private_key.from"
	}
	return SecretUse{Path: path, Route: name, What: "GitHub App private key (catch-up)", From: c.App.PrivateKey.From, CatchUp: true}, true
}

// LimitsMismatch describes, field by field in the configuration's terms, how the limits a
// ledger root recorded differ from the ones this configuration asks for (nil when they match).
//
// A root that records no body-age ceiling and differs in nothing else is not a mismatch: it
// adopts the configured ceiling when it is next opened (see ledger.Limits.Reconcile and
// AdoptsBodyTimes).
func (c *Config) LimitsMismatch(stored ledger.Limits) []string {
	want := c.Limits()
	if _, _, err := stored.Reconcile(want, time.Time{}); err == nil {
		return nil
	}
	var out []string
	diff := func(field string, root, conf any) {
		if root != conf {
			out = append(out, fmt.Sprintf("controller.%s: the root records %v, the configuration asks for %v", field, root, conf))
		}
	}
	diff("signed_age_ceiling", stored.SignedAgeCeiling, want.SignedAgeCeiling)
	diff("queue_ceiling", stored.QueueCeiling, want.QueueCeiling)
	diff("future_skew", stored.FutureSkew, want.FutureSkew)
	diff("record_cap", stored.RecordCap, want.RecordCap)
	diff("max_change_bytes", stored.MaxChangeBytes, want.MaxChangeBytes)
	diff("max_report_bytes", stored.MaxReportBytes, want.MaxReportBytes)
	switch {
	case stored.BodyAgeCeiling == want.BodyAgeCeiling:
	case stored.BodyAgeCeiling == 0:
		out = append(out, fmt.Sprintf("controller.body_age_ceiling: the root records none (permanent markers), the configuration asks for %v: "+
			"the root adopts it once the other limits match", want.BodyAgeCeiling))
	case want.BodyAgeCeiling == 0:
		out = append(out, fmt.Sprintf("controller.body_age_ceiling: the root records %v and has forgotten rows under it; switching body times off "+
			"would admit a replay of a forgotten body as new", stored.BodyAgeCeiling))
	default:
		out = append(out, fmt.Sprintf("controller.body_age_ceiling: the root records %v, the configuration asks for %v: a recorded ceiling never changes "+
			"(narrow it per route with max_body_age)", stored.BodyAgeCeiling, want.BodyAgeCeiling))
	}
	return out
}

// AdoptsBodyTimes reports whether a root recording stored would adopt this configuration's
// body-age ceiling when next opened (it records none, and every other limit matches).
func (c *Config) AdoptsBodyTimes(stored ledger.Limits) bool {
	_, adopt, err := stored.Reconcile(c.Limits(), time.Time{})
	return err == nil && adopt
}
