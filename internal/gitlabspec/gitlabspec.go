// Package gitlabspec checks requests against GitLab's published OpenAPI description of its
// REST API (the Swagger 2.0 document GitLab generates from its API code, which covers part of
// the API), for the fake of GitLab that amiss's tests run (providerapi/gitlab/gitlabtest): the
// operations amiss calls that the description covers, copied from gitlab-org/gitlab's
// doc/api/openapi/openapi_v2.yaml (MIT licence) into gitlab-api-subset.yaml; README.md beside
// it says which, from which commit, and what is not covered.
package gitlabspec

import (
	_ "embed"
	"net/http"

	"github.com/amiss-ci/amiss/internal/apispec"
)

//go:embed gitlab-api-subset.yaml
var description []byte

var spec = apispec.Swagger2("GitLab", description)

// Load loads and validates the description once for the process (see apispec.Spec.Load).
func Load() error { return spec.Load() }

// Check validates r against the operation it names (see apispec.Spec.Check; the description's
// paths hold /api/v4), and returns the operation's id.
func Check(r *http.Request) (operation string, err error) { return spec.Check(r, "") }

// Operations lists the description's operations as "METHOD path operationId".
func Operations() ([]string, error) { return spec.Operations() }
