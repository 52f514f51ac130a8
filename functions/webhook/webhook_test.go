package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
)

// GitHub's documentation example.
const (
	ghSecret  = "It's a Secret to Everybody"
	ghPayload = "Hello, World!"
	ghSig     = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// The Standard Webhooks specification's vector.
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = "1614265330"
	swPayload   = `{"test": 2432232314}`
	swSig       = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func verify(t *testing.T, scheme string, h http.Header, body string, secrets ...webhook.Secret) (webhook.Proof, error) {
	t.Helper()
	v, err := webhook.New(scheme)
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(webhook.Request{Header: h, Body: []byte(body)}, secrets)
}

func sec(v string) webhook.Secret { return webhook.Secret{ID: "current", Value: v} }

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func hexMAC(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

func wantErr(t *testing.T, name string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", name, err, target)
	}
}

func TestGitHubDocumentationVector(t *testing.T) {
	p, err := verify(t, webhook.SchemeGitHub, hdr("X-Hub-Signature-256", ghSig, "X-GitHub-Delivery", "72d3162e"), ghPayload, sec(ghSecret))
	if err != nil {
		t.Fatalf("documented example refused: %v", err)
	}
	sum := sha256.Sum256([]byte(ghPayload))
	if p.Identity != hex.EncodeToString(sum[:]) || !p.SignedAt.IsZero() || p.Scheme != webhook.SchemeGitHub {
		t.Fatalf("proof %+v: want the body digest, no signed time", p)
	}
	if p.DeliveryID != "72d3162e" || p.Identity == p.DeliveryID {
		t.Fatalf("the unsigned delivery id must be logged, never the identity: %+v", p)
	}
}

func TestStandardWebhooksSpecificationVector(t *testing.T) {
	h := hdr("webhook-id", swID, "webhook-timestamp", swTimestamp, "webhook-signature", swSig)
	for _, scheme := range []string{webhook.SchemeStandardWebhooks, webhook.SchemeGitLabSigning} {
		p, err := verify(t, scheme, h, swPayload, sec(swSecret))
		if err != nil {
			t.Fatalf("%s: specification vector refused: %v", scheme, err)
		}
		if p.Identity != swID || !p.SignedAt.Equal(time.Unix(1614265330, 0)) {
			t.Fatalf("%s: proof %+v", scheme, p)
		}
	}
	// Sign reproduces the vector; the whsec_ prefix is optional.
	got, err := webhook.Sign(strings.TrimPrefix(swSecret, "whsec_"), swID, time.Unix(1614265330, 0), []byte(swPayload))
	if err != nil || got != swSig {
		t.Fatalf("sign: %q %v, want %q", got, err, swSig)
	}
	// Several signatures in one header (other versions skipped, rotation).
	multi := "v1a,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + swSig
	if _, err := verify(t, webhook.SchemeStandardWebhooks, hdr("webhook-id", swID, "webhook-timestamp", swTimestamp,
		"webhook-signature", multi), swPayload, sec(swSecret)); err != nil {
		t.Fatalf("several signatures: %v", err)
	}
}

func TestEveryBodySchemeVerifies(t *testing.T) {
	body := `{"ref":"refs/heads/main"}`
	mac := hexMAC("s3cret", body)
	cases := []struct {
		scheme string
		h      http.Header
	}{
		{webhook.SchemeGitHub, hdr("X-Hub-Signature-256", "sha256="+mac)},
		{webhook.SchemeGitea, hdr("X-Gitea-Signature", mac)},
		{webhook.SchemeForgejo, hdr("X-Forgejo-Signature", mac)},
		{webhook.SchemeBitbucket, hdr("X-Hub-Signature", "sha256="+mac, "X-Request-UUID", "u-1")},
		{webhook.SchemeGitLabToken, hdr("X-Gitlab-Token", "s3cret")},
	}
	for _, c := range cases {
		p, err := verify(t, c.scheme, c.h, body, sec("s3cret"))
		if err != nil {
			t.Fatalf("%s: %v", c.scheme, err)
		}
		if p.Identity != webhookBodyIdentity(body) || !p.SignedAt.IsZero() {
			t.Fatalf("%s: proof %+v: body-only schemes are permanent, identified by the body", c.scheme, p)
		}
		// The same MAC under the wrong secret, and the right MAC of another body, are refused.
		if _, err := verify(t, c.scheme, c.h, body, sec("wrong")); !errors.Is(err, webhook.ErrUnauthenticated) {
			t.Fatalf("%s: wrong secret: %v", c.scheme, err)
		}
		if c.scheme != webhook.SchemeGitLabToken {
			if _, err := verify(t, c.scheme, c.h, body+" ", sec("s3cret")); !errors.Is(err, webhook.ErrUnauthenticated) {
				t.Fatalf("%s: altered body: %v", c.scheme, err)
			}
		}
		if _, err := verify(t, c.scheme, http.Header{}, body, sec("s3cret")); !errors.Is(err, webhook.ErrUnauthenticated) {
			t.Fatalf("%s: missing header: %v", c.scheme, err)
		}
		if _, err := verify(t, c.scheme, c.h, body); !errors.Is(err, webhook.ErrNoSecret) {
			t.Fatalf("%s: no secret configured: %v", c.scheme, err)
		}
	}
}

func webhookBodyIdentity(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:])
}

func TestSecretRotation(t *testing.T) {
	body := "payload"
	old, cur := webhook.Secret{ID: "old", Value: "old-secret"}, webhook.Secret{ID: "new", Value: "new-secret"}
	for _, s := range []webhook.Secret{old, cur} {
		p, err := verify(t, webhook.SchemeGitHub, hdr("X-Hub-Signature-256", "sha256="+hexMAC(s.Value, body)), body, old, cur)
		if err != nil || p.SecretID != s.ID {
			t.Fatalf("signed with %s: %+v %v", s.ID, p, err)
		}
	}
	k2 := "whsec_" + strings.Repeat("A", 43) + "="
	sig, _ := webhook.Sign(swSecret, swID, time.Unix(1614265330, 0), []byte(swPayload))
	p, err := verify(t, webhook.SchemeStandardWebhooks, hdr("webhook-id", swID, "webhook-timestamp", swTimestamp, "webhook-signature", sig),
		swPayload, webhook.Secret{ID: "next", Value: k2}, webhook.Secret{ID: "spec", Value: swSecret})
	if err != nil || p.SecretID != "spec" {
		t.Fatalf("rotation on standard webhooks: %+v %v", p, err)
	}
}

func TestNegativeCases(t *testing.T) {
	good := hdr("webhook-id", swID, "webhook-timestamp", swTimestamp, "webhook-signature", swSig)
	with := func(name, value string) http.Header {
		h := good.Clone()
		h.Set(name, value)
		return h
	}
	cases := map[string]struct {
		scheme string
		h      http.Header
		body   string
		want   error
	}{
		"altered id":                {webhook.SchemeStandardWebhooks, with("webhook-id", swID+"x"), swPayload, webhook.ErrUnauthenticated},
		"altered timestamp":         {webhook.SchemeStandardWebhooks, with("webhook-timestamp", "1614265331"), swPayload, webhook.ErrUnauthenticated},
		"altered body":              {webhook.SchemeStandardWebhooks, good, swPayload + " ", webhook.ErrUnauthenticated},
		"timestamp not a number":    {webhook.SchemeStandardWebhooks, with("webhook-timestamp", "1614265330.5"), swPayload, webhook.ErrUnauthenticated},
		"missing id":                {webhook.SchemeStandardWebhooks, hdr("webhook-timestamp", swTimestamp, "webhook-signature", swSig), swPayload, webhook.ErrUnauthenticated},
		"missing timestamp":         {webhook.SchemeStandardWebhooks, hdr("webhook-id", swID, "webhook-signature", swSig), swPayload, webhook.ErrUnauthenticated},
		"missing signature":         {webhook.SchemeStandardWebhooks, hdr("webhook-id", swID, "webhook-timestamp", swTimestamp), swPayload, webhook.ErrUnauthenticated},
		"signature without version": {webhook.SchemeStandardWebhooks, with("webhook-signature", strings.TrimPrefix(swSig, "v1,")), swPayload, webhook.ErrUnauthenticated},
		"only other versions":       {webhook.SchemeStandardWebhooks, with("webhook-signature", strings.Replace(swSig, "v1,", "v2,", 1)), swPayload, webhook.ErrUnauthenticated},
		"signature not base64":      {webhook.SchemeStandardWebhooks, with("webhook-signature", "v1,!!!"), swPayload, webhook.ErrUnauthenticated},
		"duplicated id header": {webhook.SchemeStandardWebhooks, func() http.Header {
			h := good.Clone()
			h.Add("webhook-id", "msg_other")
			return h
		}(), swPayload, webhook.ErrMalformed},
		"duplicated github signature": {webhook.SchemeGitHub, hdr("X-Hub-Signature-256", ghSig, "X-Hub-Signature-256", ghSig), ghPayload, webhook.ErrMalformed},
		// API Gateway (and amiss serve, like it) joins a header given twice with a comma.
		"github signature given twice, joined":     {webhook.SchemeGitHub, hdr("X-Hub-Signature-256", ghSig+","+ghSig), ghPayload, webhook.ErrMalformed},
		"gitea signature given twice, joined":      {webhook.SchemeGitea, hdr("X-Gitea-Signature", hexMAC(ghSecret, ghPayload)+","+hexMAC(ghSecret, ghPayload)), ghPayload, webhook.ErrMalformed},
		"bitbucket signature given twice, joined":  {webhook.SchemeBitbucket, hdr("X-Hub-Signature", ghSig+","+ghSig), ghPayload, webhook.ErrMalformed},
		"standard signature given twice, joined":   {webhook.SchemeStandardWebhooks, with("webhook-signature", swSig+","+swSig), swPayload, webhook.ErrMalformed},
		"standard timestamp given twice, joined":   {webhook.SchemeStandardWebhooks, with("webhook-timestamp", swTimestamp+","+swTimestamp), swPayload, webhook.ErrMalformed},
		"github wrong prefix":                      {webhook.SchemeGitHub, hdr("X-Hub-Signature-256", strings.Replace(ghSig, "sha256=", "sha1=", 1)), ghPayload, webhook.ErrUnauthenticated},
		"github no prefix":                         {webhook.SchemeGitHub, hdr("X-Hub-Signature-256", strings.TrimPrefix(ghSig, "sha256=")), ghPayload, webhook.ErrUnauthenticated},
		"github truncated mac":                     {webhook.SchemeGitHub, hdr("X-Hub-Signature-256", ghSig[:len(ghSig)-2]), ghPayload, webhook.ErrUnauthenticated},
		"github sha1 header only":                  {webhook.SchemeGitHub, hdr("X-Hub-Signature", "sha1=0123"), ghPayload, webhook.ErrUnauthenticated},
		"gitea with a prefix":                      {webhook.SchemeGitea, hdr("X-Gitea-Signature", "sha256="+hexMAC(ghSecret, ghPayload)), ghPayload, webhook.ErrUnauthenticated},
		"forgejo signature under the gitea header": {webhook.SchemeForgejo, hdr("X-Gitea-Signature", hexMAC(ghSecret, ghPayload)), ghPayload, webhook.ErrUnauthenticated},
	}
	for name, c := range cases {
		secret := swSecret
		if c.scheme != webhook.SchemeStandardWebhooks {
			secret = ghSecret
		}
		_, err := verify(t, c.scheme, c.h, c.body, sec(secret))
		wantErr(t, name, err, c.want)
	}
}

// Upper-case hex is the same MAC, and header names are case-insensitive, as API Gateway sends
// them in lower case.
func TestCaseOfHexAndHeaderNames(t *testing.T) {
	upper := "sha256=" + strings.ToUpper(strings.TrimPrefix(ghSig, "sha256="))
	if _, err := verify(t, webhook.SchemeGitHub, hdr("X-Hub-Signature-256", upper), ghPayload, sec(ghSecret)); err != nil {
		t.Fatalf("upper-case hex: %v", err)
	}
	h := http.Header{}
	for _, kv := range [][2]string{{"x-hub-signature-256", ghSig}} {
		h.Add(kv[0], kv[1])
	}
	if _, err := verify(t, webhook.SchemeGitHub, h, ghPayload, sec(ghSecret)); err != nil {
		t.Fatalf("lower-case header name: %v", err)
	}
	h = http.Header{}
	h.Add("WEBHOOK-ID", swID)
	h.Add("Webhook-Timestamp", swTimestamp)
	h.Add("webhook-SIGNATURE", swSig)
	if _, err := verify(t, webhook.SchemeStandardWebhooks, h, swPayload, sec(swSecret)); err != nil {
		t.Fatalf("mixed-case standard headers: %v", err)
	}
}

// A stale or future signed time verifies (the signature is genuine) but is refused by the
// ledger's freshness rule: the scheme reports the time, the ledger decides.
func TestStaleAndFutureTimestampsAreTheLedgersToRefuse(t *testing.T) {
	limits := ledger.DefaultLimits()
	signedAt := time.Unix(1614265330, 0)
	p, err := verify(t, webhook.SchemeStandardWebhooks, hdr("webhook-id", swID, "webhook-timestamp", swTimestamp, "webhook-signature", swSig),
		swPayload, sec(swSecret))
	if err != nil || !p.SignedAt.Equal(signedAt) {
		t.Fatalf("%+v %v", p, err)
	}
	if limits.Fresh(p.SignedAt, 0, signedAt.Add(limits.SignedAgeCeiling+time.Second)) {
		t.Fatal("a stale signature is fresh")
	}
	if limits.Fresh(p.SignedAt, 0, signedAt.Add(-limits.FutureSkew-time.Second)) {
		t.Fatal("a signature from the future is fresh")
	}
	if !limits.Fresh(p.SignedAt, 0, signedAt.Add(time.Minute)) {
		t.Fatal("a fresh signature is stale")
	}
}

func FuzzParseSignatures(f *testing.F) {
	f.Add(swSig)
	f.Add("v1a,abc " + swSig)
	f.Add("v1,")
	f.Add(strings.Repeat("v1,AAAA ", 40))
	f.Fuzz(func(t *testing.T, header string) {
		sigs, err := webhook.ParseSignatures(header)
		if err != nil {
			if !errors.Is(err, webhook.ErrUnauthenticated) && !errors.Is(err, webhook.ErrMalformed) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for _, s := range sigs {
			if len(s) != sha256.Size {
				t.Fatalf("accepted a %d-byte signature", len(s))
			}
		}
	})
}

func FuzzVerify(f *testing.F) {
	f.Add(webhook.SchemeStandardWebhooks, swID, swTimestamp, swSig, swPayload)
	f.Add(webhook.SchemeGitHub, "", "", ghSig, ghPayload)
	f.Fuzz(func(t *testing.T, scheme, id, ts, sig, body string) {
		v, err := webhook.New(scheme)
		if err != nil {
			return
		}
		h := hdr("webhook-id", id, "webhook-timestamp", ts, "webhook-signature", sig, "X-Hub-Signature-256", sig,
			"X-Hub-Signature", sig, "X-Gitea-Signature", sig, "X-Forgejo-Signature", sig, "X-Gitlab-Token", sig)
		p, err := v.Verify(webhook.Request{Header: h, Body: []byte(body)}, []webhook.Secret{sec(swSecret)})
		if err == nil && p.Identity == "" {
			t.Fatalf("accepted with no identity")
		}
		if err != nil && !errors.Is(err, webhook.ErrUnauthenticated) && !errors.Is(err, webhook.ErrMalformed) {
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}
