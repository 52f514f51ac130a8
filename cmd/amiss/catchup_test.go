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
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// amiss catchup runs catch-up once for every hook that opted in and prints each run's report;
// with -status it prints each hook's cursor (the deliveries it follows, the last run) and asks
// the provider for nothing.
func TestCatchUpRunsOnceAndShowsItsCursor(t *testing.T) {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer endpoint.Close()
	hook := gitlabtest.Hook{Parent: "acme/app", ID: 17}
	hooks := &gitlabtest.Hooks{Authorize: func(tok string) bool { return tok == "glpat-hooks" }}
	hooks.AddHook(hook, gitlabtest.HookConfig{URL: endpoint.URL, Token: "s"})
	api := httptest.NewServer(hooks)
	defer api.Close()
	e := hooks.Trigger(hook, gitlabtest.Event{Trigger: "push_hooks", Body: []byte(`{"object_kind":"push","project":{"path_with_namespace":"acme/app"}}`)})

	dir := t.TempDir()
	cfg := filepath.Join(dir, "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  lab:
    provider: gitlab
    scheme: gitlab-token
    secrets: [{id: k, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    publish: {provider: gitlab, base_url: "`+api.URL+`", token: {from: "env:AMISS_TEST_TOKEN"}}
    catchup: {hook: project, id: 17, owner: acme/app, token: {from: "env:AMISS_TEST_HOOKS"}}
`), 0o600)
	root := filepath.Join(dir, "root")
	l, err := localfs.Open(context.Background(), root, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	t.Setenv("AMISS_TEST_HOOK", "s")
	t.Setenv("AMISS_TEST_TOKEN", "glpat")
	t.Setenv("AMISS_TEST_HOOKS", "glpat-hooks")

	var out bytes.Buffer
	if err := run(context.Background(), []string{"catchup", "-config", cfg, "-root", root}, &out, io.Discard); err != nil {
		t.Fatalf("catchup: %v\n%s", err, out.String())
	}
	if want := "route lab: GitLab webhook 17 of project acme/app at "; !strings.Contains(out.String(), want) ||
		!strings.Contains(out.String(), "listed 1, found failed 1, redelivered 1, resolved 0, given up 0, following 1") {
		t.Errorf("catchup printed:\n%s\nwant the run's report", out.String())
	}
	if n := hooks.Resends(hook)[e.IdempotencyKey]; n != 1 {
		t.Errorf("the failed event was resent %d times, want once", n)
	}

	out.Reset()
	before := hooks.Requests()
	if err := run(context.Background(), []string{"catchup", "-status", "-config", cfg, "-root", root}, &out, io.Discard); err != nil {
		t.Fatalf("catchup -status: %v\n%s", err, out.String())
	}
	for _, want := range []string{"following       1 failed deliveries", e.IdempotencyKey + "  push_hooks acme/app", "asked 1 times",
		"last run: route lab: GitLab webhook 17 of project acme/app"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("catchup -status does not say %q:\n%s", want, out.String())
		}
	}
	if hooks.Requests() != before {
		t.Error("catchup -status sent requests to GitLab")
	}
}

// A run cut at its page bound moved its cursor on: its line says which attempts were not read
// (and so not redelivered), not that the cursor stayed; a run cut otherwise says the cursor did
// not move.
func TestACatchUpReportNamesTheSpanItCouldNotRead(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	printReport(&b, catchup.Report{Hook: "github app 1", At: at, Cut: true,
		UnreadFrom: at.Add(-3 * time.Hour), UnreadTo: at.Add(-2 * time.Hour)})
	if got := b.String(); !strings.Contains(got, "the cursor moved on; the attempts from 2026-12-06T09:00:00Z to 2026-12-06T10:00:00Z were not read") ||
		strings.Contains(got, "did not move") {
		t.Errorf("a run cut at its page bound prints %q", got)
	}
	b.Reset()
	printReport(&b, catchup.Report{Hook: "github app 1", At: at, Cut: true})
	if got := b.String(); !strings.Contains(got, "(listing cut: the cursor did not move)") {
		t.Errorf("a run cut by time prints %q", got)
	}
}
