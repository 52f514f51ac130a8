package wiring_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
)

// Every route that reads what its webhooks lack from its provider's API also reads, at
// evaluation, what the provider shows now of the pull request (Route.PullNow), with the same
// base URL and credential; a route with nothing to read with reads neither.

const (
	nowTitle  = "feat: as the pull request shows it now"
	nowTarget = "release/2"
)

// tokenRoute is a route of provider publishing to publisher at baseURL with the token in env:T.
func tokenRoute(t *testing.T, provider, publisher, baseURL, repo string) func(context.Context, string) (*runner.Route, error) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: ` + provider + `
    secrets: [{id: a, from: "env:X"}]
    repositories: ["` + repo + `"]
    rules: {pull_request_title: "^feat:"}
    publish: {provider: ` + publisher + `, base_url: "` + baseURL + `", token: {from: "env:T"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return wiring.Routes(cfg, fixedSecrets{"env:T": "tok"}, nil, nil)
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEveryRouteThatReadsItsProviderReadsThePullRequestAtEvaluation(t *testing.T) {
	tok := func(s string) bool { return s == "tok" }
	pull := func(provider, api, repo string) change.Change {
		return change.Change{Provider: provider, API: api, Repository: repo, SHA: "8f9e0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b",
			Event: change.PullRequest, Installation: 7, Pull: &change.Pull{Number: 7, Title: "as the webhook had it", TargetBranch: "main"}}
	}
	type route struct {
		routes func(context.Context, string) (*runner.Route, error)
		name   string
		s      change.Change
	}
	for name, build := range map[string]func(t *testing.T) route{
		"GitHub, a token": func(t *testing.T) route {
			gh := githubtest.New(tok)
			gh.AddPull("acme/app", githubtest.HistoryPull{Number: 7, Title: nowTitle, Base: nowTarget, Head: "topic"})
			return route{tokenRoute(t, "github", "github", serve(t, gh), "acme/*"), "r", pull("github", "", "acme/app")}
		},
		"GitHub, an App": func(t *testing.T) route {
			key, pem := githubtest.GenerateKey()
			gh := githubtest.NewApp(42, &key.PublicKey)
			gh.Install(7, "acme/app")
			gh.AddPull("acme/app", githubtest.HistoryPull{Number: 7, Title: nowTitle, Base: nowTarget, Head: "topic"})
			return route{appRoutes(t, serve(t, gh), pem), "a", pull("github", "", "acme/app")}
		},
		"GitHub, a read block": func(t *testing.T) route {
			gh := githubtest.New(tok)
			gh.AddPull("acme/app", githubtest.HistoryPull{Number: 7, Title: nowTitle, Base: nowTarget, Head: "topic"})
			cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/*"]
    rules: {pull_request_title: "^feat:"}
    read: {base_url: "` + serve(t, gh) + `", token: {from: "env:T"}}
`))
			if err != nil {
				t.Fatal(err)
			}
			return route{wiring.Routes(cfg, fixedSecrets{"env:T": "tok"}, nil, nil), "r", pull("github", "", "acme/app")}
		},
		"Gitea": func(t *testing.T) route {
			g := giteatest.New(tok)
			g.AddPull("acme/app", giteatest.Pull{Number: 7, Title: nowTitle, Base: nowTarget, Head: "topic"})
			return route{tokenRoute(t, "gitea", "gitea", serve(t, g), "acme/*"), "r", pull("gitea", "", "acme/app")}
		},
		"Forgejo": func(t *testing.T) route {
			g := giteatest.New(tok)
			g.AddPull("acme/app", giteatest.Pull{Number: 7, Title: nowTitle, Base: nowTarget, Head: "topic"})
			return route{tokenRoute(t, "forgejo", "gitea", serve(t, g), "acme/*"), "r", pull("forgejo", "", "acme/app")}
		},
		"GitLab": func(t *testing.T) route {
			g := gitlabtest.New(tok)
			g.AddMergeRequest("group/app", gitlabtest.MergeRequest{IID: 7, Title: nowTitle, Source: "topic", Target: nowTarget})
			return route{tokenRoute(t, "gitlab", "gitlab", serve(t, g), "group/*"), "r", pull("gitlab", "", "group/app")}
		},
		"Bitbucket Cloud": func(t *testing.T) route {
			b := bitbuckettest.New(tok)
			b.AddPull("team/app", bitbuckettest.Pull{ID: 7, Title: nowTitle, Source: "topic", Destination: nowTarget})
			return route{tokenRoute(t, "bitbucket", "bitbucket", serve(t, b), "team/*"), "r", pull("bitbucket", change.BitbucketCloud, "team/app")}
		},
		"Bitbucket Data Center": func(t *testing.T) route {
			b := bitbucketdctest.New(tok)
			b.AddPull("PROJ/app", bitbucketdctest.Pull{ID: 7, Title: nowTitle, FromBranch: "topic", ToBranch: nowTarget})
			return route{tokenRoute(t, "bitbucket", "bitbucket-datacenter", serve(t, b), "PROJ/*"), "r",
				pull("bitbucket", change.BitbucketDataCenter, "PROJ/app")}
		},
	} {
		r := build(t)
		rt, err := r.routes(context.Background(), r.name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rt.Inputs == nil || rt.PullNow == nil {
			t.Fatalf("%s: reads inputs %v, reads the pull request %v; want both", name, rt.Inputs != nil, rt.PullNow != nil)
		}
		got, err := rt.PullNow(context.Background(), r.s)
		if want := (change.PullState{Title: nowTitle, TargetBranch: nowTarget}); err != nil || got != want {
			t.Fatalf("%s: PullNow = %+v, %v; want %+v", name, got, err, want)
		}
	}
}

func TestARouteWithNothingToReadWithDoesNotReadThePullRequest(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/app"]
    rules: {pull_request_title: "^feat:"}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := wiring.Routes(cfg, fixedSecrets{}, nil, nil)(context.Background(), "r")
	if err != nil || r.PullNow != nil {
		t.Fatalf("a route publishing to the log, with no read block: %+v %v; want no read of the pull request", r, err)
	}
}

// The read is one request bounded by the route's timeout: a provider that never answers
// answers the runner an error (which orders nothing) once the timeout has passed, not a read
// that waits for the evaluation's end.
func TestAPullRequestReadThatHangsEndsAtTheRoutesTimeout(t *testing.T) {
	hung := make(chan struct{})
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	defer close(hung)
	cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/*"]
    rules: {pull_request_title: "^feat:"}
    publish: {provider: github, base_url: "` + url + `", token: {from: "env:T"}, timeout: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := wiring.Routes(cfg, fixedSecrets{"env:T": "tok"}, nil, nil)(context.Background(), "r")
	if err != nil || rt.PullNow == nil {
		t.Fatalf("route: %+v %v; want one that reads the pull request", rt, err)
	}
	s := change.Change{Provider: "github", Repository: "acme/app", SHA: "8f9e0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b", Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: "feat: x", TargetBranch: "main"}}
	got, err := rt.PullNow(context.Background(), s) // no deadline of its own: only the route's timeout ends it
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || got != (change.PullState{}) {
		t.Fatalf("a provider that never answers: PullNow = %+v, %v; want a timeout and no state", got, err)
	}
}
