package githubtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
)

// GenerateKey returns a new 2048-bit RSA key, and its PEM as GitHub downloads an App's key
// (PKCS#1, "RSA PRIVATE KEY"). Its public half is the fake's Key.
func GenerateKey() (*rsa.PrivateKey, []byte) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}
