package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// amiss check reads every secret, probes the root and each publisher's base URL, and posts
// nothing.
func TestCheck(t *testing.T) {
	var methods []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { methods = append(methods, r.Method) }))
	defer api.Close()
	cfg := filepath.Join(t.TempDir(), "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: current, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    publish: {provider: github, base_url: "`+api.URL+`", token: {from: "env:AMISS_TEST_TOKEN"}}
`), 0o600)
	root := filepath.Join(t.TempDir(), "root")
	t.Setenv("AMISS_TEST_HOOK", "h")
	t.Setenv("AMISS_TEST_TOKEN", "")
	var out bytes.Buffer
	err := run(context.Background(), []string{"check", "-config", cfg, "-root", root}, &out, io.Discard)
	if err == nil || !strings.Contains(out.String(), "FAIL  routes.gh.publish.token.from: route gh: publish token from env:AMISS_TEST_TOKEN cannot be read") ||
		!strings.Contains(out.String(), "ok    routes.gh.secrets[0].from") || !strings.Contains(out.String(), "amiss check: 4 passed, 1 failed") {
		t.Fatalf("missing token: %v\n%s", err, out.String())
	}
	t.Setenv("AMISS_TEST_TOKEN", "t")
	out.Reset()
	if err := run(context.Background(), []string{"check", "-config", cfg, "-root", root}, &out, io.Discard); err != nil {
		t.Fatalf("check: %v\n%s", err, out.String())
	}
	for _, want := range []string{"no root yet", "routes.gh.publish.base_url: " + api.URL + " answers (HTTP 200; no status was posted)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check does not say %q:\n%s", want, out.String())
		}
	}
	for _, m := range methods {
		if m != http.MethodGet {
			t.Errorf("check sent a %s to the provider", m)
		}
	}
	// A root made with other limits.
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	if err := run(context.Background(), []string{"demo", "-config", exampleConfig, "-root", root}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"check", "-config", cfg, "-root", root}, &out, io.Discard); err == nil ||
		!strings.Contains(out.String(), "controller.record_cap: the root records 100000, the configuration asks for 1000000") {
		t.Fatalf("other limits: %v\n%s", err, out.String())
	}
}

// The build targets' check: the packaged configuration reads only declared variables; a
// configuration reading env: secrets is refused, naming the variable and the remedy.
func TestCheckAgainstTheTemplate(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"check", "-template", "../../template.yaml", "-config", "../../examples/aws.yaml"}, &out, io.Discard); err != nil {
		t.Fatalf("the packaged configuration: %v\n%s", err, out.String())
	}
	out.Reset()
	err := run(context.Background(), []string{"check", "-template", "../../template.yaml", "-function", "IngressFunction", "-config", "../../examples/github.yaml"}, &out, io.Discard)
	if err == nil || !strings.Contains(out.String(), "routes.github.secrets[0].from reads the secret env:AMISS_GITHUB_SECRET, which ../../template.yaml does not declare for IngressFunction") ||
		!strings.Contains(out.String(), "aws-secretsmanager:ARN") {
		t.Fatalf("env: secrets: %v\n%s", err, out.String())
	}
}

// amiss check reads catch-up's credential as every secret: a missing one fails, named by its
// field.
func TestCheckNamesAMissingCatchUpCredential(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer api.Close()
	cfg := filepath.Join(t.TempDir(), "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: current, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    publish: {provider: github, base_url: "`+api.URL+`", token: {from: "env:AMISS_TEST_HOOK"}}
    catchup: {hook: repository, id: 7, owner: acme/app, token: {from: "env:AMISS_TEST_HOOKS"}}
`), 0o600)
	t.Setenv("AMISS_TEST_HOOK", "h")
	t.Setenv("AMISS_TEST_HOOKS", "")
	var out bytes.Buffer
	err := run(context.Background(), []string{"check", "-config", cfg, "-root", filepath.Join(t.TempDir(), "root")}, &out, io.Discard)
	if want := "FAIL  routes.gh.catchup.token.from: route gh: catch-up token from env:AMISS_TEST_HOOKS cannot be read"; err == nil || !strings.Contains(out.String(), want) {
		t.Fatalf("a missing catch-up token: %v, want %q in\n%s", err, want, out.String())
	}
}
