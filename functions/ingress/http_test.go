package ingress_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Over plain HTTP the ingress answers as under API Gateway: headers of any case, the route
// from the pattern or the path, an oversized body refused without reading it whole.
func TestServeHTTP(t *testing.T) {
	w := newWorld(t, 100)
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{route}", w.h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	bare := httptest.NewServer(w.h) // mounted without a pattern: the route comes from the path
	defer bare.Close()

	post := func(base, route string, req *http.Request) (int, string) {
		t.Helper()
		req.URL.Scheme, req.URL.Host, req.Host = "http", strings.TrimPrefix(base, "http://"), ""
		req.URL.Path = "/hooks/" + route
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	request := func(body string) *http.Request {
		gw := githubRequest("gh", "push", body)
		req, _ := http.NewRequest(http.MethodPost, "http://x/", strings.NewReader(body))
		for k, v := range gw.Headers {
			req.Header.Set(strings.ToUpper(k), v) // any case
		}
		return req
	}
	if code, body := post(srv.URL, "gh", request(push("octo-org/octo-repo", sha1))); code != http.StatusAccepted ||
		!strings.Contains(body, `"outcome":"admitted"`) {
		t.Fatalf("admitted: %d %s", code, body)
	}
	if code, body := post(bare.URL, "gh", request(push("octo-org/octo-repo", sha1))); code != http.StatusOK ||
		!strings.Contains(body, `"outcome":"pending"`) {
		t.Fatalf("the route from the path: %d %s", code, body)
	}
	if code, _ := post(srv.URL, "nope", request(push("octo-org/octo-repo", sha1))); code != http.StatusNotFound {
		t.Fatalf("unknown route: %d", code)
	}
	huge := strings.Repeat("x", 65536+1)
	if code, _ := post(srv.URL, "gh", request(huge)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d", code)
	}
}
