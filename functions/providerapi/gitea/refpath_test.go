package gitea

import "testing"

// A branch named in a comparison keeps its slashes (Gitea's compare route takes the rest of the
// path, as its own links write it), and every other character a path needs escaped is.
func TestAComparedBranchKeepsItsSlashes(t *testing.T) {
	for ref, want := range map[string]string{
		"main":      "main",
		"release/1": "release/1",
		"a b/c?d#e": "a%20b/c%3Fd%23e",
		"0123abcd":  "0123abcd",
	} {
		if got := refPath(ref); got != want {
			t.Errorf("refPath(%q) = %q, want %q", ref, got, want)
		}
	}
}
