package integration_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
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
	"github.com/aws/aws-lambda-go/events"
)

// The Lambda bootstraps under the runtime interface emulator: each function is built as it is
// deployed (bootstrap, lambda.norpc) and run by aws-lambda-rie on loopback ports; SQS and the
// provider are fakes on loopback; the ledger is a file root (and, in the S3 variant, MinIO).

func rieBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("AMISS_RIE")
	if p == "" {
		p = filepath.Join(root, ".cache/rie/bin/aws-lambda-rie")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("AMISS_REQUIRE_RIE") == "1" {
			t.Fatalf("the runtime interface emulator is required (AMISS_REQUIRE_RIE=1) but %s is missing: make rie", p)
		}
		t.Skipf("SKIPPED: no runtime interface emulator at %s (make rie installs it; AMISS_REQUIRE_RIE=1 makes this a failure)", p)
	}
	return p
}

var buildOnce sync.Map

// bootstrap builds one function as it is deployed, for this machine's architecture.
func bootstrap(t *testing.T, fn string) string {
	t.Helper()
	if p, ok := buildOnce.Load(fn); ok {
		return p.(string)
	}
	dir := filepath.Join(os.TempDir(), "amiss-bootstraps")
	os.MkdirAll(filepath.Join(dir, fn), 0o755)
	out := filepath.Join(dir, fn, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", out, "./functions/cmd/"+fn)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", fn, err, b)
	}
	buildOnce.Store(fn, out)
	return out
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lambdaProc is one function under the emulator.
type lambdaProc struct {
	cmd  *exec.Cmd
	addr string
	log  *syncBuffer
}

func startLambda(t *testing.T, fn string, env []string) *lambdaProc {
	t.Helper()
	// A port found free may be taken by another process before the emulator binds it (the
	// tests run side by side, and every outgoing connection takes a port): the emulator then
	// panics "address already in use", and it is started again on other ports.
	for attempt := 1; ; attempt++ {
		p, listening := tryLambda(t, fn, env)
		if listening {
			return p
		}
		if attempt < 5 && strings.Contains(p.log.String(), "address already in use") {
			p.kill()
			continue
		}
		t.Fatalf("%s: emulator never listened:\n%s", fn, p.log)
	}
}

// tryLambda starts fn under the emulator on ports found free, and waits until it listens, its
// ports turn out to be taken, or a minute has passed (a machine at load starts it slowly).
func tryLambda(t *testing.T, fn string, env []string) (*lambdaProc, bool) {
	t.Helper()
	addr, api := freePort(t), freePort(t)
	cmd := exec.Command(rieBinary(t), "--runtime-interface-emulator-address", addr, "--runtime-api-address", api, bootstrap(t, fn))
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &lambdaProc{cmd: cmd, addr: addr, log: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return p, true
		}
		if strings.Contains(p.log.String(), "address already in use") {
			return p, false
		}
	}
	return p, false
}

// syncBuffer is a bytes.Buffer the emulator's output is written to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// invoke sends one event; the emulator runs one invoke at a time.
func (p *lambdaProc) invoke(t *testing.T, event any) []byte {
	t.Helper()
	out, err := p.send(event)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, p.log)
	}
	return out
}

func (p *lambdaProc) send(event any) ([]byte, error) {
	body, _ := json.Marshal(event)
	resp, err := http.Post("http://"+p.addr+"/2015-03-31/functions/function/invocations", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// kill ends the emulator and the function process with SIGKILL. The emulator starts the
// function in a process group of its own, so every descendant is found through /proc.
func (p *lambdaProc) kill() {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	for _, pid := range descendants(p.cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.cmd.Wait()
}

// descendants lists the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		var child int
		if _, err := fmt.Sscan(d.Name(), &child); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		var ppid int
		if len(fields) > 1 {
			fmt.Sscan(fields[1], &ppid)
		}
		children[ppid] = append(children[ppid], child)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// fakeSQS speaks the SQS JSON protocol: SendMessage is recorded, ChangeMessageVisibility
// accepted.
type fakeSQS struct {
	mu   sync.Mutex
	sent []string
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	json.NewDecoder(r.Body).Decode(&in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.SendMessage":
		body, _ := in["MessageBody"].(string)
		f.mu.Lock()
		f.sent = append(f.sent, body)
		f.mu.Unlock()
		sum := md5.Sum([]byte(body))
		json.NewEncoder(w).Encode(map[string]string{"MessageId": fmt.Sprintf("m-%d", len(f.sent)), "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	case "AmazonSQS.ChangeMessageVisibility":
		w.Write([]byte(`{}`))
	default:
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"InvalidAction"}`))
	}
}

func (f *fakeSQS) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// provider records commit statuses.
type provider struct {
	mu       sync.Mutex
	statuses []string
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]string
	json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	p.statuses = append(p.statuses, body["state"]+": "+body["description"])
	p.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (p *provider) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.statuses...)
}

// evaluator answers verdicts; while hold is set, requests wait for it to close.
type evaluator struct {
	mu      sync.Mutex
	hold    chan struct{}
	entered chan struct{}
	answer  string
}

func (e *evaluator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	hold, entered, answer := e.hold, e.entered, e.answer
	e.mu.Unlock()
	if hold != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	w.Write([]byte(answer))
}

const (
	hookSecret = "integration-webhook-secret"
	leaseSecs  = 3
)

type lambdaWorld struct {
	env  []string
	sqs  *fakeSQS
	prov *provider
	eval *evaluator
}

// newLambdaWorld writes a configuration and the fakes; ledgerEnv selects the ledger.
func newLambdaWorld(t *testing.T, ledgerEnv ...string) *lambdaWorld {
	t.Helper()
	w := &lambdaWorld{sqs: &fakeSQS{}, prov: &provider{}, eval: &evaluator{answer: `{"state":"success","description":"evaluated"}`}}
	sqsSrv, provSrv, evalSrv := httptest.NewServer(w.sqs), httptest.NewServer(w.prov), httptest.NewServer(w.eval)
	t.Cleanup(sqsSrv.Close)
	t.Cleanup(provSrv.Close)
	t.Cleanup(evalSrv.Close)
	cfg := filepath.Join(t.TempDir(), "amiss.yaml")
	os.WriteFile(cfg, []byte(`
routes:
  gh:
    provider: github
    secrets: [{id: k, from: "env:AMISS_IT_HOOK"}]
    repositories: ["acme/*"]
    evaluator: {url: "`+evalSrv.URL+`", secret: {from: "env:AMISS_IT_EVAL"}, timeout: 1m}
    publish: {provider: github, base_url: "`+provSrv.URL+`", token: {from: "env:AMISS_IT_TOKEN"}, context: amiss/verdict}
`), 0o600)
	w.env = append([]string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_SQS=" + sqsSrv.URL, "AMISS_QUEUE_URL=" + sqsSrv.URL + "/123456789012/deliveries",
		"AMISS_CONFIG=" + cfg, fmt.Sprintf("AMISS_LEASE=%ds", leaseSecs), "AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"AMISS_IT_HOOK=" + hookSecret, "AMISS_IT_EVAL=eval-secret", "AMISS_IT_TOKEN=gh-token"}, ledgerEnv...)
	return w
}

func webhookEvent(sha string) events.APIGatewayV2HTTPRequest {
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/app"},"commits":[{"id":%q,"message":"Fix"}]}`, sha, sha)
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write([]byte(body))
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/gh", PathParameters: map[string]string{"route": "gh"}, Body: body,
		Headers: map[string]string{"x-github-event": "push", "x-hub-signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil))}}
	ev.RequestContext.HTTP.Method = "POST"
	return ev
}

func sqsEvent(body string) events.SQSEvent {
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", ReceiptHandle: "rh-1", Body: body, EventSource: "aws:sqs"}}}
}

// runScenario: a webhook through the ingress, the runner killed mid-evaluation, the runner
// invoked again once the lease has ended: exactly one verdict reaches the provider.
func runScenario(t *testing.T, w *lambdaWorld) {
	ingress := startLambda(t, "ingress", w.env)
	out := ingress.invoke(t, webhookEvent(strings.Repeat("ab", 20)))
	if !strings.Contains(string(out), `"statusCode":202`) {
		t.Fatalf("ingress answered %s\n%s", out, ingress.log)
	}
	msgs := w.sqs.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages queued", len(msgs))
	}

	// The runner hangs in its evaluation, and is killed there.
	w.eval.mu.Lock()
	w.eval.hold, w.eval.entered = make(chan struct{}), make(chan struct{}, 1)
	w.eval.mu.Unlock()
	doomed := startLambda(t, "runner", w.env)
	go doomed.send(sqsEvent(msgs[0])) // fails when the process is killed
	select {
	case <-w.eval.entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("the runner never reached its evaluation:\n%s", doomed.log)
	}
	doomed.kill()
	w.eval.mu.Lock()
	close(w.eval.hold)
	w.eval.hold = nil
	w.eval.mu.Unlock()
	if n := len(w.prov.all()); n != 0 {
		t.Fatalf("the killed runner published %d statuses", n)
	}

	// Once the lease has ended, the message comes back to a new runner.
	time.Sleep((leaseSecs + 1) * time.Second)
	runner := startLambda(t, "runner", w.env)
	out = runner.invoke(t, sqsEvent(msgs[0]))
	if strings.Contains(string(out), "m-1") {
		t.Fatalf("the runner asked for the message again: %s\n%s\nthe killed runner:\n%s", out, runner.log, doomed.log)
	}
	out = runner.invoke(t, sqsEvent(msgs[0])) // a redelivery: duplicate, nothing new
	got := w.prov.all()
	if len(got) != 1 || got[0] != "success: evaluated" {
		t.Fatalf("statuses %q: want exactly one verdict\n%s", got, runner.log)
	}

	cleanup := startLambda(t, "cleanup", w.env)
	out = cleanup.invoke(t, map[string]any{})
	if !strings.Contains(string(out), `"LapDone":true`) {
		t.Fatalf("cleanup answered %s\n%s", out, cleanup.log)
	}
}

func TestLambdasUnderTheEmulatorOnAFileLedger(t *testing.T) {
	rieBinary(t)
	t.Parallel()
	w := newLambdaWorld(t, "AMISS_LEDGER=file:"+filepath.Join(t.TempDir(), "root"))
	runScenario(t, w)
}

func TestLambdasUnderTheEmulatorOnMinIO(t *testing.T) {
	rieBinary(t)
	s := miniotest.Require(t)
	t.Parallel()
	w := newLambdaWorld(t, "AMISS_LEDGER=s3://"+miniotest.Bucket+fmt.Sprintf("/rie-%d/", time.Now().UnixNano()),
		"AMISS_S3_ENDPOINT="+s.Endpoint)
	// The S3 client takes its credentials from the default chain: MinIO's here.
	w.env = append(w.env, "AWS_ACCESS_KEY_ID="+miniotest.User, "AWS_SECRET_ACCESS_KEY="+miniotest.Secret)
	runScenario(t, w)
}

func TestMain(m *testing.M) {
	code := m.Run()
	miniotest.Stop()
	os.Exit(code)
}
