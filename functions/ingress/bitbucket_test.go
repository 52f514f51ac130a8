package ingress_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/localfs"
)

const bitbucketConfig = `
routes:
  cloud:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
    publish: {provider: bitbucket, base_url: "https://api.bitbucket.org", token: {from: "env:T"}}
  dc:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
    publish: {provider: bitbucket-datacenter, base_url: "https://bitbucket.example", token: {from: "env:T"}}
  logged:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
`

// bitbucketRequest signs body as Bitbucket does, for route, with the event key.
func bitbucketRequest(route, event, body string) events.APIGatewayV2HTTPRequest {
	m := hmac.New(sha256.New, []byte(ghSecret))
	m.Write([]byte(body))
	req := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/" + route, PathParameters: map[string]string{"route": route},
		Headers: map[string]string{"x-event-key": event, "x-hub-signature": "sha256=" + hex.EncodeToString(m.Sum(nil))}, Body: body}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

// A route that publishes to Bitbucket Cloud takes no webhook of a Bitbucket Data Center server,
// and back: the sender is told which field to set, and nothing is admitted, so no verdict is
// posted to (and no input read from) an API that does not hold the repository. A route that
// publishes to the log takes both.
func TestABitbucketWebhookFromTheOtherAPIIsRefusedNamingTheFix(t *testing.T) {
	cfg, err := config.Parse([]byte(bitbucketConfig))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: cfg.Limits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &ingress.Handler{Config: cfg, Ledger: l, Queue: queue.NewLocal(), Secrets: envSecrets{"GH": ghSecret},
		Log: slog.New(slog.DiscardHandler)}
	cloudPush := fmt.Sprintf(`{"repository":{"full_name":"team/app"},"push":{"changes":[{"new":{"type":"branch","name":"main",`+
		`"target":{"hash":%q}},"old":null,"commits":[],"truncated":false}]}}`, sha1)
	dcPush := fmt.Sprintf(`{"eventKey":"repo:refs_changed","repository":{"slug":"app","project":{"key":"PROJ"}},`+
		`"changes":[{"ref":{"id":"refs/heads/main","type":"BRANCH"},"fromHash":%q,"toHash":%q,"type":"UPDATE"}]}`, strings.Repeat("1", 40), sha1)
	cases := []struct {
		route, event, body string
		status             int
		message            string
	}{
		{"cloud", "repo:push", cloudPush, http.StatusAccepted, ""},
		{"cloud", "repo:refs_changed", dcPush, http.StatusForbidden, "a Bitbucket Data Center server, and the route's publish.provider is bitbucket: set it to bitbucket-datacenter"},
		{"dc", "repo:refs_changed", dcPush, http.StatusAccepted, ""},
		{"dc", "repo:push", cloudPush, http.StatusForbidden, "Bitbucket Cloud, and the route's publish.provider is bitbucket-datacenter: set it to bitbucket"},
		{"logged", "repo:push", cloudPush, http.StatusAccepted, ""},
		{"logged", "repo:refs_changed", dcPush, http.StatusAccepted, ""},
	}
	for _, c := range cases {
		resp, err := h.Handle(context.Background(), bitbucketRequest(c.route, c.event, c.body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Outcome, Message string }
		json.Unmarshal([]byte(resp.Body), &r)
		if resp.StatusCode != c.status || !strings.Contains(r.Message, c.message) {
			t.Errorf("%s %s: %d %s, want %d naming %q", c.route, c.event, resp.StatusCode, resp.Body, c.status, c.message)
		}
	}
}
