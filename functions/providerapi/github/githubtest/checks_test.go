package githubtest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

const sha = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"

// The fake refuses, as GitHub's description does, and records, each request that breaks
// it: so a publisher valid against it sends what GitHub takes.
func TestTheFakeRefusesTheCheckRunsTheDescriptionForbids(t *testing.T) {
	fake := githubtest.New(nil)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ann := `{"path":"a","start_line":1,"end_line":1,"annotation_level":"failure","message":"m"}`
	out := func(anns ...string) string {
		return `"output":{"title":"t","summary":"s","annotations":[` + strings.Join(anns, ",") + `]}`
	}
	valid := `{"name":"n","head_sha":"` + sha + `","status":"completed","conclusion":"success",` + out(ann) + `}`
	send := func(method, path, body string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header = github.Header("Bearer t")
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send("POST", "/repos/o/r/check-runs", valid); code != http.StatusCreated || len(fake.Violations()) != 0 {
		t.Fatalf("a valid create: %d, %q", code, fake.Violations())
	}
	many := make([]string, 51)
	for i := range many {
		many[i] = ann
	}
	bad := map[string]struct{ method, path, body string }{
		"completed without a conclusion":    {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","status":"completed",` + out() + `}`},
		"completed_at without a conclusion": {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","completed_at":"2024-01-01T00:00:00Z"}`},
		"no head_sha":                       {"POST", "/repos/o/r/check-runs", `{"name":"n","status":"queued"}`},
		"51 annotations":                    {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure",` + out(many...) + `}`},
		"an annotation level":               {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure",` + out(strings.Replace(ann, `"failure"`, `"error"`, 1)) + `}`},
		"an annotation without a message":   {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure",` + out(strings.Replace(ann, `,"message":"m"`, ``, 1)) + `}`},
		"line 0":                            {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure",` + out(strings.Replace(ann, `"start_line":1`, `"start_line":0`, 1)) + `}`},
		"a line as a string":                {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure",` + out(strings.Replace(ann, `"end_line":1`, `"end_line":"1"`, 1)) + `}`},
		"an output without a summary":       {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","conclusion":"failure","output":{"title":"t"}}`},
		"an external_id number":             {"POST", "/repos/o/r/check-runs", `{"name":"n","head_sha":"` + sha + `","external_id":42}`},
		"the conclusion stale":              {"PATCH", "/repos/o/r/check-runs/1", `{"conclusion":"stale"}`},
		"a head_sha on update":              {"PATCH", "/repos/o/r/check-runs/1", `{"head_sha":"` + sha + `"}`},
		"an update of no check run":         {"PATCH", "/repos/o/r/check-runs/9", `{"conclusion":"success"}`},
		"an update in another repository":   {"PATCH", "/repos/o/other/check-runs/1", `{"conclusion":"success"}`},
		"a list filter":                     {"GET", "/repos/o/r/commits/" + sha + "/check-runs?filter=newest", ``},
	}
	for name, r := range bad {
		before := len(fake.Violations())
		if code := send(r.method, r.path, r.body); (code != http.StatusUnprocessableEntity && code != http.StatusNotFound) || len(fake.Violations()) != before+1 {
			t.Errorf("%s: answered %d, %d violations recorded", name, code, len(fake.Violations())-before)
		}
	}
	if fake.Creates() != 1 || len(fake.Runs("o/r", sha)) != 1 {
		t.Fatalf("refused requests changed the check runs: %d creates", fake.Creates())
	}
}
