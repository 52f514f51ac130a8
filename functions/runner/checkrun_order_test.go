package runner_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
)

// A checks API that applies creates only after the runner gave up on them, in the worst
// order: the newer verdict's check run first, then the older one's, which GitHub numbers after
// it and so shows. The newer verdict, read back once both have settled, finds the older one's
// standing over its own: updating its own check run in place would leave the older verdict
// shown, so it creates another, which stands. The older verdict is superseded.
func TestChecksCreatedAfterTheClientGaveUpInTheWorstOrderLeaveTheNewestStanding(t *testing.T) {
	checks := githubtest.New(nil)
	held := map[string]chan struct{}{"failure": make(chan struct{}), "success": make(chan struct{})}
	var mu sync.Mutex
	first := map[string]bool{}
	checks.Create = func(_ int, r githubtest.CheckRun) githubtest.Behavior {
		mu.Lock()
		hold := !first[r.Conclusion]
		first[r.Conclusion] = true
		mu.Unlock()
		if hold {
			<-held[r.Conclusion] // created once let go, long after the client gave up
		}
		return githubtest.Behavior{}
	}
	w := newChecksWorld(t, checks)
	var letGo sync.Once
	t.Cleanup(func() { letGo.Do(func() { close(held["failure"]); close(held["success"]) }) })
	opened := w.pullRequestFromApp(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequestFromApp(goodTitle, epoch.Add(-time.Minute))
	r := w.checksRunner("a", titleRule, 100*time.Millisecond)
	var retry time.Time
	for _, m := range []queue.Message{opened, edited} {
		res, _ := r.Process(context.Background(), m)
		if res.Done {
			t.Fatalf("delivery %s was done although its create's outcome is unknown", m.Key.Short())
		}
		retry = res.RetryAt
	}
	land := func(conclusion string, n int) {
		close(held[conclusion])
		waitFor(t, fmt.Sprintf("the held %s create to land (%d check runs)", conclusion, n), func() bool {
			return len(checks.Runs(commitRepo, headSHA)) >= n
		})
	}
	letGo.Do(func() {
		land("success", 1) // the newer verdict's create lands first,
		land("failure", 2) // the older one's after it
	})
	if retry.After(w.clock.Now()) {
		w.clock.Set(retry)
	}
	w.process(r, edited)
	w.process(r, opened)
	if v := checks.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	got, ok := checks.LatestRun(commitRepo, headSHA, statusCtx)
	if !ok || got.Conclusion != "success" || got.ExternalID != edited.Key.String() {
		t.Fatalf("the commit shows %q from delivery %.8s, want success from %s; check runs: %+v", got.Conclusion, got.ExternalID,
			edited.Key.Short(), checks.Runs(commitRepo, headSHA))
	}
	if n := len(checks.Runs(commitRepo, headSHA)); n != 3 {
		t.Fatalf("%d check runs, want 3 (each verdict's first, and the newer one's again over the older)", n)
	}
	w.wantSuperseded(opened, edited)
}

// Another App posts a check run of the same name on the commit after this verdict's create,
// whose answer was lost, was applied. Read back once settled, the verdict finds the other
// App's standing: it creates its check run once more, over it, and is done: no loop, no
// second attempt once its check run stands.
func TestAnotherAppsCheckRunOfTheNameIsCoveredOnceWithoutALoop(t *testing.T) {
	checks := githubtest.New(nil)
	checks.Create = func(n int, _ githubtest.CheckRun) githubtest.Behavior {
		if n == 1 {
			return githubtest.Behavior{Delay: 400 * time.Millisecond, ApplyFirst: true}
		}
		return githubtest.Behavior{}
	}
	w := newChecksWorld(t, checks)
	edited := w.pullRequestFromApp(goodTitle, epoch.Add(-time.Minute))
	r := w.checksRunner("a", titleRule, 100*time.Millisecond)
	res, _ := r.Process(context.Background(), edited)
	if res.Done {
		t.Fatal("done although the create's answer was lost")
	}
	waitFor(t, "the lost create to land", func() bool { return len(checks.Runs(commitRepo, headSHA)) >= 1 })
	other := `{"name":"` + statusCtx + `","head_sha":"` + headSHA + `","external_id":"another-app","status":"completed",` +
		`"conclusion":"failure","output":{"title":"t","summary":"s"}}`
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/repos/"+commitRepo+"/check-runs", strings.NewReader(other))
	req.Header.Set("Authorization", "Bearer another-apps-token")
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.srv.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the other App's check run: %v %v", resp, err)
	}
	resp.Body.Close()
	w.process(r, edited)
	if v := checks.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	got, ok := checks.LatestRun(commitRepo, headSHA, statusCtx)
	if !ok || got.ExternalID != edited.Key.String() || got.Conclusion != "success" {
		t.Fatalf("the commit shows %q from %q, want success from %s", got.Conclusion, got.ExternalID, edited.Key.Short())
	}
	if n := checks.Creates(); n != 3 {
		t.Fatalf("%d creates, want 3 (the verdict's, the other App's, the verdict's once more)", n)
	}
	if res, _ := r.Process(context.Background(), edited); !res.Done {
		t.Fatal("the published delivery is not done")
	}
	if n := checks.Creates(); n != 3 {
		t.Fatalf("%d creates after the delivery was done, want 3", n)
	}
}
