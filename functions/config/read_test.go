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

// Bitbucket's webhooks come from Bitbucket Cloud and from Data Center servers: a route reads
// from and publishes to the one its publisher or read block names, and takes no webhook of the
// other, saying which field to set; a route bound to neither takes both.
func TestABitbucketRouteIsBoundToTheAPIItPublishesToOrReads(t *testing.T) {
	bitbucket := strings.Replace(base, "provider: github", "provider: bitbucket", 1)
	cases := []struct {
		name, yaml   string
		api          string // the API the route is bound to
		refused      string // the API whose webhooks it refuses
		field, names string // what the refusal says
	}{
		{"publishing to a Data Center server", bitbucket + "    publish: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:T'}}\n",
			"bitbucket-datacenter", "bitbucket", "publish.provider is bitbucket-datacenter", "Bitbucket Cloud"},
		{"publishing to Bitbucket Cloud", bitbucket + "    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}}\n",
			"bitbucket", "bitbucket-datacenter", "publish.provider is bitbucket: set it to bitbucket-datacenter", "Data Center"},
		{"reading a Data Center server", bitbucket + "    read: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:R'}}\n",
			"bitbucket-datacenter", "bitbucket", "read.provider is bitbucket-datacenter: set it to bitbucket", "Bitbucket Cloud"},
		{"publishing to the log, reading nothing", bitbucket, "", "", "", ""},
	}
	for _, c := range cases {
		cfg, err := config.Parse([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := cfg.Route("r")
		if got := r.API(); got != c.api {
			t.Errorf("%s: bound to %q, want %q", c.name, got, c.api)
		}
		if c.api != "" {
			if rd, ok := r.ReadFrom(); !ok || rd.Provider != c.api {
				t.Errorf("%s: reads %+v (%v), want the %s API", c.name, rd, ok, c.api)
			}
			if err := r.Takes(c.api); err != nil {
				t.Errorf("%s: refuses its own API's webhook: %v", c.name, err)
			}
			err := r.Takes(c.refused)
			if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.names) {
				t.Errorf("%s: a webhook from %s: %v, want a refusal naming %q and %q", c.name, c.refused, err, c.names, c.field)
			}
			continue
		}
		for _, api := range []string{"", "bitbucket", "bitbucket-datacenter"} {
			if err := r.Takes(api); err != nil {
				t.Errorf("%s: refuses a webhook from %q: %v", c.name, api, err)
			}
		}
	}
	cfg, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Route("r").Takes(""); err != nil {
		t.Fatalf("a GitHub route refuses GitHub's webhook: %v", err)
	}
}

// A Bitbucket route's read block names which of Bitbucket's APIs it reads; a read block names
// only an API its route's webhooks come from; a Data Center build status's URL is bounded as
// Data Center bounds it.
func TestABitbucketReadBlockNamesItsAPI(t *testing.T) {
	bitbucket := strings.Replace(base, "provider: github", "provider: bitbucket", 1)
	for name, c := range map[string]struct{ yaml, field string }{
		"no provider": {bitbucket + "    read: {base_url: 'https://bitbucket.example', token: {from: 'env:R'}}\n", "routes.r.read.provider:"},
		"GitHub's API": {bitbucket + "    read: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:R'}}\n",
			"routes.r.read.provider:"},
		"Data Center's API on a GitHub route": {base + "    read: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:R'}}\n",
			"routes.r.read.provider:"},
		"reading one product, publishing to the other": {bitbucket + "    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}}\n" +
			"    read: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:R'}}\n", "routes.r.read.provider:"},
		"a long build status URL": {bitbucket + "    publish: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:T'}, " +
			"target_url: 'https://ci.example/" + strings.Repeat("a", 440) + "'}\n", "routes.r.publish.target_url:"},
	} {
		_, err := config.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
	}
	cfg, err := config.Parse([]byte(base + "    read: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:R'}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rd, _ := cfg.Route("r").ReadFrom(); rd.Provider != "github" {
		t.Fatalf("a GitHub read block reads %q", rd.Provider)
	}
}
