package ingress

import (
	"bytes"
	"mime"
	"net/http"
)

// formAdvice is added to the answer to a malformed webhook whose body is form-encoded: GitHub's
// and Gitea's webhook settings offer application/x-www-form-urlencoded (GitHub's default),
// which wraps the JSON payload as payload=..., and amiss reads JSON bodies only.
const formAdvice = "the body is form-encoded (application/x-www-form-urlencoded), and amiss reads JSON: " +
	"in the webhook's settings at the provider, set the content type to application/json"

// malformedMessage is the message of a 400 answer for err: the error, and when the request is
// form-encoded, what to change at the provider.
func malformedMessage(header http.Header, body []byte, err error) string {
	if formEncoded(header, body) {
		return err.Error() + "; " + formAdvice
	}
	return err.Error()
}

// formEncoded reports whether the request declares a form-encoded body, or has the shape of
// one (payload=...) without saying so.
func formEncoded(header http.Header, body []byte) bool {
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err == nil && mt == "application/x-www-form-urlencoded" {
		return true
	}
	return bytes.HasPrefix(body, []byte("payload="))
}
