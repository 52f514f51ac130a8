package ingress_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

const (
	ghSecret = "gh-secret-value-never-logged"
	swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

const testConfig = `
controller:
  record_cap: %d
  max_body_bytes: 65536
routes:
  gh:
    provider: github
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["octo-org/*"]
  pushonly:
    provider: github
    secrets: [{id: k1, from: "env:GH"}]
    events: [push]
    repositories: ["octo-org/*"]
  std:
    provider: standard-webhooks
    secrets: [{id: k1, from: "env:SW"}]
    repositories: ["acme/app"]
  nosecret:
    provider: github
    secrets: [{id: k1, from: "env:UNSET"}]
    repositories: ["octo-org/*"]
`

type envSecrets map[string]string

func (e envSecrets) Get(ctx context.Context, ref string) (string, error) {
	if v, ok := e[strings.TrimPrefix(ref, "env:")]; ok {
		return v, nil
	}
	return "", errors.New("secret not found")
}

type failingQueue struct{}

func (failingQueue) Send(context.Context, queue.Message) error { return errors.New("queue down") }

type world struct {
	h    *ingress.Handler
	q    *queue.Local
	l    *localfs.Ledger
	logs *bytes.Buffer
}

func newWorld(t *testing.T, recordCap int) *world {
	t.Helper()
	logs := &bytes.Buffer{}
	q := queue.NewLocal()
	h, l := newHandler(t, fmt.Sprintf(testConfig, recordCap), q, slog.New(slog.NewJSONHandler(logs, nil)))
	return &world{q: q, l: l, logs: logs, h: h}
}

// newHandler is an ingress of the configuration's routes over a new FileLedger, handing keys to
// q, its secrets those of the test's senders.
func newHandler(t *testing.T, configuration string, q queue.Queue, log *slog.Logger) (*ingress.Handler, *localfs.Ledger) {
	t.Helper()
	cfg, err := config.Parse([]byte(configuration))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: cfg.Limits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &ingress.Handler{Config: cfg, Ledger: l, Queue: q, Secrets: envSecrets{"GH": ghSecret, "SW": swSecret}, Log: log}, l
}

func githubRequest(route, event, body string) events.APIGatewayV2HTTPRequest {
	m := hmac.New(sha256.New, []byte(ghSecret))
	m.Write([]byte(body))
	req := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/" + route, PathParameters: map[string]string{"route": route},
		Headers: map[string]string{"x-github-event": event, "x-hub-signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil)),
			"x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "content-type": "application/json"},
		Body: body}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

func standardRequest(id string, at time.Time, body string) events.APIGatewayV2HTTPRequest {
	sig, _ := webhook.Sign(swSecret, id, at, []byte(body))
	req := events.APIGatewayV2HTTPRequest{PathParameters: map[string]string{"route": "std"},
		Headers: map[string]string{"webhook-id": id, "webhook-timestamp": fmt.Sprint(at.Unix()), "webhook-signature": sig},
		Body:    body}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

func push(repo, sha string) string {
	return fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":%q},"commits":[{"id":%q,"message":"m","added":["a.go"]}]}`,
		sha, repo, sha)
}

const sha1 = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"

func (w *world) do(t *testing.T, req events.APIGatewayV2HTTPRequest, want int) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := w.h.Handle(context.Background(), req)
	if err != nil {
		t.Fatalf("handler error: %v", err)
	}
	if resp.StatusCode != want {
		t.Fatalf("status %d (%s), want %d", resp.StatusCode, resp.Body, want)
	}
	return resp
}

func TestAdmitQueueRedeliverDuplicate(t *testing.T) {
	w := newWorld(t, 100)
	body := push("octo-org/octo-repo", sha1)
	resp := w.do(t, githubRequest("gh", "push", body), http.StatusAccepted)
	if !strings.Contains(resp.Body, `"outcome":"admitted"`) || w.q.Len() != 1 {
		t.Fatalf("admitted: %s, %d queued", resp.Body, w.q.Len())
	}
	w.q.Receive(context.Background())                         // taken by a runner that died with it
	w.do(t, githubRequest("gh", "push", body), http.StatusOK) // pending: queued again
	if w.q.Len() != 1 {
		t.Fatalf("pending redelivery not queued again: %d", w.q.Len())
	}
	m, _ := w.q.Receive(context.Background())
	c, err := w.l.Claim(context.Background(), m.Key, m.Binding, "runner", time.Minute)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("the queued message does not claim its row: %+v %v", c, err)
	}
	if !strings.Contains(string(c.Lease.Change), `"repository":"octo-org/octo-repo"`) {
		t.Fatalf("change %s", c.Lease.Change)
	}
	s, _ := w.l.Save(context.Background(), *c.Lease, []byte("verdict"))
	w.l.Complete(context.Background(), s)
	resp = w.do(t, githubRequest("gh", "push", body), http.StatusOK)
	if !strings.Contains(resp.Body, "duplicate") {
		t.Fatalf("duplicate: %s", resp.Body)
	}
	// Base64 bodies, as API Gateway sends binary ones.
	req := githubRequest("gh", "push", push("octo-org/other", sha1))
	req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString([]byte(req.Body)), true
	w.do(t, req, http.StatusAccepted)
}

func TestEveryRefusal(t *testing.T) {
	w := newWorld(t, 100)
	now := time.Now()
	body := push("octo-org/octo-repo", sha1)

	w.do(t, githubRequest("nope", "push", body), http.StatusNotFound)
	bad := githubRequest("gh", "push", body)
	bad.Headers["x-hub-signature-256"] = "sha256=" + strings.Repeat("0", 64)
	w.do(t, bad, http.StatusUnauthorized)
	missing := githubRequest("gh", "push", body)
	delete(missing.Headers, "x-hub-signature-256")
	w.do(t, missing, http.StatusUnauthorized)
	b64 := githubRequest("gh", "push", body)
	b64.Body, b64.IsBase64Encoded = "%%%not base64", true
	w.do(t, b64, http.StatusBadRequest)
	get := githubRequest("gh", "push", body)
	get.RequestContext.HTTP.Method = http.MethodGet
	w.do(t, get, http.StatusBadRequest)
	w.do(t, githubRequest("gh", "push", `{"not":"a push"`), http.StatusBadRequest)
	w.do(t, githubRequest("gh", "ping", `{"zen":"Keep it logically awesome."}`), http.StatusNoContent)
	w.do(t, githubRequest("pushonly", "pull_request", `{"action":"opened","number":1,"repository":{"full_name":"octo-org/a"},
		"pull_request":{"title":"t","head":{"sha":"`+sha1+`","ref":"x"},"base":{"ref":"main"}}}`), http.StatusNoContent)
	w.do(t, githubRequest("gh", "push", push("evil/repo", sha1)), http.StatusForbidden)
	w.do(t, githubRequest("gh", "push", push("octo-org/big", sha1)+strings.Repeat(" ", 70_000)), http.StatusRequestEntityTooLarge)
	// Standard Webhooks: stale and future signed times are refused by the ledger.
	sw := fmt.Sprintf(`{"type":"push","data":{"repository":"acme/app","sha":%q}}`, sha1)
	w.do(t, standardRequest("msg_stale", now.Add(-10*time.Minute), sw), http.StatusUnauthorized)
	w.do(t, standardRequest("msg_future", now.Add(10*time.Minute), sw), http.StatusUnauthorized)
	w.do(t, standardRequest("msg_1", now, sw), http.StatusAccepted)
	// A re-signed retry of the same message: pending, queued again.
	w.do(t, standardRequest("msg_1", now.Add(time.Second), sw), http.StatusOK)
	// The same id with another body.
	other := strings.Replace(sw, sha1, strings.Repeat("a", 40), 1)
	w.do(t, standardRequest("msg_1", now, other), http.StatusConflict)
	// Secrets unavailable: 503 with Retry-After, never a 401.
	resp := w.do(t, githubRequest("nosecret", "push", body), http.StatusServiceUnavailable)
	if resp.Headers["Retry-After"] == "" {
		t.Fatal("503 without Retry-After")
	}
}

type counts map[string]int

func (c counts) Count(name string, n int) { c[name] += n }

func TestFullAndQueueFailures(t *testing.T) {
	w := newWorld(t, 1)
	m := counts{}
	w.h.Metrics = m
	defer func() {
		if m["admitted"] != 1 || m["full"] != 1 {
			t.Errorf("metrics %v: want one admitted and one full", m)
		}
	}()
	w.do(t, githubRequest("gh", "push", push("octo-org/a", sha1)), http.StatusAccepted)
	resp := w.do(t, githubRequest("gh", "push", push("octo-org/b", sha1)), http.StatusServiceUnavailable)
	if resp.Headers["Retry-After"] == "" || !strings.Contains(resp.Body, "full") {
		t.Fatalf("full: %+v", resp)
	}
	// A failed send after admission answers 503 and leaves the row pending for re-drive.
	w2 := newWorld(t, 10)
	w2.h.Queue = failingQueue{}
	body := push("octo-org/a", sha1)
	w2.do(t, githubRequest("gh", "push", body), http.StatusServiceUnavailable)
	st, _ := w2.l.Stats(context.Background())
	if st.ByState[ledger.StatePending] != 1 {
		t.Fatalf("row not left pending: %+v", st.ByState)
	}
	w2.h.Queue = w2.q
	w2.do(t, githubRequest("gh", "push", body), http.StatusOK) // the sender's retry queues it
	if w2.q.Len() != 1 {
		t.Fatal("retry after a failed send not queued")
	}
}

// A stale request is told the window it missed; an unknown route's name is logged bounded,
// whatever its length; logs carry the whole key, as amiss ledger inspect takes it.
func TestAnswersAndLogsAnOperatorCanUse(t *testing.T) {
	w := newWorld(t, 100)
	sw := fmt.Sprintf(`{"type":"push","data":{"repository":"acme/app","sha":%q}}`, sha1)
	resp := w.do(t, standardRequest("msg_old", time.Now().Add(-10*time.Minute), sw), http.StatusUnauthorized)
	if !strings.Contains(resp.Body, "at most 5m0s old") || !strings.Contains(resp.Body, "at most 1m0s ahead") {
		t.Fatalf("stale answer does not name the window: %s", resp.Body)
	}
	long := strings.Repeat("x", 500_000)
	w.logs.Reset()
	w.do(t, githubRequest(long, "push", push("octo-org/a", sha1)), http.StatusNotFound)
	if w.logs.Len() > 1000 || !strings.Contains(w.logs.String(), "(500000 bytes)") {
		t.Fatalf("unknown route logged in %d bytes: %.300s", w.logs.Len(), w.logs.String())
	}
	w.logs.Reset()
	resp = w.do(t, githubRequest("gh", "push", push("octo-org/keys", sha1)), http.StatusAccepted)
	var answer struct{ Key string }
	json.Unmarshal([]byte(resp.Body), &answer)
	if len(answer.Key) != 64 || !strings.Contains(w.logs.String(), `"key":"`+answer.Key+`"`) {
		t.Fatalf("the log does not carry the whole key %q:\n%s", answer.Key, w.logs.String())
	}
}

func TestLogsCarryNoSecretsOrBodies(t *testing.T) {
	w := newWorld(t, 100)
	body := push("octo-org/octo-repo", sha1)
	w.do(t, githubRequest("gh", "push", body), http.StatusAccepted)
	w.do(t, standardRequest("msg_log", time.Now(), fmt.Sprintf(`{"type":"push","data":{"repository":"acme/app","sha":%q}}`, sha1)), http.StatusAccepted)
	bad := githubRequest("gh", "push", body)
	bad.Headers["x-hub-signature-256"] = "sha256=" + strings.Repeat("1", 64)
	w.do(t, bad, http.StatusUnauthorized)
	logs := w.logs.String()
	for _, secret := range []string{ghSecret, strings.TrimPrefix(swSecret, "whsec_"), `"after"`, `"commits"`} {
		if strings.Contains(logs, secret) {
			t.Fatalf("logs contain %q:\n%s", secret, logs)
		}
	}
	for _, field := range []string{`"route":"gh"`, `"scheme":"github-sha256"`, `"identity":`, `"outcome":"admitted"`,
		`"delivery_id":"72d3162e-cc78-11e3-81ab-4c9367dc0958"`, `"delivery_id_signed":false`, `"outcome":"unauthenticated"`} {
		if !strings.Contains(logs, field) {
			t.Fatalf("logs lack %s:\n%s", field, logs)
		}
	}
}

func FuzzHandler(f *testing.F) {
	f.Add("gh", "push", push("octo-org/a", sha1), false, "sha256=00")
	f.Add("std", "", `{"type":"push"}`, true, "v1,AAAA")
	f.Add("nope", "ping", "", false, "")
	f.Fuzz(func(t *testing.T, route, event, body string, b64 bool, sig string) {
		if route == "nosecret" {
			return // a route whose secret is missing is the operator's fault: 503 is right there
		}
		w := newWorld(t, 100)
		req := githubRequest(route, event, body)
		if sig != "" {
			req.Headers["x-hub-signature-256"] = sig
			req.Headers["webhook-signature"] = sig
			req.Headers["webhook-id"] = event
			req.Headers["webhook-timestamp"] = fmt.Sprint(time.Now().Unix())
		}
		req.IsBase64Encoded = b64
		resp, err := w.h.Handle(context.Background(), req)
		if err != nil {
			t.Fatalf("handler error: %v", err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("5xx for a client's input: %d %s", resp.StatusCode, resp.Body)
		}
	})
}
