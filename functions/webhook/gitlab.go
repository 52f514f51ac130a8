package webhook

import (
	"crypto/subtle"
	"fmt"
)

// gitlabToken verifies GitLab's shared X-Gitlab-Token: the secret itself, sent in the clear.
// It proves only that the sender knows the token, nothing about the body: the identity is the
// body's digest, the replay marker permanent, and a route using it must list the repositories
// it may publish for (a leaked token must not open every repository). GitLab's signing token
// (Standard Webhooks headers) is SchemeGitLabSigning.
type gitlabToken struct{}

func (gitlabToken) Scheme() string { return SchemeGitLabToken }

func (gitlabToken) Verify(r Request, secrets []Secret) (Proof, error) {
	if len(secrets) == 0 {
		return Proof{}, fmt.Errorf("%w for %s", ErrNoSecret, SchemeGitLabToken)
	}
	tok, err := single(r.Header, "X-Gitlab-Token")
	if err != nil {
		return Proof{}, err
	}
	matched := ""
	for _, s := range secrets {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.Value)) == 1 && matched == "" {
			matched = s.ID
		}
	}
	if matched == "" {
		return Proof{}, fmt.Errorf("%w: X-Gitlab-Token does not match any active secret", ErrUnauthenticated)
	}
	return Proof{Scheme: SchemeGitLabToken, Identity: bodyIdentity(r.Body), SecretID: matched,
		DeliveryID: optional(r.Header, "X-Gitlab-Event-UUID")}, nil
}
