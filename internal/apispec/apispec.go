// Package apispec checks requests against a provider's published Swagger 2.0 description of
// its REST API, for the fakes amiss's tests run (giteatest, gitlabtest): the description, or
// the part of it amiss calls, is converted to OpenAPI 3 and routed by path, and a request it
// refuses (an unknown operation, a parameter of the wrong type or outside its enum, a body
// breaking its schema, or a query parameter the operation does not declare) is reported with
// the operation and the reason, so a fake answers it as the provider would and records it.
//
// The last rule is the fakes' own: Gitea and GitLab ignore a query parameter they do not know,
// so a misspelt one (per_page sent to Gitea, which pages by limit) would silently read the
// provider's default page and pass unnoticed against a lenient fake.
package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"go.yaml.in/yaml/v3"
)

// Spec is one provider's description, loaded once for the process.
type Spec struct {
	name string
	once func() (loaded, error)
}

type loaded struct {
	doc    *openapi3.T
	router routers.Router
}

func (s *Spec) load() (*openapi3.T, routers.Router, error) {
	l, err := s.once()
	return l.doc, l.router, err
}

// Swagger2 returns the description in data (Swagger 2.0, as JSON or YAML) of the provider
// called name (in its errors).
func Swagger2(name string, data []byte) *Spec {
	s := &Spec{name: name}
	s.once = sync.OnceValues(func() (loaded, error) {
		var tree any
		if err := yaml.Unmarshal(data, &tree); err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description does not parse: %w", name, err)
		}
		js, err := json.Marshal(tree)
		if err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description: %w", name, err)
		}
		var v2 openapi2.T
		if err := json.Unmarshal(js, &v2); err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description is no Swagger 2.0 document: %w", name, err)
		}
		doc, err := openapi2conv.ToV3(&v2)
		if err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description does not convert to OpenAPI 3: %w", name, err)
		}
		if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description does not validate: %w", name, err)
		}
		// Requests are matched by path alone: the fakes listen on 127.0.0.1, under a prefix
		// that Check strips.
		doc.Servers = openapi3.Servers{{URL: "/"}}
		router, err := gorillamux.NewRouter(doc)
		if err != nil {
			return loaded{}, fmt.Errorf("apispec: %s's description: %w", name, err)
		}
		return loaded{doc, router}, nil
	})
	return s
}

// Load loads and validates the description; a fake calls it when it is made, so that no
// request waits for it (Check loads it too, and reports its error).
func (s *Spec) Load() error {
	_, _, err := s.load()
	return err
}

// Operations lists the description's operations as "METHOD path operationId".
func (s *Spec) Operations() ([]string, error) {
	doc, _, err := s.load()
	if err != nil {
		return nil, err
	}
	var out []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out = append(out, method+" "+path+" "+op.OperationID)
		}
	}
	return out, nil
}

// Check validates r (whose path is the API's after prefix, escaped as sent) against the
// operation of the description it names: its path, method, path and query parameters, and JSON
// body. The body is read first (before a client that gives up can take it away) and put back.
// It returns the operation's id, and an error naming what the description refuses.
func (s *Spec) Check(r *http.Request, prefix string) (operation string, err error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if body, err = io.ReadAll(r.Body); err != nil {
			return "", fmt.Errorf("read the body: %w", err)
		}
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	_, router, err := s.load()
	if err != nil {
		return "", err
	}
	escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok {
		return "", fmt.Errorf("%s is outside the API's prefix %q", r.URL.EscapedPath(), prefix)
	}
	path, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		path = escaped
	}
	req := r.Clone(r.Context())
	u := *r.URL
	// The escaped form is kept: a GitLab project is named by its URL-encoded path, one
	// segment ("group%2Fproject").
	u.Path, u.RawPath, u.Scheme, u.Host = path, escaped, "", ""
	req.URL, req.Host = &u, ""
	req.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		return "", fmt.Errorf("%s %s is no operation of %s's API description: %v", r.Method, escaped, s.name, err)
	}
	op := route.Operation.OperationID
	declared := map[string]bool{}
	for _, p := range route.Operation.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
			declared[p.Value.Name] = true
		}
	}
	for name := range r.URL.Query() {
		if !declared[name] {
			return op, fmt.Errorf("%s (%s %s): query parameter %q is not one %s's API description declares", op, r.Method, escaped, name, s.name)
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return op, fmt.Errorf("%s (%s %s) breaks %s's API description: %v", op, r.Method, escaped, s.name, err)
	}
	return op, nil
}
