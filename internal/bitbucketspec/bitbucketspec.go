// Package bitbucketspec checks requests against Atlassian's published descriptions of Bitbucket
// Cloud's REST API (2.0) and Bitbucket Data Center's REST API, for the fakes of those APIs that
// amiss's tests run (providerapi/bitbucket/bitbuckettest, providerapi/bitbucketdc/bitbucketdctest):
// a request a description refuses (an unknown operation, a path or query parameter of the wrong
// type, a body whose keys, types, enums, lengths or required fields break the operation's schema)
// is reported, so a fake answers it as Bitbucket would and records it.
//
// Each description is the request side of the operations amiss calls, extracted from Atlassian's
// own: Bitbucket Cloud's Swagger 2.0 (https://api.bitbucket.org/swagger.json, converted to
// OpenAPI 3 when loaded) and Bitbucket Data Center 9.4's OpenAPI 3.0.1. README.md beside them
// says where each was taken from, what was kept and the one change made.
//
// A query parameter the operation does not declare is refused, unless Bitbucket documents it
// elsewhere: Cloud's pagelen, page, fields, q and sort, which its introduction documents for
// every resource (pagination, partial responses, filtering), and the include and exclude its
// commits operation describes in prose. Their values are the fakes' to check.
package bitbucketspec

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

//go:embed bitbucket-cloud-subset.json
var cloudDescription []byte

//go:embed bitbucket-datacenter-subset.json
var dataCenterDescription []byte

// Description is one API's description.
type Description struct {
	name string
	load func() (routers.Router, error)
	// documented lists the query parameters Bitbucket documents outside the operations, for
	// every operation ("") or one (its method and path template).
	documented map[string][]string
}

// The descriptions.
var (
	// Cloud is Bitbucket Cloud's REST API 2.0; its paths follow /2.0.
	Cloud = &Description{name: "Bitbucket Cloud's REST API description", load: sync.OnceValues(func() (routers.Router, error) {
		var doc2 openapi2.T
		if err := json.Unmarshal(cloudDescription, &doc2); err != nil {
			return nil, fmt.Errorf("bitbucketspec: read Bitbucket Cloud's description: %w", err)
		}
		doc, err := openapi2conv.ToV3(&doc2)
		if err != nil {
			return nil, fmt.Errorf("bitbucketspec: convert Bitbucket Cloud's description: %w", err)
		}
		return router(doc, "Bitbucket Cloud's")
	}), documented: map[string][]string{
		"": {"pagelen", "page", "fields", "q", "sort"},
		"GET /repositories/{workspace}/{repo_slug}/commits/{revision}": {"include", "exclude"},
	}}
	// DataCenter is Bitbucket Data Center's REST API; its paths follow the server's /rest.
	DataCenter = &Description{name: "Bitbucket Data Center's REST API description", load: sync.OnceValues(func() (routers.Router, error) {
		doc, err := openapi3.NewLoader().LoadFromData(dataCenterDescription)
		if err != nil {
			return nil, fmt.Errorf("bitbucketspec: load Bitbucket Data Center's description: %w", err)
		}
		return router(doc, "Bitbucket Data Center's")
	})}
)

// router validates doc and routes requests by path alone: the fakes listen on 127.0.0.1, under
// a prefix (/2.0, or a server's context path and /rest) that Check strips.
func router(doc *openapi3.T, whose string) (routers.Router, error) {
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("bitbucketspec: %s description does not validate: %w", whose, err)
	}
	doc.Servers = openapi3.Servers{{URL: "/"}}
	return gorillamux.NewRouter(doc)
}

// Load loads and validates the description once for the process; a fake calls it when it is
// made, so that no request waits for it (Check loads it too, and reports its error).
func (d *Description) Load() error {
	_, err := d.load()
	return err
}

// Check validates r (whose path is the API's, after prefix) against the operation of the
// description it names: its path, method, path and query parameters, and JSON body. The body
// is read first (before a client that gives up can take it away) and put back. It returns the
// operation as its method and path template ("GET /repositories/{workspace}/{repo_slug}"), and
// an error naming what the description refuses.
func (d *Description) Check(r *http.Request, prefix string) (operation string, err error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if body, err = io.ReadAll(r.Body); err != nil {
			return "", fmt.Errorf("read the body: %w", err)
		}
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	router, err := d.load()
	if err != nil {
		return "", err
	}
	// The path is matched as sent, escaped: a build status's key may hold a slash (%2F), which
	// stays within its segment.
	escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok {
		return "", fmt.Errorf("%s is outside the API's prefix %q", r.URL.EscapedPath(), prefix)
	}
	path, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("%s: %v", escaped, err)
	}
	req := r.Clone(r.Context())
	u := *r.URL
	u.Path, u.RawPath, u.Scheme, u.Host = path, escaped, "", ""
	req.URL, req.Host = &u, ""
	req.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		return "", fmt.Errorf("%s %s is no operation of %s: %v", r.Method, path, d.name, err)
	}
	operation = route.Method + " " + route.Path
	if err := d.undeclared(route, operation, req.URL.Query()); err != nil {
		return operation, err
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return operation, fmt.Errorf("%s breaks %s: %v", operation, d.name, err)
	}
	return operation, nil
}

// undeclared refuses a query parameter the operation neither declares nor Bitbucket documents
// elsewhere.
func (d *Description) undeclared(route *routers.Route, operation string, q url.Values) error {
	known := map[string]bool{}
	for _, list := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range list {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				known[p.Value.Name] = true
			}
		}
	}
	for _, name := range append(d.documented[""], d.documented[operation]...) {
		known[name] = true
	}
	for name := range q {
		if !known[name] {
			return fmt.Errorf("%s breaks %s: query parameter %q is not one of the operation's", operation, d.name, name)
		}
	}
	return nil
}
