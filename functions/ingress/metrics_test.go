package ingress_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
)

// A webhook whose signature does not verify (a secret rotated at the provider but not here, or
// the reverse) is counted as unauthenticated and admits nothing: the two counters the
// deployment's alarm on refused webhooks reads ("refused while none is admitted").
func TestABadSignatureIsCountedUnauthenticatedAndAdmitsNothing(t *testing.T) {
	w := newWorld(t, 100)
	m := counts{}
	w.h.Metrics = m
	body := push("octo-org/octo-repo", sha1)
	other := hmac.New(sha256.New, []byte("the provider's new secret"))
	other.Write([]byte(body))
	wrong := githubRequest("gh", "push", body)
	wrong.Headers["x-hub-signature-256"] = "sha256=" + hex.EncodeToString(other.Sum(nil))
	w.do(t, wrong, http.StatusUnauthorized)
	unsigned := githubRequest("gh", "push", body)
	delete(unsigned.Headers, "x-hub-signature-256")
	w.do(t, unsigned, http.StatusUnauthorized)
	if m["unauthenticated"] != 2 || m["admitted"] != 0 {
		t.Fatalf("metrics %v: want two unauthenticated and none admitted", m)
	}
	if st, err := w.l.Stats(context.Background()); err != nil || st.Rows != 0 {
		t.Fatalf("rows %d (%v): a refused webhook admitted something", st.Rows, err)
	}
	w.do(t, githubRequest("gh", "push", body), http.StatusAccepted)
	if m["admitted"] != 1 || m["unauthenticated"] != 2 {
		t.Fatalf("metrics %v: want the signed one admitted", m)
	}
}
