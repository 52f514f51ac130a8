package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// amiss check on a route publishing as a GitHub App: the key parses, GitHub accepts the JWT
// and names the App, and on each repository the route names the App is installed, may write
// statuses, and an installation token can be had. Each failure says what to do; nothing but
// the App API is asked (the fake records any other request), and nothing is posted to a
// repository.
func TestCheckAGitHubApp(t *testing.T) {
	key, pemKey := githubtest.GenerateKey()
	_, otherPEM := githubtest.GenerateKey()
	fake := githubtest.NewApp(4242, &key.PublicKey)
	fake.Prefix = "/api/v3" // a GitHub Enterprise Server
	fake.Install(7, "acme/app")
	api := httptest.NewServer(fake)
	defer api.Close()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "app.pem")
	cfg := filepath.Join(dir, "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: current, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app, acme/lib, "acme/*", "zeta/*"]
    publish:
      provider: github
      base_url: "`+api.URL+`/api/v3"
      app: {id: "4242", private_key: {from: "file:`+keyFile+`"}}
`), 0o600)
	t.Setenv("AMISS_TEST_HOOK", "h")
	root := filepath.Join(dir, "root")
	check := func(key []byte) (string, error) {
		t.Helper()
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := run(context.Background(), []string{"check", "-config", cfg, "-root", root}, &out, io.Discard)
		return out.String(), err
	}
	says := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("check does not say %q:\n%s", w, out)
			}
		}
	}

	out, err := check(pemKey)
	if err == nil {
		t.Fatalf("acme/lib has no installation, yet check passed:\n%s", out)
	}
	says(out, "ok    routes.gh.publish.app.private_key.from: route gh: GitHub App private key from file:",
		"ok    routes.gh.publish.app.private_key: an RSA private key",
		`ok    routes.gh.publish.app: GitHub accepts the App's JWT: App amiss-test ("amiss test", id 4242)`,
		"ok    routes.gh.publish.app: acme/app: installation 7 (account acme) may write statuses; an installation token can be had (nothing was posted)",
		"FAIL  routes.gh.publish.app: acme/lib: githubapp: find the installation on acme/lib: GitHub answered 404",
		"install the App on the repository",
		"ok    routes.gh.publish.app: acme/*: installation 7 (account acme) may write statuses; an installation token can be had",
		"FAIL  routes.gh.publish.app: zeta/*: githubapp: find the installation on the account zeta (installation refused): "+
			"the App is not installed on the account zeta: install it there",
		"amiss check: 9 passed, 2 failed")
	if fake.Exchanges(7) != 1 { // acme/app's, then acme/* has it cached
		t.Errorf("%d token exchanges for acme's installation, want 1", fake.Exchanges(7))
	}

	fake.Install(7, "acme/lib")
	fake.Install(8, "zeta/tools")
	if out, err = check(pemKey); err != nil {
		t.Fatalf("an App installed on every named repository: %v\n%s", err, out)
	}
	says(out, "ok    routes.gh.publish.app: acme/lib: installation 7", "ok    routes.gh.publish.app: zeta/*: installation 8 (account zeta)")
	if fake.Exchanges(8) != 1 {
		t.Errorf("%d token exchanges for zeta's installation, want 1", fake.Exchanges(8))
	}

	fake.Permissions = map[string]string{"checks": "write", "metadata": "read"}
	out, _ = check(pemKey)
	says(out, "FAIL  routes.gh.publish.app: acme/app: installation 7 may not write statuses (it has checks:write, metadata:read): "+
		"give the App the statuses permission Read and write")
	fake.Permissions = map[string]string{"statuses": "write", "pull_requests": "read", "metadata": "read"}
	out, _ = check(pemKey)
	says(out, "FAIL  routes.gh.publish.app: acme/app: installation 7 may not read contents (it has metadata:read, pull_requests:read, "+
		"statuses:write), which a Re-run reads its commit's files and messages with", "or leave rerun out of routes.gh.events")
	fake.Permissions = nil

	out, _ = check(otherPEM)
	says(out, "FAIL  routes.gh.publish.app: githubapp: get the authenticated App: GitHub answered 401", "App JWT refused",
		"check the App id", "clock")

	out, _ = check([]byte("ghp_not_a_key"))
	says(out, "FAIL  routes.gh.publish.app.private_key: githubapp: App 4242: the private key is not PEM",
		"Generate a private key")
	if strings.Contains(out, "ghp_not_a_key") {
		t.Errorf("check printed the key file's content:\n%s", out)
	}

	// The only refusals the fake recorded are the foreign key's JWT.
	for _, v := range fake.Violations() {
		if !strings.Contains(v, "signature") {
			t.Errorf("check sent a request GitHub would refuse: %s", v)
		}
	}
}
