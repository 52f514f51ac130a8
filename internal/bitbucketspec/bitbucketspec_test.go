package bitbucketspec

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

// Every operation the README lists is in its description, and both descriptions load and
// validate.
func TestTheDescriptionsHoldEveryOperationListed(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(string(readme), "## bitbucket-datacenter-subset.json")
	if len(sections) != 2 {
		t.Fatal("README has no Data Center section")
	}
	fill := strings.NewReplacer("{workspace}", "ws", "{repo_slug}", "app", "{pull_request_id}", "7", "{spec}", "a1b2c3..d4e5f6",
		"{revision}", "a1b2c3", "{commit}", "a1b2c3", "{key}", "amiss", "{projectKey}", "PROJ", "{repositorySlug}", "app",
		"{pullRequestId}", "7", "{commitId}", "a1b2c3")
	row := regexp.MustCompile("(?m)^\\| ([A-Z]+) (/\\S+) \\| [^|]+ \\|$")
	for i, c := range []struct {
		d      *Description
		prefix string
		want   int
	}{{Cloud, "/2.0", 9}, {DataCenter, "/rest", 8}} {
		rows := row.FindAllStringSubmatch(sections[i], -1)
		if len(rows) != c.want {
			t.Fatalf("%s: README lists %d operations, want %d", c.d.name, len(rows), c.want)
		}
		for _, r := range rows {
			req := httptest.NewRequest(r[1], c.prefix+fill.Replace(r[2]), nil)
			if r[1] == http.MethodGet && strings.HasSuffix(r[2], "/builds") {
				req.URL.RawQuery = "key=amiss"
			}
			if r[1] == http.MethodPost {
				req = httptest.NewRequest(r[1], req.URL.String(), strings.NewReader(`{"key":"amiss","state":"FAILED","url":"https://ci.example"}`))
				req.Header.Set("Content-Type", "application/json")
			}
			op, err := c.d.Check(req, c.prefix)
			if err != nil || op != r[1]+" "+r[2] {
				t.Errorf("%s %s: %q, %v", r[1], r[2], op, err)
			}
		}
	}
}

// What Bitbucket refuses, the check refuses, naming why; what it accepts passes.
func TestRequestsAreCheckedAgainstTheDescriptions(t *testing.T) {
	post := func(path, body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	get := func(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
	const cloud = "/2.0/repositories/ws/app"
	const dc = "/bitbucket/rest/api/latest/projects/PROJ/repos/app"
	cases := []struct {
		name    string
		d       *Description
		prefix  string
		req     *http.Request
		refusal string // "" when it passes
	}{
		{"a Cloud build status", Cloud, "/2.0", post(cloud+"/commit/abc/statuses/build",
			`{"key":"amiss","state":"SUCCESSFUL","name":"amiss","url":"https://ci.example","description":"ok"}`), ""},
		{"a Cloud build status's key holding a slash", Cloud, "/2.0", get(cloud + "/commit/abc/statuses/build/amiss%2Fverdict"), ""},
		{"a Cloud state Bitbucket has not", Cloud, "/2.0", post(cloud+"/commit/abc/statuses/build", `{"key":"amiss","state":"PASSED","url":"u"}`), "state"},
		{"a Cloud pull request that is no number", Cloud, "/2.0", get(cloud + "/pullrequests/seven/commits"), "pull_request_id"},
		{"a Cloud diffstat that is no topic", Cloud, "/2.0", get(cloud + "/diffstat/a..b?topic=maybe"), "topic"},
		{"a Cloud listing's page length and fields", Cloud, "/2.0", get(cloud + "/pullrequests/7/commits?pagelen=100&fields=values.hash,next"), ""},
		{"a Cloud range of commits", Cloud, "/2.0", get(cloud + "/commits/abc?exclude=def&pagelen=100"), ""},
		{"a Cloud exclude where it means nothing", Cloud, "/2.0", get(cloud + "/diffstat/a..b?exclude=def"), "exclude"},
		{"a Cloud operation Bitbucket has not", Cloud, "/2.0", get(cloud + "/pullrequests/7/files"), "no operation"},
		{"a Data Center build status under a context path", DataCenter, "/bitbucket/rest", post(dc+"/commits/abc/builds",
			`{"key":"amiss","state":"FAILED","url":"https://ci.example","name":"amiss","description":"no"}`), ""},
		{"a Data Center build status without its url", DataCenter, "/bitbucket/rest", post(dc+"/commits/abc/builds", `{"key":"amiss","state":"FAILED"}`), "url"},
		{"a Data Center key over 255 characters", DataCenter, "/bitbucket/rest", post(dc+"/commits/abc/builds",
			`{"key":"`+strings.Repeat("k", 256)+`","state":"FAILED","url":"u"}`), "key"},
		{"a Data Center build read back without its key", DataCenter, "/bitbucket/rest", get(dc + "/commits/abc/builds"), "key"},
		{"a Data Center query parameter the operation has not", DataCenter, "/bitbucket/rest", get(dc + "/compare/commits?from=a&to=b&since=c"), "since"},
		{"a Data Center page that is no number", DataCenter, "/bitbucket/rest", get(dc + "/compare/commits?from=a&to=b&limit=all"), "limit"},
	}
	for _, c := range cases {
		_, err := c.d.Check(c.req, c.prefix)
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.refusal)
		}
		if c.req.Method == http.MethodPost {
			if b, _ := io.ReadAll(c.req.Body); len(bytes.TrimSpace(b)) == 0 {
				t.Errorf("%s: the body was not put back", c.name)
			}
		}
	}
}
