package webhook

// giteaFamily verifies Gitea's X-Gitea-Signature and Forgejo's X-Forgejo-Signature: the bare
// hex HMAC-SHA256 of the body, with no prefix. Like GitHub's, the signature covers the body and
// nothing else (no time, no delivery id): the replay marker is bounded by a provider-set time
// in the body where one is trusted (only an opened pull request's, see bodytime.go), or
// permanent.
type giteaFamily struct {
	scheme, header, delivery string
}

func (g giteaFamily) Scheme() string { return g.scheme }

func (g giteaFamily) Verify(r Request, secrets []Secret) (Proof, error) {
	sig, err := signatureHeader(r.Header, g.header)
	if err != nil {
		return Proof{}, err
	}
	id, err := verifyHexMAC(g.scheme, g.header, sig, r.Body, secrets)
	if err != nil {
		return Proof{}, err
	}
	p := Proof{Scheme: g.scheme, Identity: bodyIdentity(r.Body), SecretID: id, DeliveryID: optional(r.Header, g.delivery)}
	p.BodyAt, p.BodyTimeField = bodyTime(g.scheme, r.Body)
	return p, nil
}
