package ingress_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

const bodyConfig = `
routes:
  gh:
    provider: github
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["acme/*"]
  narrow:
    provider: github
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["acme/*"]
    max_body_age: 1h
  gitea:
    provider: gitea
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["acme/*"]
  bb:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["acme/*"]
`

// The clock of these tests: a little after the fixtures' events.
var bodyEpoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

type bodyWorld struct {
	h     *ingress.Handler
	l     *localfs.Ledger
	q     *queue.Local
	clock *ledger.ManualClock
	cfg   *config.Config
	logs  *bytes.Buffer
}

func newBodyWorld(t *testing.T) *bodyWorld {
	t.Helper()
	cfg, err := config.Parse([]byte(bodyConfig))
	if err != nil {
		t.Fatal(err)
	}
	clock := ledger.NewManualClock(bodyEpoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"),
		localfs.Config{Limits: cfg.Limits(), Clock: clock, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	q := queue.NewLocal()
	logs := &bytes.Buffer{}
	return &bodyWorld{l: l, q: q, clock: clock, cfg: cfg, logs: logs, h: &ingress.Handler{Config: cfg, Ledger: l, Queue: q,
		Secrets: envSecrets{"GH": ghSecret}, Log: slog.New(slog.NewJSONHandler(logs, nil))}}
}

func webhookFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "webhook", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// providerRequest signs body as the route's provider does, with the event header it sends.
func providerRequest(route, event, body string) events.APIGatewayV2HTTPRequest {
	m := hmac.New(sha256.New, []byte(ghSecret))
	m.Write([]byte(body))
	mac := hex.EncodeToString(m.Sum(nil))
	var h map[string]string
	switch route {
	case "gitea":
		h = map[string]string{"x-gitea-event": event, "x-gitea-signature": mac}
	case "bb":
		h = map[string]string{"x-event-key": event, "x-hub-signature": "sha256=" + mac}
	default:
		h = map[string]string{"x-github-event": event, "x-hub-signature-256": "sha256=" + mac}
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/" + route, PathParameters: map[string]string{"route": route}, Headers: h, Body: body}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

// post sends the request and checks the status and outcome; it returns the row's key.
func (w *bodyWorld) post(t *testing.T, req events.APIGatewayV2HTTPRequest, status int, outcome string) ledger.Key {
	t.Helper()
	resp, err := w.h.Handle(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Outcome, Key, Message string }
	json.Unmarshal([]byte(resp.Body), &r)
	if resp.StatusCode != status || r.Outcome != outcome {
		t.Fatalf("status %d %q (%s), want %d %q", resp.StatusCode, r.Outcome, resp.Body, status, outcome)
	}
	if r.Key == "" {
		return ledger.Key{}
	}
	k, err := ledger.ParseKey(r.Key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// finish runs the queued deliveries to done, as the runner would.
func (w *bodyWorld) finish(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for w.q.Len() > 0 {
		m, _ := w.q.Receive(ctx)
		c, err := w.l.Claim(ctx, m.Key, m.Binding, "runner", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome != ledger.Execute {
			continue
		}
		s, err := w.l.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.l.Complete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

// cleanup runs the scheduled cleanup function and returns how many rows it removed.
func (w *bodyWorld) cleanup(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := (&cleanup.Handler{Ledger: w.l, Queue: w.q}).Handle(ctx)
	if err != nil || !sum.LapDone {
		t.Fatalf("cleanup: %+v %v", sum, err)
	}
	return sum.Removed
}

func (w *bodyWorld) gone(t *testing.T, key ledger.Key) bool {
	t.Helper()
	_, err := w.l.Inspect(context.Background(), key)
	if err != nil && !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatal(err)
	}
	return err != nil
}

// A delivery bounded by its body time, through its whole life at the ingress: admitted (202),
// redelivered while pending and after it is done (200, also by the provider's manual
// redelivery days later), refused as Stale once every copy is too old (401), forgotten by the
// cleanup function, and a replay after that is Stale too, never admitted again.
func testBodyTimeLifecycle(t *testing.T, route, event, file string, bodyAt time.Time) {
	w := newBodyWorld(t)
	body := webhookFixture(t, file)
	key := w.post(t, providerRequest(route, event, body), http.StatusAccepted, "admitted")
	row, err := w.l.Inspect(context.Background(), key)
	ceiling := w.cfg.Controller.BodyAgeCeiling
	if err != nil || row.Lifetime() != ledger.LifetimeBody || !row.SignedAt.Equal(bodyAt) || !row.RetainUntil.Equal(bodyAt.Add(ceiling)) {
		t.Fatalf("row %+v %v: want bounded by the body time %v", row, err, bodyAt)
	}
	w.post(t, providerRequest(route, event, body), http.StatusOK, "pending")
	w.finish(t)
	w.post(t, providerRequest(route, event, body), http.StatusOK, "duplicate")
	// GitHub lets an operator redeliver for 3 days: still answered from the row.
	w.clock.Set(bodyEpoch.Add(72 * time.Hour))
	w.post(t, providerRequest(route, event, body), http.StatusOK, "duplicate")
	if w.cleanup(t) != 0 || w.gone(t, key) {
		t.Fatal("cleanup forgot the row inside its retention")
	}
	// Past the window: Stale, from the row's ledger, and cleanup forgets it.
	w.clock.Set(bodyAt.Add(ceiling).Add(time.Second))
	w.post(t, providerRequest(route, event, body), http.StatusUnauthorized, "stale")
	if n := w.cleanup(t); n != 1 || !w.gone(t, key) {
		t.Fatalf("cleanup removed %d, row gone %v", n, w.gone(t, key))
	}
	// A replay of the forgotten body: Stale, and nothing is stored or queued.
	w.post(t, providerRequest(route, event, body), http.StatusUnauthorized, "stale")
	if !w.gone(t, key) || w.q.Len() != 0 {
		t.Fatalf("a replay after retention was admitted (row gone %v, %d queued)", w.gone(t, key), w.q.Len())
	}
}

func TestGitHubPushBoundedByItsBodyTime(t *testing.T) {
	testBodyTimeLifecycle(t, "gh", "push", "github-push.json", time.Date(2026, 7, 1, 11, 58, 0, 0, time.UTC))
}

func TestGitHubPullRequestBoundedByItsBodyTime(t *testing.T) {
	testBodyTimeLifecycle(t, "gh", "pull_request", "github-pull_request-synchronize.json", time.Date(2026, 7, 1, 11, 57, 30, 0, time.UTC))
}

func TestGiteaOpenedPullRequestBoundedByItsBodyTime(t *testing.T) {
	testBodyTimeLifecycle(t, "gitea", "pull_request", "gitea-pull_request-opened.json", time.Date(2026, 7, 1, 11, 50, 0, 0, time.UTC))
}

func TestBitbucketDataCenterBoundedByItsBodyTime(t *testing.T) {
	testBodyTimeLifecycle(t, "bb", "repo:refs_changed", "bitbucket-dc-refs-changed.json", time.Date(2026, 7, 1, 11, 57, 0, 0, time.UTC))
}

// An event kind whose body carries no time amiss trusts keeps a permanent marker: a month
// later it is still answered from its row and cleanup never forgets it.
func TestEventKindsWithoutTrustedTimeStayPermanent(t *testing.T) {
	for _, c := range []struct{ route, event, file string }{
		{"bb", "repo:push", "bitbucket-cloud-push.json"},
		{"bb", "pullrequest:updated", "bitbucket-cloud-pullrequest-updated.json"},
		{"gitea", "push", "gitea-push.json"},
		{"gitea", "pull_request", "gitea-pull_request-synchronized.json"},
	} {
		t.Run(c.file, func(t *testing.T) {
			w := newBodyWorld(t)
			body := webhookFixture(t, c.file)
			key := w.post(t, providerRequest(c.route, c.event, body), http.StatusAccepted, "admitted")
			row, err := w.l.Inspect(context.Background(), key)
			if err != nil || row.Lifetime() != ledger.LifetimePermanent {
				t.Fatalf("row %+v %v: want permanent", row, err)
			}
			w.finish(t)
			w.clock.Set(bodyEpoch.Add(30 * 24 * time.Hour))
			if w.cleanup(t) != 0 || w.gone(t, key) {
				t.Fatal("cleanup forgot a permanent row")
			}
			w.post(t, providerRequest(c.route, c.event, body), http.StatusOK, "duplicate")
		})
	}
}

// Relabelling a captured body does not reopen it: a pull request body (whose top-level before
// and after make it parse as a push too) forgotten after its retention, replayed with
// X-GitHub-Event: push, is Stale by the same body time, not admitted as a new push.
func TestRelabelledReplayAfterRetentionIsStale(t *testing.T) {
	w := newBodyWorld(t)
	body := webhookFixture(t, "github-pull_request-synchronize.json")
	key := w.post(t, providerRequest("gh", "pull_request", body), http.StatusAccepted, "admitted")
	w.finish(t)
	w.clock.Set(bodyEpoch.Add(w.cfg.Controller.BodyAgeCeiling + time.Hour))
	if w.cleanup(t) != 1 || !w.gone(t, key) {
		t.Fatal("row not forgotten after its retention")
	}
	for _, event := range []string{"push", "pull_request"} {
		w.post(t, providerRequest("gh", event, body), http.StatusUnauthorized, "stale")
	}
	if w.q.Len() != 0 {
		t.Fatalf("%d deliveries queued", w.q.Len())
	}
}

// A route narrows the accepted body age: a body within the ceiling but older than the route's
// age is Stale there, with a message naming the field and the window; the log line names the
// body time and never the secret.
func TestRouteNarrowsBodyAgeAndSaysWhy(t *testing.T) {
	w := newBodyWorld(t)
	body := webhookFixture(t, "github-push.json")
	w.clock.Set(bodyEpoch.Add(2 * time.Hour))
	resp, err := w.h.Handle(context.Background(), providerRequest("narrow", "push", body))
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Body, "repository.pushed_at") ||
		!strings.Contains(resp.Body, "at most 1h0m0s old") {
		t.Fatalf("narrow route: %d %s %v", resp.StatusCode, resp.Body, err)
	}
	w.post(t, providerRequest("gh", "push", body), http.StatusAccepted, "admitted")
	logs := w.logs.String()
	if !strings.Contains(logs, `"body_time_field":"repository.pushed_at"`) || !strings.Contains(logs, `"lifetime":"body"`) ||
		strings.Contains(logs, ghSecret) {
		t.Fatalf("logs: %s", logs)
	}
}

// A Data Center push of several branches is bounded by its body time on every branch: each
// branch's row holds the event's time (which orders its verdict among its commit's) and is
// retained until that time has gone stale; then a resend is Stale, cleanup forgets every
// branch's row, and nothing is admitted again.
func TestABitbucketDataCenterPushOfSeveralBranchesIsBoundedOnEveryBranch(t *testing.T) {
	w := newBodyWorld(t)
	bodyAt := time.Date(2026, 7, 1, 11, 57, 0, 0, time.UTC)
	fixture := webhookFixture(t, "bitbucket-dc-refs-changed.json")
	i := strings.LastIndex(fixture, "]")
	body := fixture[:i] + `,{"ref": {"id": "refs/heads/release/1.1", "type": "BRANCH"}, "fromHash": "178864a7d521b6f5e720b386b2c2b0ef8563e0dc",` +
		`"toHash": "ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca", "type": "UPDATE"}` + fixture[i:]
	resp, err := w.h.Handle(context.Background(), providerRequest("bb", "repo:refs_changed", body))
	if err != nil {
		t.Fatal(err)
	}
	var a pushAnswer
	if err := json.Unmarshal([]byte(resp.Body), &a); err != nil || resp.StatusCode != http.StatusAccepted || len(a.Branches) != 2 {
		t.Fatalf("%d %s (%v), want 202 listing two branches", resp.StatusCode, resp.Body, err)
	}
	ceiling := w.cfg.Controller.BodyAgeCeiling
	var keys []ledger.Key
	for _, b := range a.Branches {
		k, err := ledger.ParseKey(b.Key)
		if err != nil {
			t.Fatal(err)
		}
		row, err := w.l.Inspect(context.Background(), k)
		if err != nil || row.Lifetime() != ledger.LifetimeBody || !row.SignedAt.Equal(bodyAt) || !row.EventAt.Equal(bodyAt) ||
			!row.RetainUntil.Equal(bodyAt.Add(ceiling)) {
			t.Fatalf("branch %s's row (%v): lifetime %v, signed at %v, event at %v, retained until %v; want bounded by and ordered at the body time %v",
				b.Ref, err, row.Lifetime(), row.SignedAt, row.EventAt, row.RetainUntil, bodyAt)
		}
		keys = append(keys, k)
	}
	w.finish(t)
	w.clock.Set(bodyAt.Add(ceiling).Add(time.Second))
	w.post(t, providerRequest("bb", "repo:refs_changed", body), http.StatusUnauthorized, "stale")
	if n := w.cleanup(t); n != 2 || !w.gone(t, keys[0]) || !w.gone(t, keys[1]) {
		t.Fatalf("cleanup removed %d, want both branches' rows", n)
	}
	w.post(t, providerRequest("bb", "repo:refs_changed", body), http.StatusUnauthorized, "stale")
	if !w.gone(t, keys[0]) || !w.gone(t, keys[1]) || w.q.Len() != 0 {
		t.Fatalf("a replay after retention was admitted (%d queued)", w.q.Len())
	}
}
