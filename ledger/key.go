package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Key identifies one delivery row: a SHA-256 digest of (route, scheme, replay identity).
// Each part is length-prefixed before hashing, so no choice of strings makes two different
// triples collide by concatenation.
type Key [32]byte

// Digest is a SHA-256 digest, used for bodies, bindings and reports.
type Digest [32]byte

// NewKey derives the delivery key of a replay identity received on a route under a scheme.
func NewKey(route, scheme, identity string) Key {
	return Key(framedDigest("amiss/key/v1", route, scheme, identity))
}

// String returns the key as 64 lower-case hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Short returns the first 12 hex digits, for log lines.
func (k Key) Short() string { return k.String()[:12] }

// IsZero reports whether k is the zero key, which no delivery ever has.
func (k Key) IsZero() bool { return k == Key{} }

// ParseKey parses 64 hex digits as a Key.
func ParseKey(s string) (Key, error) {
	var k Key
	if err := parseHex32(s, k[:]); err != nil {
		return Key{}, fmt.Errorf("ledger: parse key: %w", err)
	}
	return k, nil
}

// String returns the digest as 64 lower-case hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether d is the zero digest.
func (d Digest) IsZero() bool { return d == Digest{} }

// ParseDigest parses 64 hex digits as a Digest.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if err := parseHex32(s, d[:]); err != nil {
		return Digest{}, fmt.Errorf("ledger: parse digest: %w", err)
	}
	return d, nil
}

// MarshalText encodes the key as hex, so keys read well in JSON.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a hex key.
func (k *Key) UnmarshalText(b []byte) error { return parseHex32(string(b), k[:]) }

// MarshalText encodes the digest as hex.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText decodes a hex digest.
func (d *Digest) UnmarshalText(b []byte) error { return parseHex32(string(b), d[:]) }

// SumBody returns the digest of a request body.
func SumBody(body []byte) Digest { return Digest(sha256.Sum256(body)) }

// Binding is what a key is bound to for its whole life: the route, the scheme, the replay
// identity and the digest of the body that was authenticated. The same identity with another
// body is a BindingConflict.
type Binding struct {
	Route      string `json:"route"`
	Scheme     string `json:"scheme"`
	Identity   string `json:"identity"`
	BodyDigest Digest `json:"body_digest"`
}

// Key returns the delivery key of the binding.
func (b Binding) Key() Key { return NewKey(b.Route, b.Scheme, b.Identity) }

// Digest returns the digest the queue message carries and Claim checks.
func (b Binding) Digest() Digest {
	return framedDigest("amiss/binding/v1", b.Route, b.Scheme, b.Identity, string(b.BodyDigest[:]))
}

func framedDigest(domain string, parts ...string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range append([]string{domain}, parts...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func parseHex32(s string, dst []byte) error {
	if len(s) != 64 {
		return fmt.Errorf("want 64 hex digits, got %d characters", len(s))
	}
	if _, err := hex.Decode(dst, []byte(s)); err != nil {
		return err
	}
	return nil
}
