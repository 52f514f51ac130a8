package config_test

import (
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
)

// A GitHub route may publish statuses as a GitHub App instead of with a token: the App's id
// and where its private key is read, which is a secret like the others.
func TestAGitHubRoutePublishesAsAnApp(t *testing.T) {
	for _, id := range []string{"123", "Iv23liAbC.dEf"} {
		c, err := config.Parse([]byte(base + "    publish: {provider: github, base_url: 'https://ghe.example/api/v3', " +
			"app: {id: '" + id + "', private_key: {from: 'file:/run/app.pem'}}}\n"))
		if err != nil {
			t.Fatalf("app id %s: %v", id, err)
		}
		p := c.Route("r").Publish
		if p.App == nil || p.App.ID != id || p.App.PrivateKey.From != "file:/run/app.pem" || p.Token.From != "" {
			t.Fatalf("publish %+v app %+v", p, p.App)
		}
		var uses []string
		for _, u := range c.SecretUses() {
			uses = append(uses, u.Path+" "+u.What+" "+u.From)
		}
		if want := "routes.r.secrets[0].from webhook secret a env:X|routes.r.publish.app.private_key.from GitHub App private key file:/run/app.pem"; strings.Join(uses, "|") != want {
			t.Fatalf("secret uses %q", uses)
		}
	}
	c, err := config.Parse([]byte(base + "    publish: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:T'}}\n"))
	if err != nil || c.Route("r").Publish.App != nil {
		t.Fatalf("a token route has an App: %v", err)
	}
}

// github-checks requires an App; an App and a token are exclusive; an App is for GitHub only;
// each refusal names the field by its YAML path and says what to do.
func TestTheAppBlockIsRefusedWhereItCannotWork(t *testing.T) {
	const app = "app: {id: '123', private_key: {from: 'env:K'}}"
	for name, c := range map[string]struct{ publish, field, says string }{
		"check runs without an App": {"{provider: github-checks, base_url: 'https://api.github.com', token: {from: 'env:T'}}",
			"routes.r.publish.app:", "only a GitHub App can"},
		"an App and a token": {"{provider: github, base_url: 'https://api.github.com', token: {from: 'env:T'}, " + app + "}",
			"routes.r.publish.token:", "exclusive"},
		"an App for Gitea": {"{provider: gitea, base_url: 'https://gitea.example.com', " + app + "}",
			"routes.r.publish.app:", "GitHub only"},
		"an App for the log": {"{" + app + "}", "routes.r.publish.app:", "GitHub only"},
		"no App id": {"{provider: github, base_url: 'https://api.github.com', app: {private_key: {from: 'env:K'}}}",
			"routes.r.publish.app.id:", "App's id"},
		"an App id that is a name": {"{provider: github, base_url: 'https://api.github.com', app: {id: amiss-bot, private_key: {from: 'env:K'}}}",
			"routes.r.publish.app.id:", "client id"},
		"no private key": {"{provider: github, base_url: 'https://api.github.com', app: {id: '123'}}",
			"routes.r.publish.app.private_key.from:", "env:NAME"},
		"a private key from nowhere": {"{provider: github, base_url: 'https://api.github.com', app: {id: '123', private_key: {from: 'vault:k'}}}",
			"routes.r.publish.app.private_key.from:", "unknown source"},
		"an unknown App field": {"{provider: github, base_url: 'https://api.github.com', app: {id: '123', key: x}}",
			"routes.r.publish.app.key", ""},
	} {
		_, err := config.Parse([]byte(base + "    publish: " + c.publish + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: error %v, want it to name %q and say %q", name, err, c.field, c.says)
		}
	}
}
