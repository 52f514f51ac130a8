package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// standard verifies Standard Webhooks (and GitLab's signing token, which follows it):
// webhook-id, webhook-timestamp (Unix seconds) and webhook-signature, a space-separated list of
// "v1,<base64 HMAC-SHA256>" over "id.timestamp.body", keyed with the base64 secret after its
// "whsec_" prefix. The signature proves the id and the issue time: the identity is the id, and
// the replay marker ends with the signed time plus the controller's ceilings.
type standard struct {
	scheme   string
	delivery string
}

func (s standard) Scheme() string { return s.scheme }

const maxSignatures = 32

func (s standard) Verify(r Request, secrets []Secret) (Proof, error) {
	if len(secrets) == 0 {
		return Proof{}, fmt.Errorf("%w for %s", ErrNoSecret, s.scheme)
	}
	id, err := single(r.Header, "webhook-id")
	if err != nil {
		return Proof{}, err
	}
	if len(id) > maxIdentity {
		return Proof{}, fmt.Errorf("%w: webhook-id over %d bytes", ErrMalformed, maxIdentity)
	}
	ts, err := signatureHeader(r.Header, "webhook-timestamp")
	if err != nil {
		return Proof{}, err
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 || sec > 1<<40 {
		return Proof{}, fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrUnauthenticated, ts)
	}
	header, err := single(r.Header, "webhook-signature")
	if err != nil {
		return Proof{}, err
	}
	sigs, err := ParseSignatures(header)
	if err != nil {
		return Proof{}, err
	}
	keys := make([][]byte, 0, len(secrets))
	for _, sc := range secrets {
		k, err := SecretKey(sc.Value)
		if err != nil {
			return Proof{}, fmt.Errorf("%w: secret %s: %v", ErrNoSecret, sc.ID, err)
		}
		keys = append(keys, k)
	}
	msg := make([]byte, 0, len(id)+len(ts)+len(r.Body)+2)
	msg = append(append(append(append(append(msg, id...), '.'), ts...), '.'), r.Body...)
	matched := ""
	for i, k := range keys {
		want := macSHA256(k, msg)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) && matched == "" {
				matched = secrets[i].ID
			}
		}
	}
	if matched == "" {
		return Proof{}, fmt.Errorf("%w: no webhook-signature matches an active secret", ErrUnauthenticated)
	}
	p := Proof{Scheme: s.scheme, Identity: id, SignedAt: time.Unix(sec, 0).UTC(), SecretID: matched}
	if s.delivery != "" {
		p.DeliveryID = optional(r.Header, s.delivery)
	}
	return p, nil
}

// ParseSignatures reads a webhook-signature header: space-separated "version,base64" entries.
// Entries of other versions (such as v1a, asymmetric) are skipped; a v1 entry that is not a
// base64 SHA-256 MAC, or a header with no v1 entry at all, is ErrUnauthenticated.
func ParseSignatures(header string) ([][]byte, error) {
	fields := strings.Fields(header)
	if len(fields) > maxSignatures {
		return nil, fmt.Errorf("%w: %d signatures, at most %d", ErrMalformed, len(fields), maxSignatures)
	}
	var out [][]byte
	for _, f := range fields {
		if strings.Count(f, ",") > 1 {
			// "v1,a,v1,b": two headers joined with a comma, as API Gateway joins repeats.
			return nil, fmt.Errorf("%w: webhook-signature given more than once (joined with a comma)", ErrMalformed)
		}
		version, sig, ok := strings.Cut(f, ",")
		if !ok {
			return nil, fmt.Errorf("%w: webhook-signature entry %q has no version", ErrUnauthenticated, f)
		}
		if version != "v1" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%w: webhook-signature v1 entry is not a base64 SHA-256 MAC", ErrUnauthenticated)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: webhook-signature holds no v1 signature", ErrUnauthenticated)
	}
	return out, nil
}

// SecretKey decodes a Standard Webhooks secret: "whsec_" and the base64 key (the prefix may be
// left off).
func SecretKey(secret string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("not a whsec_ base64 secret")
	}
	if len(k) < 16 {
		return nil, fmt.Errorf("key of %d bytes, want at least 16", len(k))
	}
	return k, nil
}

// Sign returns the webhook-signature value for id, timestamp and body under secret, as a
// sender computes it (for amiss sign and for tests).
func Sign(secret, id string, at time.Time, body []byte) (string, error) {
	k, err := SecretKey(secret)
	if err != nil {
		return "", err
	}
	msg := fmt.Appendf(nil, "%s.%d.%s", id, at.Unix(), body)
	return "v1," + base64.StdEncoding.EncodeToString(macSHA256(k, msg)), nil
}
