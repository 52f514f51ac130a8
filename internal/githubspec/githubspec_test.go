package githubspec

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every operation the README lists is in the description, and the description loads and
// validates.
func TestTheDescriptionHoldsEveryOperationListed(t *testing.T) {
	router, err := load()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| ([a-z-]+/[a-z-]+) \\| ([A-Z]+) (\\S+) \\|$").FindAllStringSubmatch(string(readme), -1)
	if len(rows) != 22 {
		t.Fatalf("README lists %d operations, want 22", len(rows))
	}
	for _, row := range rows {
		path := strings.NewReplacer("{owner}", "o", "{repo}", "r", "{sha}", "abc", "{ref}", "main", "{check_run_id}", "1",
			"{installation_id}", "2", "{pull_number}", "3", "{basehead}", "a...b",
			"{org}", "acme", "{hook_id}", "4", "{delivery_id}", "5").Replace(row[3])
		route, _, err := router.FindRoute(httptest.NewRequest(row[2], path, nil))
		if err != nil || route.Operation.OperationID != row[1] {
			t.Errorf("%s %s: %v, want %s", row[2], row[3], err, row[1])
		}
	}
}

// What GitHub refuses, the check refuses, naming why; what it accepts passes, under a GitHub
// Enterprise Server prefix too.
func TestRequestsAreCheckedAgainstTheDescription(t *testing.T) {
	post := func(path, body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	completed := `{"name":"amiss","head_sha":"abc","status":"completed","conclusion":"failure","output":{"title":"t","summary":"s","annotations":[` +
		`{"path":"a","start_line":1,"end_line":1,"annotation_level":"failure","message":"m"}]}}`
	many := `{"output":{"title":"t","summary":"s","annotations":[` + strings.Repeat(`{"path":"a","start_line":1,"end_line":1,"annotation_level":"failure","message":"m"},`, 50) +
		`{"path":"a","start_line":1,"end_line":1,"annotation_level":"failure","message":"m"}]}}`
	cases := []struct {
		name, prefix string
		req          *http.Request
		op, refusal  string // refusal: "" when it passes
	}{
		{"a completed check run", "", post("/repos/o/r/check-runs", completed), "checks/create", ""},
		{"under a GHES prefix", "/api/v3", post("/api/v3/repos/o/r/check-runs", completed), "checks/create", ""},
		{"completed without a conclusion", "", post("/repos/o/r/check-runs", `{"name":"amiss","head_sha":"abc","status":"completed"}`), "checks/create", "conclusion"},
		{"no head_sha", "", post("/repos/o/r/check-runs", `{"name":"amiss"}`), "checks/create", "head_sha"},
		{"51 annotations", "", func() *http.Request {
			r := post("/repos/o/r/check-runs/1", many)
			r.Method = http.MethodPatch
			return r
		}(), "checks/update", "annotations"},
		{"a status", "", post("/repos/o/r/statuses/abc", `{"state":"success","context":"amiss","description":"ok","target_url":null}`), "repos/create-commit-status", ""},
		{"a state GitHub has not", "", post("/repos/o/r/statuses/abc", `{"state":"passed"}`), "repos/create-commit-status", "state"},
		{"a status filter GitHub has not", "", httptest.NewRequest(http.MethodGet, "/repos/o/r/commits/abc/check-runs?check_name=amiss&status=done", nil), "checks/list-for-ref", "status"},
		{"a page that is no number", "", httptest.NewRequest(http.MethodGet, "/repos/o/r/pulls/3/files?per_page=all", nil), "pulls/list-files", "per_page"},
		{"a page of an App's deliveries", "", httptest.NewRequest(http.MethodGet, "/app/hook/deliveries?per_page=100&cursor=v1_12", nil), "apps/list-webhook-deliveries", ""},
		{"a delivery filter GitHub has not", "", httptest.NewRequest(http.MethodGet, "/repos/o/r/hooks/4/deliveries?status=failed", nil), "repos/list-webhook-deliveries", "status"},
		{"a hook id that is no number", "", httptest.NewRequest(http.MethodGet, "/orgs/acme/hooks/main/deliveries", nil), "orgs/list-webhook-deliveries", "hook_id"},
		{"a redelivery", "/api/v3", httptest.NewRequest(http.MethodPost, "/api/v3/orgs/acme/hooks/4/deliveries/5/attempts", nil), "orgs/redeliver-webhook-delivery", ""},
		{"an operation GitHub has not", "", httptest.NewRequest(http.MethodGet, "/repos/o/r/check-suites", nil), "", "no operation"},
	}
	for _, c := range cases {
		op, err := Check(c.req, c.prefix)
		switch {
		case op != c.op:
			t.Errorf("%s: operation %q, want %q (%v)", c.name, op, c.op, err)
		case c.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.refusal)
		}
		if c.req.Body != nil && c.req.Body != http.NoBody {
			if b, _ := io.ReadAll(c.req.Body); c.req.Method != http.MethodGet && len(bytes.TrimSpace(b)) == 0 {
				t.Errorf("%s: the body was not put back", c.name)
			}
		}
	}
}
