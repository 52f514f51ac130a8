package giteaspec

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every operation the README lists is in the description, and only those; the description
// loads and validates.
func TestTheDescriptionHoldsEveryOperationListed(t *testing.T) {
	ops, err := Operations()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, row := range regexp.MustCompile("(?m)^\\| ([A-Za-z]+) \\| ([A-Z]+) (\\S+) \\|").FindAllStringSubmatch(string(readme), -1) {
		listed = append(listed, row[2]+" "+row[3]+" "+row[1])
	}
	slices.Sort(ops)
	slices.Sort(listed)
	if !slices.Equal(ops, listed) || len(ops) != 7 {
		t.Fatalf("the description holds\n%s\nthe README lists\n%s", strings.Join(ops, "\n"), strings.Join(listed, "\n"))
	}
}

// What the description refuses, the check refuses, naming why; what it accepts passes.
func TestRequestsAreCheckedAgainstTheDescription(t *testing.T) {
	post := func(path, body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	get := func(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
	cases := []struct {
		name    string
		req     *http.Request
		op      string
		refusal string // "" when it passes
	}{
		{"a status", post("/api/v1/repos/o/r/statuses/abc", `{"state":"success","context":"amiss","description":"ok","target_url":"https://x"}`), "repoCreateStatus", ""},
		{"a status whose context is no string", post("/api/v1/repos/o/r/statuses/abc", `{"state":"success","context":5}`), "repoCreateStatus", "context"},
		{"a page of a pull request's files", get("/api/v1/repos/o/r/pulls/3/files?page=2&limit=50"), "repoGetPullRequestFiles", ""},
		{"an index that is no number", get("/api/v1/repos/o/r/pulls/three/files"), "repoGetPullRequestFiles", "index"},
		{"GitHub's page size", get("/api/v1/repos/o/r/pulls/3/commits?per_page=100"), "repoGetPullRequestCommits", "per_page"},
		{"commits without their files", get("/api/v1/repos/o/r/pulls/3/commits?files=false&verification=false"), "repoGetPullRequestCommits", ""},
		{"a comparison", get("/api/v1/repos/o/r/compare/abc...def"), "repoCompareDiff", ""},
		{"a repository", get("/api/v1/repos/o/r"), "repoGet", ""},
		{"outside the API", get("/repos/o/r"), "", "prefix"},
		{"an operation not copied", get("/api/v1/repos/o/r/branches"), "", "no operation"},
	}
	for _, c := range cases {
		op, err := Check(c.req)
		switch {
		case op != c.op:
			t.Errorf("%s: operation %q, want %q (%v)", c.name, op, c.op, err)
		case c.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.refusal)
		}
	}
}
