package gitlabspec

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
	for _, row := range regexp.MustCompile("(?m)^\\| ([A-Za-z0-9]+) \\| ([A-Z]+) (\\S+) \\|").FindAllStringSubmatch(string(readme), -1) {
		listed = append(listed, row[2]+" "+row[3]+" "+row[1])
	}
	slices.Sort(ops)
	slices.Sort(listed)
	if !slices.Equal(ops, listed) || len(ops) != 6 {
		t.Fatalf("the description holds\n%s\nthe README lists\n%s", strings.Join(ops, "\n"), strings.Join(listed, "\n"))
	}
}

// What the description refuses, the check refuses, naming why; what it accepts passes, a
// project named by its URL-encoded path included.
func TestRequestsAreCheckedAgainstTheDescription(t *testing.T) {
	get := func(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
	cases := []struct {
		name    string
		req     *http.Request
		op      string
		refusal string // "" when it passes
	}{
		{"a page of a merge request's diffs", get("/api/v4/projects/group%2Fsub%2Fapp/merge_requests/7/diffs?page=2&per_page=100"), "getApiV4ProjectsIdMergeRequestsMergeRequestIidDiffs", ""},
		{"an iid that is no number", get("/api/v4/projects/group%2Fapp/merge_requests/seven/commits"), "getApiV4ProjectsIdMergeRequestsMergeRequestIidCommits", "merge_request_iid"},
		{"Gitea's page size", get("/api/v4/projects/group%2Fapp/merge_requests/7/commits?limit=100"), "getApiV4ProjectsIdMergeRequestsMergeRequestIidCommits", "limit"},
		{"a comparison", get("/api/v4/projects/group%2Fapp/repository/compare?from=abc&to=def"), "getApiV4ProjectsIdRepositoryCompare", ""},
		{"a comparison without its start", get("/api/v4/projects/group%2Fapp/repository/compare?to=def"), "getApiV4ProjectsIdRepositoryCompare", "from"},
		{"a commit's statuses by name", get("/api/v4/projects/group%2Fapp/repository/commits/abc/statuses?name=amiss&all=true&per_page=100&page=1"), "getApiV4ProjectsIdRepositoryCommitsShaStatuses", ""},
		{"a sort GitLab has not", get("/api/v4/projects/group%2Fapp/repository/commits/abc/statuses?sort=up"), "getApiV4ProjectsIdRepositoryCommitsShaStatuses", "sort"},
		{"a project", get("/api/v4/projects/group%2Fapp"), "getApiV4ProjectsId", ""},
		{"an operation not copied", get("/api/v4/projects/group%2Fapp/repository/branches"), "", "no operation"},
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
