package github_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
)

// The key is read as GitHub downloads it (PKCS#1), as PKCS#8, and from a variable whose line
// breaks were flattened into \n; anything else is refused saying what it is instead, without
// repeating any of it.
func TestThePrivateKeyIsReadOrRefusedByWhatItIs(t *testing.T) {
	key, pkcs1 := appKey()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for name, data := range map[string][]byte{
		"PKCS#1":    pkcs1,
		"PKCS#8":    pkcs8,
		"flattened": []byte(strings.ReplaceAll(strings.TrimSpace(string(pkcs1)), "\n", `\n`)),
	} {
		got, err := github.ParsePrivateKey(data)
		if err != nil || !got.Equal(key) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalECPrivateKey(ec)
	ecPKCS8, _ := x509.MarshalPKCS8PrivateKey(ec)
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	for name, c := range map[string]struct {
		data []byte
		says string
	}{
		"empty":     {nil, "empty"},
		"a token":   {[]byte("ghp_0123456789abcdef"), "not PEM"},
		"EC":        {pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER}), "not RSA"},
		"EC PKCS#8": {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecPKCS8}), "not RSA"},
		"public":    {pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), "PUBLIC KEY, not the App's private key"},
		"encrypted": {pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), "encrypted"},
		"truncated": {[]byte(strings.Replace(string(pkcs1), strings.Split(string(pkcs1), "\n")[3], "", 1)), "does not parse"},
	} {
		_, err := github.ParsePrivateKey(c.data)
		if err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "ghp_") {
			t.Errorf("%s: %v, want it to say %q", name, err, c.says)
		}
	}
	if _, err := github.NewApp(github.AppConfig{PrivateKey: pkcs1}); err == nil || !strings.Contains(err.Error(), "no App id") {
		t.Errorf("no App id: %v", err)
	}
}
