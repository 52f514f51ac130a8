package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestServeSignAndShutdown starts amiss serve on a loopback port with the example
// configuration, sends the webhook amiss sign prints, waits for the verdict, and shuts down.
func TestServeSignAndShutdown(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{config: "../../examples/amiss.yaml", root: filepath.Join(t.TempDir(), "root"),
			listen: "127.0.0.1:0", workers: 2, lease: 10 * time.Second, cleanupEvery: time.Hour, grace: 5 * time.Second, ready: ready}, out)
	}()
	addr := <-ready
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v", err)
	}
	send := func(args ...string) string {
		var cmd bytes.Buffer
		if err := runSign(append([]string{"-config", "../../examples/amiss.yaml", "-url", "http://" + addr}, args...), &cmd); err != nil {
			t.Fatalf("sign: %v", err)
		}
		res, err := exec.Command("bash", "-c", cmd.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, res)
		}
		return string(res)
	}
	if got := send(); !strings.Contains(got, `"outcome":"admitted"`) {
		t.Fatalf("push: %s", got)
	}
	if got := send("-title", "not conventional"); !strings.Contains(got, `"outcome":"admitted"`) {
		t.Fatalf("pull request: %s", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !(strings.Contains(out.String(), `"description":"all rules hold"`) && strings.Contains(out.String(), `"description":"failed: pull request title"`)) {
		if time.Now().After(deadline) {
			t.Fatalf("verdicts never published:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A forged request is refused.
	resp, _ = http.Post("http://"+addr+"/hooks/demo", "application/json", strings.NewReader(`{}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned webhook answered %d", resp.StatusCode)
	}
	io.Copy(io.Discard, resp.Body)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not shut down")
	}
	if !strings.Contains(out.String(), "amiss stopped") {
		t.Fatalf("no clean stop:\n%s", out.String())
	}
}
