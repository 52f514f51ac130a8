package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	exampleConfig = "../../examples/amiss.yaml"
	demoSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// server is one amiss serve started by a test.
type server struct {
	addr string
	out  *syncBuffer
	stop context.CancelFunc
	done chan error
}

func startServe(t *testing.T, o serveOptions) *server {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	o.ready = ready
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	if o.workers == 0 {
		o.workers = 1
	}
	o.lease, o.cleanupEvery, o.grace, o.create = 10*time.Second, time.Hour, 5*time.Second, true
	s := &server{out: &syncBuffer{}, stop: stop, done: make(chan error, 1)}
	go func() { s.done <- runServe(ctx, o, s.out) }()
	select {
	case s.addr = <-ready:
	case err := <-s.done:
		t.Fatalf("serve did not start: %v\n%s", err, s.out)
	}
	t.Cleanup(func() { stop(); <-s.done })
	return s
}

// A secret amiss cannot read stops serve at start, naming the route, the field and the
// source, instead of answering 503 to every webhook.
func TestServeStopsAtStartOnASecretItCannotRead(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", "")
	var out syncBuffer
	ready := make(chan string, 1)
	err := runServe(context.Background(), serveOptions{config: exampleConfig, root: filepath.Join(t.TempDir(), "root"),
		listen: "127.0.0.1:0", workers: 1, ready: ready, create: true}, &out)
	if err == nil {
		t.Fatal("serve started without its secret")
	}
	for _, want := range []string{"routes.demo.secrets[0].from", "route demo", "env:AMISS_DEMO_SECRET", "export AMISS_DEMO_SECRET="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if len(ready) != 0 {
		t.Fatal("serve listened before failing")
	}
}

// make demo, then make run, on one root: demo records the configuration's limits.
func TestDemoThenServeOnOneRoot(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	root := filepath.Join(t.TempDir(), "root")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-config", exampleConfig, "-root", root}, &out, io.Discard); err != nil {
		t.Fatalf("demo: %v", err)
	}
	// The demo prints whole keys, as amiss ledger inspect takes them.
	key := ""
	for _, f := range strings.Fields(out.String()) {
		f = strings.Trim(f, ",()")
		if len(f) == 64 && strings.Trim(f, "0123456789abcdef") == "" {
			key = f
		}
	}
	if key == "" {
		t.Fatalf("demo printed no whole key:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"ledger", "inspect", "-root", root, key}, &out, io.Discard); err != nil {
		t.Fatalf("inspect the demo's key: %v", err)
	}
	startServe(t, serveOptions{config: exampleConfig, root: root})
}

// A root made with other limits is refused with the settings named and the remedy.
func TestServeOnARootWithOtherLimits(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	root := filepath.Join(t.TempDir(), "root")
	other := filepath.Join(t.TempDir(), "other.yaml")
	os.WriteFile(other, []byte("controller: {record_cap: 5}\nroutes:\n  demo:\n    provider: standard-webhooks\n    secrets: [{id: a, from: 'env:AMISS_DEMO_SECRET'}]\n    repositories: ['acme/*']\n"), 0o600)
	if err := run(context.Background(), []string{"demo", "-config", other, "-root", root}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	err := runServe(context.Background(), serveOptions{config: exampleConfig, root: root, listen: "127.0.0.1:0", workers: 1}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "controller.record_cap: the root records 5, the configuration asks for 100000") ||
		!strings.Contains(err.Error(), "use another root") || strings.Contains(err.Error(), "{") {
		t.Fatalf("other limits: %v", err)
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"serve", "-h"}, {"sign", "--help"}, {"demo", "-h"}, {"check", "-h"}, {"ledger", "stats", "-h"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Errorf("amiss %s: %v (want usage and exit 0)", strings.Join(args, " "), err)
		}
		if text := out.String() + errOut.String(); !strings.Contains(text, "amiss") || strings.Contains(text, "help requested") {
			t.Errorf("amiss %s printed:\n%s", strings.Join(args, " "), text)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "amiss ") ||
		!strings.Contains(out.String(), "go1.") {
		t.Fatalf("version: %v %q", err, out.String())
	}
	err := run(context.Background(), []string{"serve", "-nosuchflag"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nosuchflag") {
		t.Fatalf("unknown flag: %v", err)
	}
}

// A body sent one byte at a time is cut by the read timeout, not held open.
func TestServeCutsASlowBody(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	s := startServe(t, serveOptions{config: exampleConfig, root: filepath.Join(t.TempDir(), "root"), readTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /hooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	// A guard only: the server must end the exchange; with no timeout it would wait forever.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err = io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server held a stalled body for a minute")
	}
}

// Over real HTTP: a signature header given twice is 400; a validly signed body that is not
// a push is 400, not 204.
func TestServeRefusesMalformedSignedRequests(t *testing.T) {
	t.Setenv("AMISS_GITHUB_SECRET", "gh-secret")
	t.Setenv("AMISS_GITHUB_TOKEN", "gh-token")
	t.Setenv("AMISS_REPOSITORIES", "acme/*")
	s := startServe(t, serveOptions{config: "../../examples/github.yaml", root: filepath.Join(t.TempDir(), "root")})
	post := func(body string, sigs ...string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/hooks/github", strings.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		for _, sig := range sigs {
			req.Header.Add("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	sig := "sha256=" + hexMAC("gh-secret", []byte("{}"))
	if got := post("{}", sig, sig); got != http.StatusBadRequest {
		t.Errorf("signature header twice: %d, want 400", got)
	}
	if got := post("{}", sig); got != http.StatusBadRequest {
		t.Errorf("signed {} push: %d, want 400", got)
	}
	good := fmt.Sprintf(`{"ref":"refs/heads/main","after":"%s","repository":{"full_name":"acme/app"},"commits":[]}`, strings.Repeat("a", 40))
	if got := post(good, "sha256="+hexMAC("gh-secret", []byte(good))); got != http.StatusAccepted {
		t.Errorf("a good push: %d, want 202", got)
	}
}

// The shutdown line gives the grace period as a duration, not in nanoseconds.
func TestServeLogsDurationsAsDurations(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	s := startServe(t, serveOptions{config: exampleConfig, root: filepath.Join(t.TempDir(), "root")})
	s.stop()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
	s.done <- nil // for the cleanup
	if !strings.Contains(s.out.String(), `"grace":"5s"`) {
		t.Fatalf("shutdown log:\n%s", s.out)
	}
}

func TestS3RootWithoutARegion(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	err := run(context.Background(), []string{"ledger", "stats", "-root", "s3://bucket/prefix/"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set AWS_REGION") {
		t.Fatalf("no region: %v", err)
	}
}

// amiss sign -send (what make sign runs) explains a server that is not there.
func TestSignWithNoServer(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	err := runSign([]string{"-config", exampleConfig, "-url", "http://" + addr, "-send"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nothing answers at http://"+addr) || !strings.Contains(err.Error(), "make run") {
		t.Fatalf("no server: %v", err)
	}
}

// make sign sends through amiss sign -send and prints the answer.
func TestSignSends(t *testing.T) {
	t.Setenv("AMISS_DEMO_SECRET", demoSecret)
	s := startServe(t, serveOptions{config: exampleConfig, root: filepath.Join(t.TempDir(), "root")})
	var out bytes.Buffer
	if err := runSign([]string{"-config", exampleConfig, "-url", "http://" + s.addr, "-send", "-title", "feat: x"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "202") || !strings.Contains(out.String(), `"outcome":"admitted"`) {
		t.Fatalf("sign -send printed %q", out.String())
	}
}

// inspect shows the row's change as the JSON it is (not base64), under the key "subject" that
// scripts read; list says so, on stderr, when no row matches, and keeps stdout to one row a line.
func TestInspectShowsTheChangeAndListSaysWhenNothingMatches(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-config", exampleConfig, "-root", root}, &out, io.Discard); err != nil {
		t.Fatalf("demo: %v", err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"ledger", "list", "-root", root}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	key, _, _ := strings.Cut(out.String(), "\t")
	if len(key) != 64 || errOut.Len() != 0 {
		t.Fatalf("list: %q, stderr %q", out.String(), errOut.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"ledger", "inspect", "-root", root, key}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var row struct {
		Change map[string]any `json:"subject"`
	}
	if err := json.Unmarshal(out.Bytes(), &row); err != nil || row.Change["repository"] != "acme/app" || row.Change["event"] != "push" {
		t.Fatalf("inspect's change: %v, %+v\n%s", err, row.Change, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"ledger", "list", "-root", root, "-state", "abandoned"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || errOut.String() != "no abandoned row in "+root+"\n" {
		t.Fatalf("list of no row: stdout %q, stderr %q", out.String(), errOut.String())
	}
}
