package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
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
			listen: "127.0.0.1:0", workers: 2, lease: 10 * time.Second, cleanupEvery: time.Hour, grace: 5 * time.Second, ready: ready, create: true}, out)
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

// A shutdown that cuts work in flight says truthfully when it resumes, and it does: the next
// serve on the root queues the unfinished rows at start.
func TestShutdownSaysWhenCutWorkResumes(t *testing.T) {
	api := &standIn{bodies: map[string][]string{}, arrived: make(chan struct{}, 100), hold: 1}
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir := t.TempDir()
	cfg := githubRouteConfig(t, dir, srv.URL, "", "context: amiss/verdict, timeout: 2s, settle: 2s")
	t.Setenv("HOOK_SECRET", "kill-test-secret")
	t.Setenv("GH_TOKEN", "gh-token")
	o := serveOptions{config: cfg, root: filepath.Join(dir, "root"), listen: "127.0.0.1:0", workers: 1, lease: 2 * time.Second,
		cleanupEvery: time.Hour, strandedAfter: time.Hour, grace: 200 * time.Millisecond, create: true}
	serve := func() (chan<- struct{}, <-chan error, *syncBuffer, string) {
		ctx, stop := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		out := &syncBuffer{}
		done := make(chan error, 1)
		o.ready = ready
		go func() { done <- runServe(ctx, o, out) }()
		stopc := make(chan struct{})
		go func() { <-stopc; stop() }()
		return stopc, done, out, <-ready
	}
	stop, done, out, addr := serve()
	signedPush(t, addr, 1) // held at the provider: the one worker is busy
	<-api.arrived
	signedPush(t, addr, 2) // waits in the in-process queue
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "the next amiss serve on this root queues them again at start") ||
		!strings.Contains(out.String(), `"cut":true`) {
		t.Fatalf("shutdown message:\n%s", out.String())
	}
	stop, done, out, _ = serve()
	defer func() { close(stop); <-done }()
	// Within the lease the cut work held (2 s): the cut publication gave its lease back, the
	// cut evaluation's lease ends by itself.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if st := rowStates(t, o.root); st[ledger.StateDone] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cut work did not resume at the next start: %v\n%s", rowStates(t, o.root), out.String())
		}
	}
}
