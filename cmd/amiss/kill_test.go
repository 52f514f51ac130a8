package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/internal/miniotest"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// TestMain lets a test run amiss itself in a child process: the test binary re-executed with
// AMISS_TEST_RUN_MAIN=1 is the amiss command.
func TestMain(m *testing.M) {
	if os.Getenv("AMISS_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	miniotest.Stop() // the MinIO the S3 tests shared, when one was started
	os.Exit(code)
}

// standIn is a commit-status API shaped like GitHub's (POST /repos/{owner}/{repo}/statuses/{sha}
// answers 201 with the status). It records every request it receives as applied, even one
// whose client dies before the answer (as a provider would have applied it), and holds the
// requests it is told to hold until their client goes away.
type standIn struct {
	mu       sync.Mutex
	bodies   map[string][]string // sha -> request bodies
	hold     int                 // hold this many more requests
	held     int
	answered int
	arrived  chan struct{}
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(r.URL.Path, "/")
	if r.Method == http.MethodGet && len(parts) == 7 && parts[4] == "commits" && parts[6] == "status" {
		s.combined(w, parts[5])
		return
	}
	if r.Method != http.MethodPost || len(parts) != 6 || parts[1] != "repos" || parts[4] != "statuses" || r.Header.Get("Authorization") != "Bearer gh-token" {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	sha := parts[5]
	s.mu.Lock()
	s.bodies[sha] = append(s.bodies[sha], string(body))
	hold := s.hold > 0
	if hold {
		s.hold--
		s.held++
	} else {
		s.answered++
	}
	s.mu.Unlock()
	s.arrived <- struct{}{}
	if hold {
		<-r.Context().Done() // held until the client dies
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":1,"state":%q,"context":"amiss/verdict"}`, "success")
}

// combined answers GitHub's combined status of a commit: the last status each context got
// (a request held counts as applied: the provider has it).
func (s *standIn) combined(w http.ResponseWriter, sha string) {
	s.mu.Lock()
	bodies := append([]string(nil), s.bodies[sha]...)
	s.mu.Unlock()
	latest := map[string]json.RawMessage{}
	for _, b := range bodies {
		var st struct {
			Context string `json:"context"`
		}
		if json.Unmarshal([]byte(b), &st) == nil {
			latest[st.Context] = json.RawMessage(b)
		}
	}
	var statuses []json.RawMessage
	for _, b := range latest {
		statuses = append(statuses, b)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"state": "pending", "total_count": len(statuses), "statuses": statuses})
}

// child is amiss serve running in a child process.
type child struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	out  bytes.Buffer
	up   time.Time
}

func startServeProcess(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], append([]string{"serve", "-create"}, args...)...)}
	c.cmd.Env = append(os.Environ(), "AMISS_TEST_RUN_MAIN=1", "HOOK_SECRET=kill-test-secret", "GH_TOKEN=gh-token")
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.out.WriteString(line + "\n")
			c.mu.Unlock()
			var l struct{ Msg, Listen string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "amiss serving" {
				ready <- l.Listen
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			t.Fatalf("amiss serve exited before serving:\n%s", c.output())
		}
		c.addr, c.up = addr, time.Now()
	case <-time.After(30 * time.Second):
		t.Fatalf("amiss serve did not start:\n%s", c.output())
	}
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func signedPush(t *testing.T, addr string, i int) string {
	t.Helper()
	sha := fmt.Sprintf("%040x", 0xabc000+i)
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/app"},"commits":[{"id":%q,"message":"Change %d"}]}`,
		sha, sha, i)
	if code, answer := postSigned(t, addr, "push", body); code != http.StatusAccepted {
		t.Fatalf("webhook %d: %d %s", i, code, answer)
	}
	return sha
}

// githubRouteConfig writes, in dir, the configuration of one GitHub route "gh" (the tests'
// webhook secret and token from HOOK_SECRET and GH_TOKEN, repositories acme/*) publishing to the
// stand-in at baseURL, with the route's extra fields (a line of YAML, or "") and its publish
// settings beyond the provider, base URL and token; it returns the file's path.
func githubRouteConfig(t *testing.T, dir, baseURL, extra, publish string) string {
	t.Helper()
	if extra != "" {
		extra = "    " + extra + "\n"
	}
	cfg := filepath.Join(dir, "amiss.yaml")
	if err := os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: k, from: "env:HOOK_SECRET"}]
    repositories: ["acme/*"]
`+extra+`    publish: {provider: github, base_url: "`+baseURL+`", token: {from: "env:GH_TOKEN"}, `+publish+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// postSigned sends body as a GitHub webhook of the event kind, signed with the tests' secret,
// to the gh route of the server at addr, and answers the HTTP status and body.
func postSigned(t *testing.T, addr, event, body string) (int, string) {
	t.Helper()
	m := hmac.New(sha256.New, []byte("kill-test-secret"))
	m.Write([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/gh", strings.NewReader(body))
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestServeKilledMidBatchRecoversAtRestart kills amiss serve with SIGKILL while it is
// publishing a batch (some verdicts published, some held in flight at the provider, the rest
// still queued in the process that dies), restarts it on the same root, and checks that every
// admitted delivery is published, none twice with different bytes, within a minute of the
// restart. The restarted server's stranded sweep is set an hour away, so only its recovery at
// start can re-drive the rows.
func TestServeKilledMidBatchRecoversAtRestart(t *testing.T) {
	const deliveries, published, held = 12, 3, 2
	lease := 4 * time.Second
	if v := os.Getenv("AMISS_KILL_TEST_LEASE"); v != "" { // for the figure in docs/runner.md: 30s
		lease, _ = time.ParseDuration(v)
	}
	api := &standIn{bodies: map[string][]string{}, arrived: make(chan struct{}, 1000)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir := t.TempDir()
	cfg := githubRouteConfig(t, dir, srv.URL, "", "context: amiss/verdict, timeout: 2s, settle: 2s")
	root := filepath.Join(dir, "root")
	args := []string{"-config", cfg, "-root", root, "-listen", "127.0.0.1:0", "-workers", "2", "-lease", lease.String(),
		"-cleanup-every", "1h", "-stranded-after", "1h", "-grace", "1s"}

	api.mu.Lock()
	api.hold = 0
	api.mu.Unlock()
	first := startServeProcess(t, args...)
	// The first verdicts are published; then the provider holds two requests (one at a time:
	// a request holds its worker, and serve leaves the other worker to the rest), and the rest
	// wait in the in-process queue, evaluated and saved, or not yet.
	var shas []string
	for i := range published {
		shas = append(shas, signedPush(t, first.addr, i))
		<-api.arrived
	}
	api.mu.Lock()
	api.hold = held
	api.mu.Unlock()
	for i := published; i < deliveries; i++ {
		shas = append(shas, signedPush(t, first.addr, i))
	}
	for range held {
		<-api.arrived
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()
	states := rowStates(t, root)
	t.Logf("killed with rows %v", states)
	if states[ledger.StateDone] > published || states[ledger.StateSaved] < held {
		t.Fatalf("the kill did not land mid-batch: %v", states)
	}

	second := startServeProcess(t, args...)
	var took, unleased time.Duration
	for {
		st := rowStates(t, root)
		if unleased == 0 && st[ledger.StateDone] >= deliveries-held {
			unleased = time.Since(second.up)
		}
		if st[ledger.StateDone] == deliveries {
			took = time.Since(second.up)
			break
		}
		if time.Since(second.up) > time.Minute {
			t.Fatalf("not every delivery published within a minute of the restart: %v\n%s", rowStates(t, root), second.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	api.mu.Lock()
	for i, sha := range shas {
		bodies := api.bodies[sha]
		if len(bodies) == 0 {
			t.Errorf("delivery %d never published", i)
		}
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				t.Errorf("delivery %d published with different bytes: %q", i, bodies)
			}
		}
	}
	api.mu.Unlock()
	if !strings.Contains(second.output(), fmt.Sprintf(`"recovered":%d`, deliveries-published)) {
		t.Errorf("the restart did not report recovering %d rows:\n%s", deliveries-published, second.output())
	}
	t.Logf("restart with a %s lease: the %d rows nobody held published %v after the restart, all %d (the %d the dead process "+
		"held wait for its lease) %v after it; %d recovered at start", lease, deliveries-published-held,
		unleased.Round(10*time.Millisecond), deliveries, held, took.Round(10*time.Millisecond), deliveries-published)

	// The key a log line names is the key inspect takes.
	var key string
	for _, line := range strings.Split(second.output(), "\n") {
		var l struct{ Msg, Key string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "published" {
			key = l.Key
			break
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"ledger", "inspect", "-root", root, key}, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), `"state": "done"`) {
		t.Fatalf("inspect of the logged key %q: %v\n%s", key, err, out.String())
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	second.cmd.Wait()
	if !strings.Contains(second.output(), "amiss stopped") {
		t.Fatalf("no clean stop:\n%s", second.output())
	}
}

func rowStates(t *testing.T, root string) map[ledger.State]int64 {
	t.Helper()
	l, err := localfs.Open(context.Background(), root, localfs.Config{Limits: ledger.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.ByState
}
