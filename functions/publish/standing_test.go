package publish_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
)

func wantStanding(t *testing.T, p publish.Publisher, s publish.Status, want publish.Standing) {
	t.Helper()
	got, err := p.Standing(context.Background(), s)
	if err != nil || got != want {
		t.Fatalf("standing of %q on %s: %v %v, want %v", s.Description, s.Context, got, err, want)
	}
}

// The read-back of a GitHub status reads the combined status, where the latest status of each
// context stands, and pages through it (a commit can gather hundreds of contexts).
func TestGitHubReadsBackTheLatestStatusOfTheContext(t *testing.T) {
	fake := githubtest.New(githubtest.Token("t"))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	g := publish.NewGitHub(srv.URL, "t", srv.Client())
	ours := st()
	ours.Description = strings.Repeat("é", 200) // posted cut to 140 characters
	wantStanding(t, g, ours, publish.StandingNone)
	for i := range 150 {
		other := st()
		other.Context = fmt.Sprintf("ci/job-%03d", i)
		if err := g.Publish(context.Background(), other); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Publish(context.Background(), ours); err != nil {
		t.Fatal(err)
	}
	wantStanding(t, g, ours, publish.StandingOurs) // on the second page of contexts
	newer := ours
	newer.State, newer.Description = "success", "passed"
	if err := g.Publish(context.Background(), newer); err != nil {
		t.Fatal(err)
	}
	wantStanding(t, g, ours, publish.StandingOther)
	wantStanding(t, g, newer, publish.StandingOurs)
	if v := fake.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
}

// Gitea's combined status names the state "status".
func TestGiteaReadsBackTheLatestStatusOfTheContext(t *testing.T) {
	latest := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token gt" || !strings.HasSuffix(r.URL.Path, "/api/v1/repos/octo-org/octo-repo/commits/"+sha+"/status") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if r.URL.Query().Get("page") != "1" || len(latest) == 0 {
			w.Write([]byte(`{"state":"","total_count":0,"statuses":[]}`))
			return
		}
		fmt.Fprintf(w, `{"state":"failure","statuses":[{"id":3,"status":%q,"context":"amiss/verdict","description":%q,"target_url":%q}]}`,
			latest["state"], latest["description"], latest["target_url"])
	}))
	defer srv.Close()
	g := publish.NewGitea(srv.URL, "gt", srv.Client())
	s := st()
	wantStanding(t, g, s, publish.StandingNone)
	latest = map[string]string{"state": s.State, "description": s.Description, "target_url": s.TargetURL}
	wantStanding(t, g, s, publish.StandingOurs)
	latest["description"] = "another verdict"
	wantStanding(t, g, s, publish.StandingOther)
}

// GitLab lists a name's statuses oldest first: the latest is the one with the highest id,
// wherever it is in the pages.
func TestGitLabReadsBackTheLatestStatusOfTheName(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	g := &gitlabCommit{}
	srv := httptest.NewServer(g)
	defer srv.Close()
	p := publish.NewGitLab(srv.URL, "glpat-token", srv.Client())
	wantStanding(t, p, s, publish.StandingNone)
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		g.held = append(g.held, map[string]any{"id": len(g.held) + 1, "name": fmt.Sprintf("job-%d", i), "status": "success"})
	}
	wantStanding(t, p, s, publish.StandingOurs)
	g.held = append(g.held, map[string]any{"id": len(g.held) + 1, "name": s.Context, "status": "success"})
	wantStanding(t, p, s, publish.StandingOther)
}

// Bitbucket keeps one build status per key.
func TestBitbucketReadsBackTheStatusOfTheKey(t *testing.T) {
	var held string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/2.0/repositories/octo-org/octo-repo/commit/"+sha+"/statuses/build/amiss%2Fverdict" &&
			r.URL.EscapedPath() != "/2.0/repositories/octo-org/octo-repo/commit/"+sha+"/statuses/build/amiss%2Fverdict" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if held == "" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"type":"error","error":{"message":"Resource not found"}}`))
			return
		}
		w.Write([]byte(held))
	}))
	defer srv.Close()
	b := publish.NewBitbucket(srv.URL, "bb", srv.Client())
	s := st()
	wantStanding(t, b, s, publish.StandingNone)
	held = fmt.Sprintf(`{"key":"amiss/verdict","state":"FAILED","description":%q,"url":%q}`, s.Description, s.TargetURL)
	wantStanding(t, b, s, publish.StandingOurs)
	s.State = "success"
	wantStanding(t, b, s, publish.StandingOther)
}

// A page of the combined status holds up to 100 contexts, each with its description and link:
// far more than one status's answer. The read-back reads it whole.
func TestGitHubReadsBackAPageOfContextsLongerThanAStatus(t *testing.T) {
	fake := githubtest.New(githubtest.Token("t"))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	g := publish.NewGitHub(srv.URL, "t", srv.Client())
	for i := range 99 {
		other := st()
		other.Context = fmt.Sprintf("ci/job-%03d", i)
		other.Description = strings.Repeat("d", 140)
		other.TargetURL = "https://ci.example.com/" + strings.Repeat("x", 1000)
		if err := g.Publish(context.Background(), other); err != nil {
			t.Fatal(err)
		}
	}
	ours := st()
	if err := g.Publish(context.Background(), ours); err != nil {
		t.Fatal(err)
	}
	wantStanding(t, g, ours, publish.StandingOurs)
}
