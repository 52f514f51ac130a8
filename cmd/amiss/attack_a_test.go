package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Attack (serve, bad input): amiss serve takes settings under which it admits deliveries it
// will never evaluate (-workers 0: no runner goroutine; 202 for every webhook, nothing ever
// published while it runs) or crashes on the first delivery (-lease 2ns: the keeper's renewal
// ticker gets a zero interval and panics). "Bad input gets a clear error": each must be
// refused at start with the flag named, as -lease 0 already is.
func TestAttackServeRefusesSettingsItCannotRunWith(t *testing.T) {
	for _, args := range [][]string{
		{"-workers", "0"},
		{"-workers", "-2"},
		{"-lease", "2ns"},
	} {
		if _, err := parseServe(args); err == nil {
			t.Errorf("amiss serve %s accepted", strings.Join(args, " "))
		}
	}
}

// What -lease 2ns does once accepted: the first delivery crashes the whole server (a panic in
// the runner's keeper goroutine), and the same crash comes back at every restart, since the
// recovery at start queues the row again. The server must either refuse the setting or run;
// it must not die with a 202 given and nothing published.
func TestAttackServeWithATinyLeaseDoesNotCrash(t *testing.T) {
	api := &standIn{bodies: map[string][]string{}, arrived: make(chan struct{}, 100)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: k, from: "env:HOOK_SECRET"}]
    repositories: ["acme/*"]
    publish: {provider: github, base_url: "`+srv.URL+`", token: {from: "env:GH_TOKEN"}, context: amiss/verdict}
`), 0o600)
	c := startServeProcess(t, "-config", cfg, "-root", filepath.Join(dir, "root"), "-listen", "127.0.0.1:0", "-workers", "1",
		"-lease", "2ns", "-cleanup-every", "1h", "-stranded-after", "1h")
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	signedPush(t, c.addr, 1) // 202
	select {
	case err := <-exited:
		t.Fatalf("amiss serve -lease 2ns died on the first delivery (%v) after answering 202:\n%s", err, c.output())
	case <-time.After(3 * time.Second):
	}
}
