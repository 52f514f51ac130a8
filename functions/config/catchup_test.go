package config

import (
	"strings"
	"testing"
)

func TestACatchUpBlockIsCheckedAgainstItsProvider(t *testing.T) {
	route := func(provider, publish, block string) string {
		return `
routes:
  r:
    provider: ` + provider + `
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    rules: {commit_message: '^[A-Z]'}
    publish: ` + publish + `
    catchup: ` + block + "\n"
	}
	gh := `{provider: github, base_url: "https://ghe.example/api/v3", token: {from: "env:TOKEN"}}`
	app := `{provider: github, base_url: "https://api.github.com", app: {id: "12", private_key: {from: "env:KEY"}}}`
	gl := `{provider: gitlab, base_url: "https://gitlab.example", token: {from: "env:TOKEN"}}`
	cases := []struct {
		name, yaml, refusal string
	}{
		{"a repository's hook", route("github", gh, `{hook: repository, id: 7, owner: acme/app, token: {from: "env:HOOKS"}}`), ""},
		{"the App's hook, with the publisher's App", route("github", app, `{hook: app}`), ""},
		{"a GitLab group's hook", route("gitlab", gl, `{hook: group, id: 3, owner: acme, token: {from: "env:GL"}}`), ""},
		{"the App's hook without an App", route("github", gh, `{hook: app}`), "catchup.app"},
		{"a repository's hook without its id", route("github", gh, `{hook: repository, owner: acme/app, token: {from: "env:HOOKS"}}`), "catchup.id"},
		{"a hook kind of another provider", route("github", gh, `{hook: project, id: 1, owner: acme, token: {from: "env:T"}}`), "catchup.hook"},
		{"an organization's hook without a token", route("github", gh, `{hook: organization, id: 1, owner: acme}`), "catchup.token"},
		{"a provider without a deliveries API", route("gitea", `{provider: gitea, base_url: "https://gitea.example", token: {from: "env:T"}}`,
			`{hook: repository, id: 1, owner: acme/app, token: {from: "env:T"}}`), "docs/catchup.md"},
		{"a negative lookback", route("github", app, `{hook: app, lookback: -1h}`), "catchup.lookback"},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(c.yaml))
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want a refusal naming %s", c.name, err, c.refusal)
		case c.refusal == "":
			if cu, ok := cfg.Route("r").CatchUpFrom(); !ok || cu.Hook == "" {
				t.Errorf("%s: no catch-up block read", c.name)
			}
		}
	}
}

// The credentials catch-up reads deliveries with are secrets the configuration refers to, named
// by their field and marked as catch-up's (the cleanup reads them): a hook's token, or the
// App's private key, where it is configured.
func TestCatchUpCredentialsAreSecretUses(t *testing.T) {
	cfg, err := Parse([]byte(`
routes:
  repo:
    provider: github
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "env:TOKEN"}}
    catchup: {hook: repository, id: 7, owner: acme/app, token: {from: "env:HOOKS"}}
  app:
    provider: github
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    publish: {provider: github, base_url: "https://api.github.com", app: {id: "12", private_key: {from: "env:KEY"}}}
    catchup: {hook: app}
  own:
    provider: github
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "env:TOKEN"}}
    catchup: {hook: app, app: {id: "12", private_key: {from: "env:HOOKKEY"}}}
  lab:
    provider: gitlab
    secrets: [{id: k, from: "env:HOOK"}]
    repositories: ["acme/*"]
    publish: {provider: gitlab, base_url: "https://gitlab.example", token: {from: "env:TOKEN"}}
    catchup: {hook: group, id: 3, owner: acme, token: {from: "env:GLHOOKS"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"routes.repo.catchup.token.from":          "env:HOOKS",
		"routes.app.publish.app.private_key.from": "env:KEY",
		"routes.own.catchup.app.private_key.from": "env:HOOKKEY",
		"routes.lab.catchup.token.from":           "env:GLHOOKS",
	}
	got := map[string]string{}
	for _, u := range cfg.SecretUses() {
		if u.CatchUp {
			if u.Webhook {
				t.Errorf("%s is marked both webhook secret and catch-up credential", u.Path)
			}
			got[u.Path] = u.From
		}
	}
	for path, from := range want {
		if got[path] != from {
			t.Errorf("catch-up credential %s: %q, want %q", path, got[path], from)
		}
	}
	if len(got) != len(want) {
		t.Errorf("catch-up credentials %v, want %v", got, want)
	}
}
