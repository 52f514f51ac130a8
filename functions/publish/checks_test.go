package publish_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
)

// installationTokens hands out token-<installation>-<n>, n counting the tokens forgotten.
type installationTokens struct {
	mu        sync.Mutex
	n         int
	asked     int
	forgotten []string
}

func (k *installationTokens) Token(_ context.Context, installation int64) (github.InstallationToken, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked++
	return github.InstallationToken{Value: fmt.Sprintf("token-%d-%d", installation, k.n)}, nil
}

func (k *installationTokens) Forget(_ int64, token string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgotten = append(k.forgotten, token)
	k.n++
}

// deliveryKey stands for a delivery's ledger key.
const deliveryKey = "5f0c8a3b9d2e4f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c"

// refusing is a failure verdict of an App's delivery refusing n files.
func refusing(n int) publish.Status {
	s := st()
	s.Description = "failed: forbidden path secrets/0000.pem (secrets/**)"
	s.Installation, s.ExternalID = 7, deliveryKey
	for i := range n {
		p := fmt.Sprintf("secrets/%04d.pem", i)
		s.Files = append(s.Files, publish.File{Path: p, Rule: "forbidden path", Message: "changes " + p + ", which secrets/** forbids"})
	}
	return s
}

// checksServer serves fake as GitHub Enterprise Server does (under /api/v3), and returns a
// check-run publisher to it that makes one attempt a call.
func checksServer(t *testing.T, fake *githubtest.GitHub) *publish.GitHubChecks {
	t.Helper()
	fake.Prefix = "/api/v3"
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	p := publish.NewGitHubChecks(srv.URL+"/api/v3", &installationTokens{}, srv.Client())
	p.MaxAttempts = 1
	return p
}

func noViolations(t *testing.T, fake *githubtest.GitHub) {
	t.Helper()
	if v := fake.Violations(); len(v) > 0 {
		t.Fatalf("%d requests broke GitHub's API description: %q", len(v), v)
	}
}

// A verdict refusing 120 files is one completed check run carrying the conclusion, the title,
// the summary, the details URL, the delivery's key and all 120 annotations: the create takes 50,
// two updates the next 50 and the last 20 (GitHub takes 50 a request and appends those of an
// update). Every request is valid against the description, and the check run stands as ours.
func TestACheckRunCarriesEveryAnnotationInRequestsOfFifty(t *testing.T) {
	fake := githubtest.New(nil)
	p := checksServer(t, fake)
	s := refusing(120)
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	noViolations(t, fake)
	runs := fake.Runs(s.Repository, s.SHA)
	if len(runs) != 1 || fake.Creates() != 1 || fake.Updates() != 2 {
		t.Fatalf("%d check runs, %d creates, %d updates; want 1, 1, 2", len(runs), fake.Creates(), fake.Updates())
	}
	r := runs[0]
	if r.Name != s.Context || r.Status != "completed" || r.Conclusion != "failure" || r.ExternalID != deliveryKey ||
		r.DetailsURL != s.TargetURL || r.Title != "Rules failed" || !strings.HasPrefix(r.Summary, s.Description) ||
		!strings.Contains(r.Summary, "120 refused files are annotated") || r.CompletedAt == "" {
		t.Fatalf("check run %+v", r)
	}
	if len(r.Annotations) != 120 {
		t.Fatalf("%d annotations, want 120", len(r.Annotations))
	}
	for i, a := range r.Annotations {
		if want := fmt.Sprintf("secrets/%04d.pem", i); a.Path != want || a.Level != "failure" || a.StartLine != 1 || a.EndLine != 1 ||
			!strings.Contains(a.Message, want) || a.Title != "forbidden path" {
			t.Fatalf("annotation %d: %+v, want one on %s", i, a, want)
		}
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOurs {
		t.Fatalf("standing %v %v, want ours", st, err)
	}
}

// The conclusion of each state: a verdict amiss could not evaluate fails, with a title saying
// so; a success without files carries no annotations; no details_url without a target URL.
func TestTheConclusionOfEachState(t *testing.T) {
	for state, want := range map[string][2]string{"success": {"success", "All rules hold"}, "failure": {"failure", "Rules failed"},
		"error": {"failure", "Could not be evaluated"}} {
		fake := githubtest.New(nil)
		p := checksServer(t, fake)
		s := refusing(0)
		s.State, s.TargetURL = state, ""
		if err := p.Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		noViolations(t, fake)
		r, ok := fake.LatestRun(s.Repository, s.SHA, s.Context)
		if !ok || r.Conclusion != want[0] || r.Title != want[1] || len(r.Annotations) != 0 || r.DetailsURL != "" {
			t.Fatalf("%s: check run %+v, want conclusion %s titled %q", state, r, want[0], want[1])
		}
	}
}

// GitHub creates the check run and its answer never reaches the client (the connection is cut,
// as a timeout leaves it). The retry lists the commit's check runs, finds this delivery's by
// its external_id and updates it: exactly one check run, with each of its 70 annotations once.
func TestACreateWhoseAnswerIsLostLeadsToExactlyOneCheckRun(t *testing.T) {
	fake := githubtest.New(nil)
	fake.Create = func(n int, _ githubtest.CheckRun) githubtest.Behavior {
		return githubtest.Behavior{Cut: n == 1}
	}
	p := checksServer(t, fake)
	s := refusing(70)
	err := p.Publish(context.Background(), s)
	if err == nil || !publish.Unknown(err) {
		t.Fatalf("first publication: %v, want an unknown outcome", err)
	}
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatalf("retry: %v", err)
	}
	noViolations(t, fake)
	runs := fake.Runs(s.Repository, s.SHA)
	if len(runs) != 1 {
		t.Fatalf("%d check runs after a create whose answer was lost and its retry, want exactly 1", len(runs))
	}
	if r := runs[0]; r.Updates == 0 || len(r.Annotations) != 70 || r.ExternalID != deliveryKey || r.Conclusion != "failure" {
		t.Fatalf("check run: %d updates, %d annotations, %+v", r.Updates, len(r.Annotations), r)
	}
}

// An update that carried annotations is applied and its answer lost: the retry starts after
// the check run's annotations_count, so no annotation is posted twice; until then the check
// run, ours but unfinished, does not stand as ours.
func TestACutUpdateIsTakenUpAfterTheAnnotationsThatStand(t *testing.T) {
	fake := githubtest.New(nil)
	fake.Update = func(n int, _ githubtest.CheckRun) githubtest.Behavior {
		return githubtest.Behavior{Cut: n == 1}
	}
	p := checksServer(t, fake)
	s := refusing(120)
	if err := p.Publish(context.Background(), s); err == nil || !publish.Unknown(err) {
		t.Fatalf("first publication: %v, want an unknown outcome", err)
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingNone {
		t.Fatalf("unfinished check run stands as %v (%v), want none", st, err)
	}
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatalf("retry: %v", err)
	}
	noViolations(t, fake)
	runs := fake.Runs(s.Repository, s.SHA)
	if len(runs) != 1 || len(runs[0].Annotations) != 120 {
		t.Fatalf("%d check runs, annotations %d; want 1 with 120", len(runs), len(runs[0].Annotations))
	}
	for i, a := range runs[0].Annotations {
		if want := fmt.Sprintf("secrets/%04d.pem", i); a.Path != want {
			t.Fatalf("annotation %d on %s, want %s", i, a.Path, want)
		}
	}
}

// What stands on the commit under the context: nothing; this delivery's check run; another
// delivery's newer one (a re-run) listed after it. GitHub's listing order is not relied on.
func TestCheckRunStanding(t *testing.T) {
	fake := githubtest.New(nil)
	p := checksServer(t, fake)
	s := refusing(3)
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingNone {
		t.Fatalf("before: %v %v", st, err)
	}
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOurs {
		t.Fatalf("after: %v %v", st, err)
	}
	newer := refusing(0)
	newer.State, newer.ExternalID = "success", strings.Repeat("a", 64)
	if err := p.Publish(context.Background(), newer); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOther {
		t.Fatalf("after a newer delivery's check run: %v %v", st, err)
	}
	if st, err := p.Standing(context.Background(), newer); err != nil || st != publish.StandingOurs {
		t.Fatalf("the newer delivery: %v %v", st, err)
	}
	noViolations(t, fake)
}

// A 401 answers an installation token GitHub no longer takes (revoked, or expired early): the
// publisher forgets it and sends the request once more with a new token (a 401 is answered
// before anything is applied). A second 401 is the operator's: no third request.
func TestA401ForgetsTheInstallationTokenAndRetriesOnce(t *testing.T) {
	for name, accepted := range map[string]string{"the new token is taken": "token-7-1", "no token is taken": "none"} {
		t.Run(name, func(t *testing.T) {
			fake := githubtest.New(func(tok string) bool { return tok == accepted })
			srv := httptest.NewServer(fake)
			defer srv.Close()
			tokens := &installationTokens{}
			p := publish.NewGitHubChecks(srv.URL, tokens, srv.Client())
			err := p.Publish(context.Background(), refusing(1))
			if accepted == "none" {
				if publish.ClassOf(err) != publish.Operator || fake.Unauthorized() != 2 || len(tokens.forgotten) != 1 {
					t.Fatalf("%v (class %v) after %d 401s, %v forgotten; want an operator's error after 2", err, publish.ClassOf(err),
						fake.Unauthorized(), tokens.forgotten)
				}
				return
			}
			if err != nil || fake.Unauthorized() != 1 || len(tokens.forgotten) != 1 || tokens.forgotten[0] != "token-7-0" {
				t.Fatalf("%v after %d 401s, forgotten %v", err, fake.Unauthorized(), tokens.forgotten)
			}
			if len(fake.Runs("octo-org/octo-repo", sha)) != 1 {
				t.Fatalf("%d check runs, want 1", len(fake.Runs("octo-org/octo-repo", sha)))
			}
			noViolations(t, fake)
		})
	}
}

// The status publisher with an App: each status posts with its installation's token, a 401
// is retried once with a new one, and a verdict whose webhook named no installation is the
// operator's to fix, with nothing sent.
func TestGitHubStatusesWithAnApp(t *testing.T) {
	fake := githubtest.New(githubtest.Token("token-7-1"))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tokens := &installationTokens{}
	g := publish.NewGitHubApp(srv.URL, tokens, srv.Client())
	s := st()
	s.Installation = 7
	if err := g.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if len(fake.Created(s.Repository, sha)) != 1 || len(tokens.forgotten) != 1 {
		t.Fatalf("%d statuses, forgotten %v", len(fake.Created(s.Repository, sha)), tokens.forgotten)
	}
	if st, err := g.Standing(context.Background(), s); err != nil || st != publish.StandingOurs {
		t.Fatalf("standing %v %v", st, err)
	}
	s.Installation = 0
	asked := tokens.asked
	for _, err := range []error{g.Publish(context.Background(), s), publish.NewGitHubChecks(srv.URL, tokens, srv.Client()).Publish(context.Background(), refusingWithout())} {
		if !errors.Is(err, github.ErrNoInstallation) || publish.ClassOf(err) != publish.Operator || publish.Unknown(err) {
			t.Fatalf("no installation: %v (class %v)", err, publish.ClassOf(err))
		}
	}
	if tokens.asked != asked || fake.Posts() != 1 {
		t.Fatalf("a verdict without an installation asked for %d tokens and posted %d times", tokens.asked-asked, fake.Posts()-1)
	}
}

func refusingWithout() publish.Status {
	s := refusing(1)
	s.Installation = 0
	return s
}
