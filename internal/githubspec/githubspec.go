// Package githubspec checks requests against GitHub's published OpenAPI description of its REST
// API, for the fake of GitHub that amiss's tests run (providerapi/github/githubtest): a request
// the description refuses (an unknown operation, a missing or misspelled parameter, a body
// whose keys, types, enums, bounds or required fields break the operation's schema) is
// reported, so a fake answers it as GitHub would and records it.
//
// The description is the request side of the operations amiss calls, extracted verbatim from
// github/rest-api-description (descriptions/api.github.com/api.github.com.2022-11-28.json, MIT
// licence): their parameters and request bodies, with every component they reference. It is
// kept in github-rest-subset.json; see README.md beside it for how to extract it again.
package githubspec

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

//go:embed github-rest-subset.json
var description []byte

var load = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(description)
	if err != nil {
		return nil, fmt.Errorf("githubspec: load the description: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("githubspec: the description does not validate: %w", err)
	}
	// Requests are matched by path alone: the fakes listen on 127.0.0.1, under a prefix
	// ("/api/v3" for GitHub Enterprise Server) that Check strips.
	doc.Servers = openapi3.Servers{{URL: "/"}}
	return gorillamux.NewRouter(doc)
})

// Load loads and validates the description once for the process; a fake calls it when it is
// made, so that no request waits for it (Check loads it too, and reports its error).
func Load() error {
	_, err := load()
	return err
}

// Check validates r (whose path is the API's, after prefix) against the operation of the
// description it names: its path, method, path and query parameters, and JSON body. The body
// is read first (before a client that gives up can take it away) and put back. It returns
// the operation's id, and an error naming what the description refuses.
func Check(r *http.Request, prefix string) (operation string, err error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if body, err = io.ReadAll(r.Body); err != nil {
			return "", fmt.Errorf("read the body: %w", err)
		}
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	router, err := load()
	if err != nil {
		return "", err
	}
	req := r.Clone(r.Context())
	path, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		return "", fmt.Errorf("%s is outside the API's prefix %q", r.URL.Path, prefix)
	}
	u := *r.URL
	u.Path, u.RawPath, u.Scheme, u.Host = path, "", "", ""
	req.URL, req.Host = &u, ""
	req.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		return "", fmt.Errorf("%s %s is no operation of GitHub's REST API description: %v", r.Method, path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return route.Operation.OperationID, fmt.Errorf("%s (%s %s) breaks GitHub's REST API description: %v",
			route.Operation.OperationID, r.Method, path, err)
	}
	return route.Operation.OperationID, nil
}
