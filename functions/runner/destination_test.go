package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
)

// One API spelled two ways is one subject: two routes publish to the same fake GitHub, one
// naming it in capitals with a trailing slash and the default port, the other plainly; the
// pull request's opening comes in on the first, its edit on the second. Delivered newest first,
// the edit's verdict stands and the opening's is superseded, as on one route.

// routesOf builds the runner's routes from a configuration file's routes, as the functions do.
func routesOf(t *testing.T, yaml string) func(context.Context, string) (*runner.Route, error) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	res := &secrets.Resolver{Getenv: func(k string) string { return map[string]string{"GH_TOKEN": ghToken, "HOOK": "s"}[k] }}
	return wiring.Routes(cfg, res, nil, nil)
}

func spelledRoute(name, baseURL string) string {
	return fmt.Sprintf(`
  %s:
    provider: github
    secrets: [{id: a, from: "env:HOOK"}]
    repositories: ["acme/*"]
    rules: {pull_request_title: "^feat:"}
    publish: {provider: github, base_url: %q, token: {from: "env:GH_TOKEN"}, context: %q, timeout: 5s}
`, name, baseURL, statusCtx)
}

// pullRequestOn admits a pull request event of title on route, signed at updatedAt.
func (w *commitWorld) pullRequestOn(route, title string, updatedAt time.Time) queue.Message {
	w.t.Helper()
	s, _ := json.Marshal(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: title, TargetBranch: "main"}, Whole: change.TitleInput | change.PullInput})
	body := []byte(route + title)
	d := ledger.Delivery{Binding: ledger.Binding{Route: route, Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
		BodyDigest: ledger.SumBody(body)}, Change: s, BodyAt: updatedAt}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit %q: %+v %v", title, a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

func TestTwoSpellingsOfOneAPIShareOneOrder(t *testing.T) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	loud := "HTTP://" + strings.TrimPrefix(w.srv.URL, "http://") + "/"
	r := w.runner("a", nil, 5*time.Second)
	r.Routes = routesOf(t, "routes:"+spelledRoute("opened", loud)+spelledRoute("edited", w.srv.URL))
	opened := w.pullRequestOn("opened", badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequestOn("edited", goodTitle, epoch.Add(-time.Minute))
	w.process(r, edited)
	w.process(r, opened)
	w.standing("success", 1)
	w.wantSuperseded(opened, edited)
}

// An upgrade: before it, the edit's verdict was published under the route's spelling as
// written (its subject record keyed by it) while the opening's verdict was still waiting to
// be posted. After it, the route's destination is normalised, a new name: the opening's
// verdict, ordered under it, must still find the edit's and be superseded, not posted over it.
func TestAVerdictRecordedUnderAnOldSpellingIsNotOvertakenAfterAnUpgrade(t *testing.T) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	loud := "HTTP://" + strings.TrimPrefix(w.srv.URL, "http://") + "/"
	yaml := "routes:" + spelledRoute("r", loud)
	upgraded := routesOf(t, yaml)
	before := w.runner("before", nil, 5*time.Second)
	before.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := upgraded(ctx, name)
		if rt != nil {
			rt.Destination, rt.OldDestinations = "github "+strings.TrimRight(loud, "/"), nil // as amiss named it before
		}
		return rt, err
	}
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	w.process(before, edited)
	after := w.runner("after", nil, 5*time.Second)
	after.Routes = upgraded
	w.process(after, opened)
	w.standing("success", 1)
	w.wantSuperseded(opened, edited)
}
