// Package webhook verifies provider webhook signatures and says what each one proves: the
// replay identity, and the issue time when the signature covers one.
//
// A scheme never decides freshness: it returns the signed time, and the ledger decides, inside
// Admit, against its own effective now. Every comparison of a secret or a MAC is constant-time,
// and every scheme accepts several active secrets (for rotation).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Scheme names, as recorded in the ledger's binding (a key is a digest of route, scheme and
// identity, so these strings must never change).
const (
	SchemeGitHub           = "github-sha256"
	SchemeGitea            = "gitea-sha256"
	SchemeForgejo          = "forgejo-sha256"
	SchemeBitbucket        = "bitbucket-sha256"
	SchemeGitLabToken      = "gitlab-token"
	SchemeGitLabSigning    = "gitlab-signing"
	SchemeStandardWebhooks = "standard-webhooks"
)

var (
	// ErrUnauthenticated: the signature is missing, malformed, or made with no active secret.
	// The ingress answers 401.
	ErrUnauthenticated = errors.New("webhook: not authenticated")
	// ErrMalformed: the request cannot be judged (a signature header given twice, an empty
	// body where one is signed). The ingress answers 400.
	ErrMalformed = errors.New("webhook: malformed request")
	// ErrNoSecret: the route has no secret configured for its scheme: a configuration error.
	ErrNoSecret = errors.New("webhook: no secret configured")
)

// Limits on what a scheme reads from a request.
const (
	maxSignatureHeader = 8 << 10
	maxIdentity        = 256
)

// Request is what a scheme judges: the request's headers (any case; http.Header folds them)
// and its raw body.
type Request struct {
	Header http.Header
	Body   []byte
}

// Secret is one active secret of a route. Value is what the provider was given (for Standard
// Webhooks and GitLab signing tokens, the "whsec_..." string).
type Secret struct {
	// ID names the secret in logs (never its value).
	ID    string
	Value string
}

// Proof is what a verified signature proves.
type Proof struct {
	Scheme string
	// Identity is the replay identity: the signed webhook id, or the digest of the body when
	// the signature proves no id.
	Identity string
	// SignedAt is the issue time the signature covers (a signed header); zero when it covers
	// none.
	SignedAt time.Time
	// BodyAt is a time the provider itself set inside the signed body, at or after the event,
	// that no sender chooses (see bodytime.go and docs/providers), and BodyTimeField the field
	// it was read from; zero when the body carries none amiss trusts. It is read from the body
	// alone, never from a header the signature does not cover. With neither SignedAt nor
	// BodyAt the delivery's replay marker is permanent.
	BodyAt        time.Time
	BodyTimeField string
	// SecretID names the secret that matched.
	SecretID string
	// DeliveryID is a delivery-id header the signature does not cover: for logs, never for
	// identity.
	DeliveryID string
}

// Verifier verifies one scheme.
type Verifier interface {
	// Scheme returns the scheme's name.
	Scheme() string
	// Verify checks the request against the secrets and returns what it proves.
	Verify(r Request, secrets []Secret) (Proof, error)
}

// New returns the verifier of a scheme by name.
func New(scheme string) (Verifier, error) {
	switch scheme {
	case SchemeGitHub:
		return github{}, nil
	case SchemeGitea:
		return giteaFamily{scheme: SchemeGitea, header: "X-Gitea-Signature", delivery: "X-Gitea-Delivery"}, nil
	case SchemeForgejo:
		return giteaFamily{scheme: SchemeForgejo, header: "X-Forgejo-Signature", delivery: "X-Forgejo-Delivery"}, nil
	case SchemeBitbucket:
		return bitbucket{}, nil
	case SchemeGitLabToken:
		return gitlabToken{}, nil
	case SchemeGitLabSigning:
		return standard{scheme: SchemeGitLabSigning, delivery: "X-Gitlab-Event-UUID"}, nil
	case SchemeStandardWebhooks:
		return standard{scheme: SchemeStandardWebhooks}, nil
	}
	return nil, fmt.Errorf("webhook: unknown scheme %q", scheme)
}

// Schemes lists every scheme name.
var Schemes = []string{SchemeGitHub, SchemeGitea, SchemeForgejo, SchemeBitbucket, SchemeGitLabToken,
	SchemeGitLabSigning, SchemeStandardWebhooks}

// single returns the one value of a header: absent is ErrUnauthenticated, given twice (or as
// a comma-joined list) ErrMalformed, over the bound ErrMalformed.
func single(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0 || (len(vs) == 1 && strings.TrimSpace(vs[0]) == ""):
		return "", fmt.Errorf("%w: %s header missing", ErrUnauthenticated, name)
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %s header given %d times", ErrMalformed, name, len(vs))
	case len(vs[0]) > maxSignatureHeader:
		return "", fmt.Errorf("%w: %s header over %d bytes", ErrMalformed, name, maxSignatureHeader)
	}
	return strings.TrimSpace(vs[0]), nil
}

// signatureHeader is single for a header whose value never holds a comma (a hex MAC, a
// timestamp): a comma there is the header given twice and joined, as API Gateway joins
// repeated headers, so it is ErrMalformed rather than a signature that does not match.
func signatureHeader(h http.Header, name string) (string, error) {
	v, err := single(h, name)
	if err == nil && strings.Contains(v, ",") {
		return "", fmt.Errorf("%w: %s header given more than once (joined with a comma)", ErrMalformed, name)
	}
	return v, err
}

// optional returns a header's first value, cut to a loggable length.
func optional(h http.Header, name string) string {
	v := h.Get(name)
	if len(v) > maxIdentity {
		v = v[:maxIdentity]
	}
	return v
}

func macSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// bodyIdentity is the replay identity of a scheme whose signature covers only the body.
func bodyIdentity(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// verifyHexMAC checks a hex HMAC-SHA256 of the body against every secret, in constant time
// for each. Upper- and lower-case hex are the same MAC and both accepted.
func verifyHexMAC(scheme, header, sig string, body []byte, secrets []Secret) (string, error) {
	if len(secrets) == 0 {
		return "", fmt.Errorf("%w for %s", ErrNoSecret, scheme)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return "", fmt.Errorf("%w: %s is not a hex SHA-256 MAC", ErrUnauthenticated, header)
	}
	matched := ""
	for _, s := range secrets {
		// Every secret is tried, so the time taken does not tell which one matched.
		if hmac.Equal(got, macSHA256([]byte(s.Value), body)) && matched == "" {
			matched = s.ID
		}
	}
	if matched == "" {
		return "", fmt.Errorf("%w: %s does not match any active secret", ErrUnauthenticated, header)
	}
	return matched, nil
}
