package integration_test

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// The functions as they run in Lambda, for an operator: the cleanup bootstrap empties the
// dead-letter queue of what the ledger explains, every log line carries its invocation's
// request id and the cold-start mark, and a function that cannot start fails every invocation.

// deadLetterSQS serves ReceiveMessage and DeleteMessage over the dead letters it holds (each
// hidden once handed out) and passes every other call to the delivery queue's stand-in.
type deadLetterSQS struct {
	mu         sync.Mutex
	deliveries *fakeSQS
	order      []string
	bodies     map[string]string
	hidden     map[string]bool
}

func (d *deadLetterSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	if target != "AmazonSQS.ReceiveMessage" && target != "AmazonSQS.DeleteMessage" {
		d.deliveries.ServeHTTP(w, r)
		return
	}
	var in map[string]any
	json.NewDecoder(r.Body).Decode(&in)
	d.mu.Lock()
	defer d.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if target == "AmazonSQS.DeleteMessage" {
		id, _ := strings.CutPrefix(in["ReceiptHandle"].(string), "rh-")
		delete(d.bodies, id)
		w.Write([]byte(`{}`))
		return
	}
	var msgs []map[string]string
	for _, id := range d.order {
		if body, ok := d.bodies[id]; ok && !d.hidden[id] {
			d.hidden[id] = true
			sum := md5.Sum([]byte(body))
			msgs = append(msgs, map[string]string{"MessageId": id, "ReceiptHandle": "rh-" + id, "Body": body, "MD5OfBody": hex.EncodeToString(sum[:])})
		}
	}
	json.NewEncoder(w).Encode(map[string]any{"Messages": msgs})
}

func (d *deadLetterSQS) left() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.order {
		if _, ok := d.bodies[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// logLines returns the JSON lines amiss's logger wrote (not the emulator's, not the metrics').
func logLines(t *testing.T, p *lambdaProc) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), `{"time"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line is not JSON: %s", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// The cleanup bootstrap, reading the dead-letter queue AMISS_DEAD_LETTER_QUEUE_URL names:
// the dead letter of a delivery still pending is re-driven onto the delivery queue and removed,
// one of a delivery the ledger never held is removed, one that is not a delivery message stays
// and is counted for the alarm. Every log line of the two runs names its invocation, and only
// the first run's are marked as the cold start.
func TestTheCleanupBootstrapEmptiesTheDeadLetterQueue(t *testing.T) {
	rieBinary(t)
	t.Parallel()
	w := newLambdaWorld(t, "AMISS_LEDGER=file:"+filepath.Join(t.TempDir(), "root"))
	ingress := startLambda(t, "ingress", w.env)
	if out := ingress.invoke(t, webhookEvent(strings.Repeat("cd", 20))); !strings.Contains(string(out), `"statusCode":202`) {
		t.Fatalf("ingress answered %s\n%s", out, ingress.log)
	}
	admitted, err := queue.Parse(w.sqs.messages()[0])
	if err != nil {
		t.Fatal(err)
	}
	forgotten := ledger.NewKey("gh", "github", "gone")
	dlq := &deadLetterSQS{deliveries: w.sqs, order: []string{"d-admitted", "d-forgotten", "d-junk"}, hidden: map[string]bool{},
		bodies: map[string]string{
			"d-admitted":  admitted.Body(),
			"d-forgotten": queue.Message{Key: forgotten, Binding: ledger.Digest(forgotten)}.Body(),
			"d-junk":      "not a delivery message",
		}}
	srv := httptest.NewServer(dlq)
	t.Cleanup(srv.Close)
	env := append(append([]string{}, w.env...), "AWS_ENDPOINT_URL_SQS="+srv.URL, "AMISS_QUEUE_URL="+srv.URL+"/123456789012/deliveries",
		"AMISS_DEAD_LETTER_QUEUE_URL="+srv.URL+"/123456789012/dead-letters")
	cleanup := startLambda(t, "cleanup", env)
	out := cleanup.invoke(t, map[string]any{})
	if !strings.Contains(string(out), `"Redriven":1,"Removed":1,"Unexplained":1,"Complete":true`) {
		t.Fatalf("cleanup answered %s\n%s", out, cleanup.log)
	}
	if got := strings.Join(dlq.left(), ","); got != "d-junk" {
		t.Fatalf("left in the dead-letter queue: %s", got)
	}
	sent := w.sqs.messages()
	if len(sent) != 2 || sent[1] != admitted.Body() {
		t.Fatalf("the delivery queue got %q: want the ingress's message, then its re-drive", sent)
	}

	dlq.mu.Lock()
	dlq.hidden = map[string]bool{}
	dlq.mu.Unlock()
	cleanup.invoke(t, map[string]any{})
	cleanup.kill() // its log is read whole once the process is gone
	if !strings.Contains(cleanup.log.String(), `"dead_letters_unexplained":1`) {
		t.Fatalf("no dead_letters_unexplained metric:\n%s", cleanup.log)
	}
	ids := map[string]bool{}
	warm := 0
	for _, l := range logLines(t, cleanup) {
		id, _ := l["request_id"].(string)
		cold, ok := l["cold_start"].(bool)
		if !ok {
			t.Fatalf("a line without cold_start: %v", l)
		}
		if id == "" {
			// The start-up's lines (before the first invocation) are the cold start's.
			if !cold {
				t.Fatalf("a start-up line not marked cold: %v", l)
			}
			continue
		}
		if !ids[id] && len(ids) == 1 && cold {
			t.Fatalf("the second invocation's line is marked cold: %v", l)
		}
		ids[id] = true
		if !cold {
			warm++
		}
	}
	if len(ids) != 2 || warm == 0 {
		t.Fatalf("request ids %v, %d warm lines:\n%s", ids, warm, cleanup.log)
	}
}

// A function that cannot read its secret at start fails the invocation, and the next one
// starts it again and fails the same way, each time with the line that says why: it never
// takes traffic, and never stops being sent it (docs/deployment.md, "When a function cannot
// start").
func TestAFunctionThatCannotStartFailsEveryInvocation(t *testing.T) {
	rieBinary(t)
	t.Parallel()
	w := newLambdaWorld(t, "AMISS_LEDGER=file:"+filepath.Join(t.TempDir(), "root"), "AMISS_IT_HOOK=")
	ingress := startLambda(t, "ingress", w.env)
	const invocations = 3
	for i := range invocations {
		body, _ := json.Marshal(webhookEvent(strings.Repeat("ef", 20)))
		resp, err := http.Post("http://"+ingress.addr+"/2015-03-31/functions/function/invocations", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 || strings.Contains(string(out), "statusCode") {
			t.Fatalf("invocation %d of an ingress that cannot start answered %d %s\n%s", i, resp.StatusCode, out, ingress.log)
		}
	}
	ingress.kill() // its log is read whole once the process is gone
	if n := strings.Count(ingress.log.String(), `"msg":"cannot start: secrets"`); n != invocations {
		t.Fatalf("%d cannot-start lines for %d invocations: the start is not tried again at each one\n%s", n, invocations, ingress.log)
	}
	if !strings.Contains(ingress.log.String(), "routes.gh.secrets[0].from: route gh: webhook secret k from env:AMISS_IT_HOOK cannot be read") {
		t.Fatalf("the line does not say which secret:\n%s", ingress.log)
	}
	if len(w.sqs.messages()) != 0 {
		t.Fatal("an ingress that cannot start queued a delivery")
	}
}
