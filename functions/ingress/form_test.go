package ingress_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A GitHub webhook left at the settings page's default content type arrives form-encoded
// (payload=...), correctly signed: the answer says what is wrong and what to choose instead.
func TestAFormEncodedWebhookIsToldToChooseJSON(t *testing.T) {
	w := newWorld(t, 100)
	for _, event := range []string{"push", "pull_request"} {
		body := "payload=" + url.QueryEscape(push("octo-org/octo-repo", sha1))
		req := githubRequest("gh", event, body)
		req.Headers["content-type"] = "application/x-www-form-urlencoded"
		resp := w.do(t, req, http.StatusBadRequest)
		for _, want := range []string{`"outcome":"malformed"`, "form-encoded", "application/json", "content type"} {
			if !strings.Contains(resp.Body, want) {
				t.Errorf("%s: the answer does not say %q: %s", event, want, resp.Body)
			}
		}
	}
	// A JSON body that merely fails to decode keeps the decoder's message, with no advice
	// about content types it does not need.
	resp := w.do(t, githubRequest("gh", "push", `{"not":"a push"`), http.StatusBadRequest)
	if strings.Contains(resp.Body, "form-encoded") {
		t.Errorf("a JSON body was called form-encoded: %s", resp.Body)
	}
}
