package providerapi_test

import (
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// A client's credential and media type are set over what a request carries, whatever the case
// of its keys, and the caller's request is left as it was (a retry of it starts clean).
func TestAClientsHeaderIsSetOverTheRequestsOwn(t *testing.T) {
	r := providerapi.Request{Method: http.MethodGet, URL: "/x", Header: http.Header{"accept": {"text/plain"}, "If-None-Match": {`"v1"`}}}
	got := r.WithHeader(http.Header{"Accept": {"application/json"}, "PRIVATE-TOKEN": {"secret"}})
	want := http.Header{"Accept": {"application/json"}, "Private-Token": {"secret"}, "If-None-Match": {`"v1"`}}
	if len(got.Header) != len(want) {
		t.Fatalf("header %v, want %v", got.Header, want)
	}
	for k, vs := range want {
		if g := got.Header.Values(k); len(g) != 1 || g[0] != vs[0] {
			t.Errorf("%s: %v, want %v", k, g, vs)
		}
	}
	if len(r.Header) != 2 || r.Header["accept"][0] != "text/plain" {
		t.Errorf("the caller's request changed: %v", r.Header)
	}
}
