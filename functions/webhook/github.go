package webhook

import (
	"fmt"
	"strings"
)

// github verifies X-Hub-Signature-256: "sha256=" and the hex HMAC-SHA256 of the body. The
// signature covers the body and nothing else, so the identity is the body's digest; the replay
// marker is bounded by the provider-set time the body carries (bodytime.go), or permanent.
// X-GitHub-Delivery is not signed: it is logged, never trusted.
type github struct{}

func (github) Scheme() string { return SchemeGitHub }

func (github) Verify(r Request, secrets []Secret) (Proof, error) {
	return verifyPrefixed(SchemeGitHub, "X-Hub-Signature-256", "X-GitHub-Delivery", r, secrets)
}

// verifyPrefixed checks a "sha256=<hex>" body signature (GitHub, Bitbucket).
func verifyPrefixed(scheme, header, delivery string, r Request, secrets []Secret) (Proof, error) {
	v, err := signatureHeader(r.Header, header)
	if err != nil {
		return Proof{}, err
	}
	algo, sig, ok := strings.Cut(v, "=")
	if !ok || algo != "sha256" {
		return Proof{}, fmt.Errorf("%w: %s must start with sha256=", ErrUnauthenticated, header)
	}
	id, err := verifyHexMAC(scheme, header, sig, r.Body, secrets)
	if err != nil {
		return Proof{}, err
	}
	p := Proof{Scheme: scheme, Identity: bodyIdentity(r.Body), SecretID: id, DeliveryID: optional(r.Header, delivery)}
	p.BodyAt, p.BodyTimeField = bodyTime(scheme, r.Body)
	return p, nil
}
