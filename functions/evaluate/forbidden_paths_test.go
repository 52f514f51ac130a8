package evaluate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
)

// forbidding evaluates a push changing paths, held whole, under one forbidden-paths glob.
func forbidding(t *testing.T, glob string, paths ...string) evaluate.Verdict {
	t.Helper()
	r, err := evaluate.NewRules(config.Rules{ForbiddenPaths: []string{glob}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.Evaluate(context.Background(), change.Change{Event: change.Push, Whole: change.AllInputs, Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The segments of a glob before its "**" are globs like the others: "*/secrets/**" forbids
// the files under the secrets folder of any top-level folder, "[Ss]ecrets/**" those under
// Secrets as well as secrets (what a case-insensitive checkout needs).
func TestTheSegmentsBeforeADoubleStarAreGlobs(t *testing.T) {
	for _, c := range []struct{ glob, path string }{
		{"*/secrets/**", "deploy/secrets/prod.env"},
		{"[Ss]ecrets/**", "Secrets/prod.env"},
		{"config/?/keys/**", "config/a/keys/k"},
		{"deploy/*/credentials/**/*.json", "deploy/prod/credentials/gcp/sa.json"},
		{"deploy/*/credentials/**/*.json", "deploy/prod/credentials/sa.json"},
	} {
		v := forbidding(t, c.glob, "README.md", c.path)
		if v.State != evaluate.Failure || !strings.Contains(v.Description, "forbidden path "+c.path+" ("+c.glob+")") {
			t.Errorf("%q changing %q: %s %q", c.glob, c.path, v.State, v.Description)
		}
	}
}

// A changed path is a path from the repository's root, as git writes it. One that is not (a
// sender's "./secrets/key" or "/secrets/key", a ".." segment, an empty path, a NUL byte) could
// name a forbidden file that no glob matches as written: the rule fails closed, naming it,
// rather than pass it.
func TestAChangedPathThatIsNoRepositoryPathFailsTheRule(t *testing.T) {
	for _, p := range []string{"./secrets/key", "/secrets/key", "docs/../secrets/key", "", ".", "secrets\x00/key"} {
		v := forbidding(t, "secrets/**", "README.md", p)
		if v.State != evaluate.Failure || !strings.Contains(v.Description, fmt.Sprintf("%q", p)) {
			t.Errorf("changed path %q: %s %q", p, v.State, v.Description)
		}
	}
	// What git paths may hold is no reason to fail: a backslash, a line break, a dot file.
	if v := forbidding(t, "secrets/**", `docs\secrets\key`, "a\nb", ".env", "a/.b/c"); v.State != evaluate.Success {
		t.Errorf("git paths: %s %q", v.State, v.Description)
	}
}

// A class negated as git and shells negate it, [!...], is negated: "config/[!_]*" forbids
// config/prod.yaml. Taken as a class of "!" and "_", it forbade almost nothing.
func TestAClassNegatedWithAnExclamationMarkIsNegated(t *testing.T) {
	if v := forbidding(t, "config/[!_]*", "config/_defaults.yaml", "config/prod.yaml"); v.State != evaluate.Failure ||
		!strings.Contains(v.Description, "forbidden path config/prod.yaml") || len(v.Files) != 1 {
		t.Errorf("config/[!_]*: %s %q %+v", v.State, v.Description, v.Files)
	}
}
