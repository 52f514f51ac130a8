package ingress

import (
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// ServeHTTP serves the ingress over plain HTTP, as amiss serve does, with the answers Handle
// gives under API Gateway. The request becomes the one API Gateway's HTTP API would pass: the
// route from the pattern's {route} (mount the handler at "POST /hooks/{route}") or else from
// the path /hooks/{route}, each header named in lower case with repeated values joined by
// commas, and the body as it came. The body is read up to one byte past the controller's
// max_body_bytes, never further, so an oversized one is answered 413 without being read whole.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(h.Config.Controller.MaxBodyBytes)+1))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: r.URL.Path, PathParameters: map[string]string{"route": r.PathValue("route")},
		Headers: map[string]string{}, Body: string(body)}
	req.RequestContext.HTTP.Method = r.Method
	for k, vs := range r.Header {
		req.Headers[strings.ToLower(k)] = strings.Join(vs, ",") // as API Gateway joins them
	}
	resp, _ := h.Handle(r.Context(), req)
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	io.WriteString(w, resp.Body)
}
