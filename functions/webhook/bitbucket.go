package webhook

// bitbucket verifies X-Hub-Signature as Bitbucket Cloud and Bitbucket Data Center send it:
// "sha256=" and the hex HMAC-SHA256 of the body. The body is all it covers: the replay marker
// is bounded by Data Center's provider-set date in the body, or permanent (see bodytime.go).
// X-Request-UUID (Cloud) and X-Request-Id (Data Center) are not signed.
type bitbucket struct{}

func (bitbucket) Scheme() string { return SchemeBitbucket }

func (bitbucket) Verify(r Request, secrets []Secret) (Proof, error) {
	p, err := verifyPrefixed(SchemeBitbucket, "X-Hub-Signature", "X-Request-UUID", r, secrets)
	if err == nil && p.DeliveryID == "" {
		p.DeliveryID = optional(r.Header, "X-Request-Id")
	}
	return p, err
}
