package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/ledger"
)

// signedPullRequest sends a GitHub pull_request webhook for PR 7 on head sha, with title and
// GitHub's updated_at, to the server at addr.
func signedPullRequest(t *testing.T, addr, sha, title string, updatedAt time.Time) {
	t.Helper()
	body := fmt.Sprintf(`{"action":"edited","number":7,"pull_request":{"number":7,"title":%q,"updated_at":%q,`+
		`"head":{"sha":%q,"ref":"feature","repo":{"pushed_at":null}},"base":{"ref":"main"}},"repository":{"full_name":"acme/app"}}`,
		title, updatedAt.UTC().Format(time.RFC3339), sha)
	if code, answer := postSigned(t, addr, "pull_request", body); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("webhook %q: %d %s", title, code, answer)
	}
}

// Two amiss serve processes on one root take the edits of one pull request, in a shuffled
// order, from a provider that answers slowly, refuses some posts and sometimes applies a post
// only after amiss gave up on it; one of them is killed with SIGKILL in the middle and
// started again. The status left standing on the commit is the newest edit's verdict, and
// every delivery ends done or superseded. (The newest edit breaks the rule and the older ones
// mostly follow it, so an older verdict left standing shows.)
func TestTwoServeProcessesLeaveTheNewestVerdictStanding(t *testing.T) {
	const edits = 8
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var rngMu sync.Mutex // the stand-in's handlers draw from rng while the test does
	intN := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	gh := githubtest.New(githubtest.Token("gh-token"))
	gh.Post = func(n int, _ githubtest.Created) githubtest.Behavior {
		switch intN(6) {
		case 0:
			return githubtest.Behavior{Code: http.StatusServiceUnavailable}
		case 1:
			return githubtest.Behavior{Delay: 1500 * time.Millisecond, ApplyFirst: true} // answered after the timeout
		case 2:
			return githubtest.Behavior{Delay: 1500 * time.Millisecond} // applied after amiss gave up
		}
		return githubtest.Behavior{Delay: time.Duration(intN(200)) * time.Millisecond}
	}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	dir := t.TempDir()
	cfg := githubRouteConfig(t, dir, srv.URL, `rules: {pull_request_title: "^feat: "}`, "context: amiss/title, timeout: 1s, settle: 2s")
	root := filepath.Join(dir, "root")
	args := []string{"-config", cfg, "-root", root, "-listen", "127.0.0.1:0", "-workers", "2", "-lease", "4s",
		"-cleanup-every", "1h", "-stranded-after", "1h", "-grace", "1s"}
	procs := []*child{startServeProcess(t, args...), startServeProcess(t, args...)}
	sha := fmt.Sprintf("%040x", 0xfeed)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	rngMu.Lock()
	order := rng.Perm(edits)
	rngMu.Unlock()
	for i, e := range order {
		title := fmt.Sprintf("feat: edit %d", e) // the older edits follow the rule...
		if e%3 == 1 || e == edits-1 {
			title = fmt.Sprintf("wip %d", e) // ...but some, and the newest, break it
		}
		signedPullRequest(t, procs[i%2].addr, sha, title, t0.Add(time.Duration(e)*time.Minute))
		time.Sleep(time.Duration(intN(400)) * time.Millisecond) // some are posted before the next arrives
		if i == edits/2 {
			procs[0].cmd.Process.Signal(syscall.SIGKILL)
			procs[0].cmd.Wait()
			procs[0] = startServeProcess(t, args...)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st := rowStates(t, root)
		if st[ledger.StateDone]+st[ledger.StateSuperseded] == edits {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every edit ended published or superseded: %v", st)
		}
	}
	if v := gh.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	// What a user sees, once every post amiss gave up on has landed.
	time.Sleep(2 * time.Second)
	got, ok := gh.Latest("acme/app", sha, "amiss/title")
	if !ok || got.State != "failure" {
		t.Fatalf("the commit shows %+v, want the newest edit's failure; statuses created: %+v", got, gh.Created("acme/app", sha))
	}
	t.Logf("order %v: %d statuses created, %d POSTs", order, len(gh.Created("acme/app", sha)), gh.Posts())
}
