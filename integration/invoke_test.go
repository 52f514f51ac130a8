package integration_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// The README's local Lambda loop, run as a user runs it: make invoke-ingress, then make
// invoke-runner, then make invoke-cleanup, each function built by its sam build target and
// run under the pinned emulator with events/env.json. The ingress admits the sample
// webhook; the runner, fed the message the ingress queued for the key it answered, prints a
// verdict; cleanup finishes a lap. Only the state folder and the stand-ins' loopback ports
// differ from the defaults, so that runs of the suite do not collide.
func TestInvokeLoopUnderTheEmulator(t *testing.T) {
	rieBinary(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed")
	}
	state := filepath.Join(t.TempDir(), "invoke")
	sqs, secrets := "http://"+freePort(t), "http://"+freePort(t)
	flags := "-set AMISS_SQS_ENDPOINT=" + sqs + " -set AMISS_SECRETS_ENDPOINT=" + secrets +
		" -set AMISS_QUEUE_URL=" + sqs + "/000000000000/amiss-deliveries"
	mk := func(target string) string {
		t.Helper()
		cmd := exec.Command("make", "--no-print-directory", target, "INVOKE_STATE="+state, "INVOKE_FLAGS="+flags)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "AMISS_DEMO_SECRET=") // the loop must not lean on the local demo's secret
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
		return string(out)
	}

	out := mk("invoke-ingress")
	// The bootstrap sam build makes names its build in its first line: the Makefile's stamp.
	if want := `"msg":"starting","function":"ingress","version":"` + git(t, "describe", "--always", "--dirty") +
		`","commit":"` + git(t, "rev-parse", "HEAD") + `"`; !strings.Contains(out, want) {
		t.Fatalf("the ingress's start-up line does not name the build (%s):\n%s", want, out)
	}
	answer, err := os.ReadFile(filepath.Join(state, "ingress-answer.json"))
	if err != nil {
		t.Fatalf("no answer kept: %v\n%s", err, out)
	}
	var resp events.APIGatewayV2HTTPResponse
	json.Unmarshal(answer, &resp)
	var body struct{ Outcome, Key string }
	json.Unmarshal([]byte(resp.Body), &body)
	if resp.StatusCode != 202 || body.Outcome != "admitted" || len(body.Key) != 64 {
		t.Fatalf("the ingress answered %s\n%s", answer, out)
	}
	if !strings.Contains(out, "next: make invoke-runner") {
		t.Fatalf("no next step printed:\n%s", out)
	}

	out = mk("invoke-runner")
	var ev events.SQSEvent
	data, err := os.ReadFile(filepath.Join(state, "runner-sqs.json"))
	if err != nil || json.Unmarshal(data, &ev) != nil || len(ev.Records) != 1 || !strings.Contains(ev.Records[0].Body, body.Key) {
		t.Fatalf("the runner's event is not made from the key the ingress answered (%s): %s %v", body.Key, data, err)
	}
	if !strings.Contains(out, `"msg":"verdict"`) || !strings.Contains(out, `"state":"success"`) ||
		!strings.Contains(out, `"msg":"published","function":"runner","key":"`+body.Key+`"`) {
		t.Fatalf("no verdict in the runner's log:\n%s", out)
	}
	if strings.Contains(out, "local-sample-webhook-secret") {
		t.Fatal("a secret value reached the log")
	}

	out = mk("invoke-cleanup")
	if !strings.Contains(out, `"LapDone":true`) {
		t.Fatalf("cleanup:\n%s", out)
	}
	// A second ingress of the same sample is a duplicate, and the loop says how to start over.
	out = mk("invoke-ingress")
	if !strings.Contains(out, `\"outcome\":\"duplicate\"`) || !strings.Contains(out, "make invoke-clean") {
		t.Fatalf("second invoke:\n%s", out)
	}
}

// git runs git in the repository and returns its output's one line.
func git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
