package github

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// MinKeyBits is the smallest RSA key New accepts. GitHub generates 2048-bit keys.
const MinKeyBits = 2048

// ParsePrivateKey reads an App's private key: PEM holding PKCS#1 ("RSA PRIVATE KEY", as GitHub
// downloads it) or PKCS#8 ("PRIVATE KEY") RSA. A PEM whose line breaks were flattened into
// the two characters \n (as an environment variable often holds it) is read too. The error
// says what the text is instead, and never holds any of it.
func ParsePrivateKey(data []byte) (*rsa.PrivateKey, error) {
	data = bytes.TrimSpace(data)
	if !bytes.Contains(data, []byte("\n")) && bytes.Contains(data, []byte(`\n`)) {
		data = bytes.ReplaceAll(data, []byte(`\n`), []byte("\n"))
	}
	block, _ := pem.Decode(data)
	if block == nil {
		if len(data) == 0 {
			return nil, errors.New("the private key is empty")
		}
		return nil, errors.New("the private key is not PEM: want the .pem file GitHub downloads " +
			"(-----BEGIN RSA PRIVATE KEY----- ... -----END RSA PRIVATE KEY-----), whole")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		if len(block.Headers) > 0 {
			return nil, errors.New("the private key is encrypted (its PEM has headers): GitHub's download is not; decrypt it with openssl rsa")
		}
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("the private key is encrypted: GitHub's download is not; decrypt it with openssl pkcs8")
	case "EC PRIVATE KEY", "OPENSSH PRIVATE KEY":
		return nil, fmt.Errorf("the private key is a %s, not RSA: a GitHub App's key is RSA (generate one in the App's settings)", block.Type)
	case "PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE":
		return nil, fmt.Errorf("the PEM holds a %s, not the App's private key", block.Type)
	default:
		return nil, fmt.Errorf("the PEM holds a %q block, not an RSA private key", block.Type)
	}
	if err != nil {
		// x509's message describes the DER's structure, never its bytes.
		return nil, fmt.Errorf("the %s block does not parse: %v", block.Type, err)
	}
	rsaKey, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the private key is a %T, not RSA: a GitHub App's key is RSA", key)
	}
	if n := rsaKey.N.BitLen(); n < MinKeyBits {
		return nil, fmt.Errorf("the private key has %d bits; a GitHub App's key has at least %d", n, MinKeyBits)
	}
	return rsaKey, nil
}
