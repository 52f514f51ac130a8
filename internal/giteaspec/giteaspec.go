// Package giteaspec checks requests against Gitea's published API description (its Swagger
// document, which Forgejo's follows), for the fake of Gitea and Forgejo that amiss's tests run
// (providerapi/gitea/giteatest): the operations amiss calls, copied from go-gitea/gitea's
// templates/swagger/v1_json.tmpl (MIT licence) into gitea-api-subset.json; README.md beside it
// says which, from which commit, and how to copy them again.
package giteaspec

import (
	_ "embed"
	"net/http"

	"github.com/amiss-ci/amiss/internal/apispec"
)

//go:embed gitea-api-subset.json
var description []byte

var spec = apispec.Swagger2("Gitea", description)

// Prefix is the API's path on a server: Check strips it.
const Prefix = "/api/v1"

// Load loads and validates the description once for the process (see apispec.Spec.Load).
func Load() error { return spec.Load() }

// Check validates r against the operation it names (see apispec.Spec.Check), its path under
// Prefix, and returns the operation's id.
func Check(r *http.Request) (operation string, err error) { return spec.Check(r, Prefix) }

// Operations lists the description's operations as "METHOD path operationId".
func Operations() ([]string, error) { return spec.Operations() }
