package wiring_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
)

// appRoutes writes a configuration of one route per key, each publishing commit statuses as
// App 42 to baseURL with that key, and returns their lookup.
func appRoutes(t *testing.T, baseURL string, pems ...[]byte) func(context.Context, string) (*runner.Route, error) {
	t.Helper()
	dir := t.TempDir()
	secrets := fixedSecrets{}
	var yaml strings.Builder
	yaml.WriteString("routes:\n")
	for i, pem := range pems {
		name := string(rune('a' + i))
		ref := "file:" + filepath.Join(dir, name+".pem")
		secrets[ref] = string(pem)
		yaml.WriteString(`  ` + name + `:
    provider: github
    secrets: [{id: ` + name + `, from: "env:S"}]
    repositories: [acme/app]
    publish: {provider: github, base_url: "` + baseURL + `", app: {id: "42", private_key: {from: "` + ref + `"}}, context: amiss/` + name + `}
`)
	}
	p := filepath.Join(dir, "amiss.yaml")
	if err := os.WriteFile(p, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return wiring.Routes(cfg, secrets, nil, nil)
}

func publishOn(routes func(context.Context, string) (*runner.Route, error), name string) error {
	r, err := routes(context.Background(), name)
	if err != nil {
		return err
	}
	return r.Publisher.Publish(context.Background(), publish.Status{Repository: "acme/app", SHA: strings.Repeat("a", 40),
		State: "success", Context: r.Context, Installation: 7})
}

// Two routes name one App with two of its keys (a rotation under way, two teams' routes):
// GitHub's installation tokens are the App's, whichever key signed the JWT, so the routes
// share one token per installation. Deliveries alternating between the routes cost one
// exchange, not one each time the other route's key was used last (4 of 4 before the routes'
// Apps shared one cache).
func TestTwoRoutesWithTwoKeysOfOneAppShareOneTokenPerInstallation(t *testing.T) {
	keyA, pemA := githubtest.GenerateKey()
	keyB, pemB := githubtest.GenerateKey()
	gh := githubtest.NewApp(42, &keyA.PublicKey, &keyB.PublicKey)
	gh.Install(7, "acme/app")
	srv := httptest.NewServer(gh)
	defer srv.Close()
	routes := appRoutes(t, srv.URL, pemA, pemB)
	for i := range 4 {
		if err := publishOn(routes, []string{"a", "b"}[i%2]); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if n := gh.Exchanges(7); n != 1 {
		t.Fatalf("%d token exchanges for installation 7 over 4 deliveries on two routes of one App, want 1", n)
	}
	if v := gh.Violations(); len(v) > 0 {
		t.Fatal(v)
	}
}

// The publishers retry what GitHub's outage refused and report as the operator's what only an
// operator can fix: the App's failures reach them in the publishers' classes, with no
// translation between.
func TestAppTokenFailuresReachThePublishersInTheirClasses(t *testing.T) {
	key, pem := githubtest.GenerateKey()
	gh := githubtest.NewApp(42, &key.PublicKey)
	srv := httptest.NewServer(gh)
	defer srv.Close()
	routes := appRoutes(t, srv.URL, pem)
	gh.Install(7, "acme/app")
	gh.FailNext(1, http.StatusServiceUnavailable)
	if err := publishOn(routes, "a"); publish.ClassOf(err) != publish.Transient || publish.Unknown(err) {
		t.Fatalf("GitHub's 503 on the exchange: %v, class %v; want transient, nothing posted", err, publish.ClassOf(err))
	}
	if err := publishOn(routes, "a"); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	// Routes built anew (another process) hold no token: each exchanges.
	gh.Refuse(7, http.StatusNotFound, "Not Found")
	if err := publishOn(appRoutes(t, srv.URL, pem), "a"); publish.ClassOf(err) != publish.Operator || publish.Unknown(err) {
		t.Fatalf("a refused installation: %v, class %v; want operator", err, publish.ClassOf(err))
	}
	_, foreign := githubtest.GenerateKey()
	if err := publishOn(appRoutes(t, srv.URL, foreign), "a"); publish.ClassOf(err) != publish.Operator || publish.Unknown(err) {
		t.Fatalf("a key GitHub does not list: %v, class %v; want operator", err, publish.ClassOf(err))
	}
}
