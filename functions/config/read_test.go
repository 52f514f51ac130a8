package config_test

import (
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
)

// A route reads what its webhooks lack with its read block, or, without one, with its
// publisher's base URL and credential when it publishes to the API its webhooks come from; a
// route publishing elsewhere (the log, another provider) has nothing to read with.
func TestARouteReadsWithItsReadBlockOrItsPublishersCredential(t *testing.T) {
	cases := []struct {
		name, yaml string
		ok         bool
		want       config.Read
	}{
		{"a token publisher", base + "    publish: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:T'}}\n", true,
			config.Read{BaseURL: "https://api.github.com", Token: config.SecretRef{From: "env:T"}}},
		{"the log", base, false, config.Read{}},
		{"another provider's API", strings.Replace(base, "provider: github", "provider: gitlab", 1) +
			"    publish: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:T'}}\n", false, config.Read{}},
		{"forgejo's webhooks, gitea's API", strings.Replace(base, "provider: github", "provider: forgejo", 1) +
			"    publish: {provider: gitea, base_url: 'https://code.example', token: {from: 'env:T'}}\n", true,
			config.Read{BaseURL: "https://code.example", Token: config.SecretRef{From: "env:T"}}},
		{"a read block", base + "    read: {base_url: 'https://ghe.example/api/v3', token: {from: 'env:R'}}\n", true,
			config.Read{BaseURL: "https://ghe.example/api/v3", Token: config.SecretRef{From: "env:R"}}},
	}
	for _, c := range cases {
		cfg, err := config.Parse([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, ok := cfg.Route("r").ReadFrom()
		if ok != c.ok || got.BaseURL != c.want.BaseURL || got.Token != c.want.Token {
			t.Errorf("%s: reads from %+v (%v), want %+v (%v)", c.name, got, ok, c.want, c.ok)
		}
	}
	app := base + "    publish: {provider: github-checks, base_url: 'https://api.github.com', app: {id: '7', private_key: {from: 'env:K'}}}\n"
	cfg, err := config.Parse([]byte(app))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cfg.Route("r").ReadFrom(); !ok || got.App == nil || got.App.ID != "7" {
		t.Fatalf("an App's route reads %+v (%v), want with the App", got, ok)
	}
}

// A read block is refused where it cannot work, naming the field.
func TestAReadBlockIsRefusedWhereItCannotWork(t *testing.T) {
	for name, c := range map[string]struct{ yaml, field string }{
		"no API to read": {strings.Replace(base, "provider: github", "provider: standard-webhooks", 1) +
			"    read: {base_url: 'https://x.example', token: {from: 'env:R'}}\n", "routes.r.read:"},
		"an App for GitLab": {strings.Replace(base, "provider: github", "provider: gitlab", 1) +
			"    read: {base_url: 'https://gitlab.example', app: {id: '1', private_key: {from: 'env:K'}}}\n", "routes.r.read.app:"},
		"no credential":   {base + "    read: {base_url: 'https://api.github.com'}\n", "routes.r.read.token.from:"},
		"not a URL":       {base + "    read: {base_url: 'api.github.com', token: {from: 'env:R'}}\n", "routes.r.read.base_url:"},
		"App and a token": {base + "    read: {base_url: 'https://api.github.com', token: {from: 'env:R'}, app: {id: '1', private_key: {from: 'env:K'}}}\n", "routes.r.read.token:"},
	} {
		_, err := config.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
	}
}

// A read block's secret is one the configuration uses, so that amiss check and the runner's
// start read it.
func TestAReadTokenIsASecretUse(t *testing.T) {
	cfg, err := config.Parse([]byte(base + "    read: {base_url: 'https://api.github.com', token: {from: 'env:R'}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, u := range cfg.SecretUses() {
		found = found || u.Path == "routes.r.read.token.from" && u.From == "env:R" && !u.Webhook
	}
	if !found {
		t.Fatalf("uses %+v", cfg.SecretUses())
	}
}
