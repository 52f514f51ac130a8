// Command invoke runs one amiss Lambda function locally, as sam local invoke would, without
// Docker: the function's bootstrap (built by the Makefile's build target, the packaged
// configuration beside it) runs under the pinned runtime interface emulator on loopback
// ports, with the environment SAM would give it: the variables the template declares for the
// function, overridden by events/env.json ("Parameters" for every function, then the
// function's own section) and by -set. Variables the template does not declare are ignored,
// as SAM ignores them.
//
// When AMISS_SQS_ENDPOINT and AMISS_SECRETS_ENDPOINT are set, a stand-in SQS queue and
// Secrets Manager are served at those addresses for the invoke: the queue records what the
// ingress sends in STATE/queue.jsonl, and the runner's event "queued" is made from the
// message the ingress queued for the key it last answered.
//
//	go run ./internal/invoke -function IngressFunction -bootstrap DIR/bootstrap -event FILE [flags]
//	go run ./internal/invoke -function RunnerFunction ... -event queued
//	go run ./internal/invoke -fakes     (serve the stand-ins until interrupted, for sam local invoke)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/internal/samtemplate"
)

type setFlags map[string]string

func (s setFlags) String() string { return "" }
func (s setFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("-set takes NAME=VALUE, got %q", v)
	}
	s[k] = val
	return nil
}

type options struct {
	template, envFile, secretsFile, state, rie string
	function, bootstrap, event                 string
	fakes                                      bool
	set                                        setFlags
}

func main() {
	o := options{set: setFlags{}}
	flag.StringVar(&o.template, "template", "template.yaml", "the SAM template")
	flag.StringVar(&o.envFile, "env", "events/env.json", "variables, as sam local invoke --env-vars takes them")
	flag.StringVar(&o.secretsFile, "secrets", "events/secrets.json", "the stand-in Secrets Manager's values: {\"ARN\": \"value\"}")
	flag.StringVar(&o.state, "state", "var/invoke", "folder for the stand-in queue and the last answers")
	flag.StringVar(&o.rie, "rie", ".cache/rie/bin/aws-lambda-rie", "the runtime interface emulator (make rie)")
	flag.StringVar(&o.function, "function", "", "the template's function: IngressFunction, RunnerFunction or CleanupFunction")
	flag.StringVar(&o.bootstrap, "bootstrap", "", "the function's bootstrap, with amiss.yaml beside it")
	flag.StringVar(&o.event, "event", "", `the event file, or "queued" (the runner: the message queued for the ingress's last key)`)
	flag.BoolVar(&o.fakes, "fakes", false, "serve the stand-in queue and Secrets Manager at env.json's addresses until interrupted")
	flag.Var(o.set, "set", "NAME=VALUE: override a variable (repeatable)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	tpl, err := samtemplate.Read(o.template)
	if err != nil {
		return err
	}
	fn := o.function
	if o.fakes && fn == "" {
		fn = "IngressFunction"
	}
	f, ok := tpl.Functions[fn]
	if !ok {
		return fmt.Errorf("%s has no function %q (functions: %s)", o.template, fn, strings.Join(tpl.FunctionNames(), ", "))
	}
	env, notes, err := functionEnv(tpl, f, fn, o)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(out, "note:", n)
	}
	if err := os.MkdirAll(o.state, 0o700); err != nil {
		return err
	}
	stop, err := startFakes(env, o)
	if err != nil {
		return err
	}
	defer stop()
	if o.fakes {
		fmt.Fprintf(out, "stand-in SQS at %s, Secrets Manager at %s; Ctrl-C to stop\n", env["AMISS_SQS_ENDPOINT"], env["AMISS_SECRETS_ENDPOINT"])
		<-ctx.Done()
		return nil
	}
	if o.bootstrap == "" || o.event == "" {
		return errors.New("-bootstrap and -event are needed (or -fakes)")
	}
	event, err := eventFor(o)
	if err != nil {
		return err
	}
	answer, err := invoke(ctx, o, f, env, event, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== %s answered\n%s\n", fn, answer)
	return judge(o, fn, answer, out)
}

// functionEnv is the environment SAM would give the function: each declared variable, with
// its value from -set, env.json (the function's section, then "Parameters"), or the template
// (a plain value, or the default of the parameter a !Ref names).
func functionEnv(tpl *samtemplate.Template, f samtemplate.Function, fn string, o options) (map[string]string, []string, error) {
	var file map[string]map[string]string
	data, err := os.ReadFile(o.envFile)
	if err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, nil, fmt.Errorf("%s: %w (want {\"Parameters\": {...}, \"FunctionName\": {...}})", o.envFile, err)
	}
	env := map[string]string{}
	var notes []string
	for name, v := range f.Env {
		switch {
		case !v.Intrinsic:
			env[name] = v.Literal
		case v.Ref != "" && tpl.Parameters[v.Ref].HasDefault:
			env[name] = tpl.Parameters[v.Ref].Default
		}
	}
	for _, section := range []string{"Parameters", fn} {
		for name, v := range file[section] {
			if _, ok := f.Env[name]; !ok {
				notes = append(notes, fmt.Sprintf("%s sets %s, which %s does not declare for %s: SAM ignores it, and so does this run", o.envFile, name, o.template, fn))
				continue
			}
			env[name] = v
		}
	}
	for name, v := range o.set {
		if _, ok := f.Env[name]; !ok {
			notes = append(notes, fmt.Sprintf("-set %s: %s does not declare it for %s; ignored", name, o.template, fn))
			continue
		}
		env[name] = v
	}
	var unset []string
	for name := range f.Env {
		if _, ok := env[name]; !ok {
			unset = append(unset, name)
		}
	}
	sort.Strings(unset)
	for _, name := range unset {
		notes = append(notes, fmt.Sprintf("%s is computed by CloudFormation in AWS and %s gives no value: it stays unset", name, o.envFile))
	}
	sort.Strings(notes)
	return env, notes, nil
}

// startFakes serves the stand-ins the endpoint variables name.
func startFakes(env map[string]string, o options) (func(), error) {
	var servers []*http.Server
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	if ep := env["AMISS_SQS_ENDPOINT"]; ep != "" {
		s, err := serveAt(ep, &sqsFake{file: filepath.Join(o.state, "queue.jsonl")})
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	if ep := env["AMISS_SECRETS_ENDPOINT"]; ep != "" {
		values := map[string]string{}
		data, err := os.ReadFile(o.secretsFile)
		if err == nil {
			err = json.Unmarshal(data, &values)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("the stand-in Secrets Manager's values: %w", err)
		}
		s, err := serveAt(ep, &secretsFake{values: values})
		if err != nil {
			stop()
			return nil, err
		}
		servers = append(servers, s)
	}
	return stop, nil
}

// ingressAnswer is what the ingress answered last (kept in STATE).
const ingressAnswerFile = "ingress-answer.json"

// eventFor reads the event file, or makes the runner's from the queued message.
func eventFor(o options) ([]byte, error) {
	if o.event != "queued" {
		return os.ReadFile(o.event)
	}
	data, err := os.ReadFile(filepath.Join(o.state, ingressAnswerFile))
	if err != nil {
		return nil, fmt.Errorf("no ingress answer in %s: run make invoke-ingress first", o.state)
	}
	key := answerKey(data)
	if key == "" {
		return nil, fmt.Errorf("the ingress's last answer names no key (it admitted nothing): %s", data)
	}
	var msg *queued
	for _, m := range readQueue(filepath.Join(o.state, "queue.jsonl")) {
		var body struct{ Key string }
		if json.Unmarshal([]byte(m.Body), &body) == nil && body.Key == key {
			msg = &m
		}
	}
	if msg == nil {
		return nil, fmt.Errorf("the stand-in queue holds no message for key %s: the ingress did not queue it (its answer: %s)", key, data)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: msg.MessageID, ReceiptHandle: "local-" + msg.MessageID,
		Body: msg.Body, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:amiss-deliveries",
		AWSRegion: "us-east-1", Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
	b, _ := json.MarshalIndent(ev, "", "  ")
	if err := os.WriteFile(filepath.Join(o.state, "runner-sqs.json"), b, 0o600); err != nil {
		return nil, err
	}
	return b, nil
}

// answerKey reads the key from an API Gateway response whose body is the ingress's answer.
func answerKey(data []byte) string {
	var resp events.APIGatewayV2HTTPResponse
	json.Unmarshal(data, &resp)
	var body struct{ Key string }
	json.Unmarshal([]byte(resp.Body), &body)
	return body.Key
}

// invoke runs the bootstrap under the emulator for one event and returns the answer. The
// function's log goes to out as it is written.
func invoke(ctx context.Context, o options, f samtemplate.Function, env map[string]string, event []byte, out io.Writer) ([]byte, error) {
	if _, err := os.Stat(o.rie); err != nil {
		return nil, fmt.Errorf("no runtime interface emulator at %s: make rie installs it", o.rie)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	api, err := freePort()
	if err != nil {
		return nil, err
	}
	boot, err := filepath.Abs(o.bootstrap)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", api, boot)
	cmd.Env = processEnv(env, f, o.function)
	log := &muted{w: out}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(out, "== %s under the emulator (%s)\n", o.function, filepath.Base(o.rie))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		log.mute() // what the function prints as the emulator goes away is noise
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			return nil, errors.New("the emulator never listened")
		}
		time.Sleep(50 * time.Millisecond)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(event))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if o.function == "IngressFunction" {
		os.WriteFile(filepath.Join(o.state, ingressAnswerFile), answer, 0o600)
	}
	return answer, nil
}

// processEnv is the function process's environment: the function's variables, the emulator's
// Lambda settings, and AWS credentials and region (the caller's, or placeholders that the
// stand-ins accept).
func processEnv(env map[string]string, f samtemplate.Function, fn string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		fmt.Sprintf("AWS_LAMBDA_FUNCTION_TIMEOUT=%d", f.Timeout), "AWS_LAMBDA_FUNCTION_NAME=" + fn}
	defaults := map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
	for _, k := range []string{"AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		if v := os.Getenv(k); v != "" {
			out = append(out, k+"="+v)
		} else if d := defaults[k]; d != "" {
			out = append(out, k+"="+d)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// judge says what the answer means, and fails the run when the function failed.
func judge(o options, fn string, answer []byte, out io.Writer) error {
	var failure struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	if json.Unmarshal(answer, &failure) == nil && (failure.ErrorMessage != "" || failure.ErrorType != "") {
		return fmt.Errorf("%s failed: %s %s (its log is above)", fn, failure.ErrorType, failure.ErrorMessage)
	}
	if fn != "IngressFunction" {
		return nil
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(answer, &resp); err != nil || resp.StatusCode == 0 {
		return fmt.Errorf("the ingress's answer is not an HTTP response: %s", answer)
	}
	switch {
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK && strings.Contains(resp.Body, `"pending"`):
		fmt.Fprintln(out, "next: make invoke-runner (the runner gets the message queued for key "+answerKey(answer)+")")
	case resp.StatusCode == http.StatusOK:
		fmt.Fprintf(out, "this delivery was done before; make invoke-clean starts the loop over (it removes %s)\n", o.state)
	default:
		return fmt.Errorf("the ingress answered %d: %s", resp.StatusCode, resp.Body)
	}
	return nil
}

// muted passes writes through until mute is called.
type muted struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
}

func (m *muted) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quiet {
		return len(p), nil
	}
	return m.w.Write(p)
}

func (m *muted) mute() { m.mu.Lock(); m.quiet = true; m.mu.Unlock() }

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
