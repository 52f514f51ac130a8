package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// Gitea, Forgejo and GitLab routes, end to end: a webhook's body is read as the ingress reads
// it and admitted, the runner builds the route from its configuration (the provider table's
// reader and publisher, reading with the publish token), reads what the rules need and the
// webhook lacks from the fake provider (which checks every request against the provider's
// published API description), and posts the verdict to it.

// forgeCommit is the made-up hash of commit n of a forge world.
func forgeCommit(n int) string { return fmt.Sprintf("%040x", 0xf000+n) }

// forgeFake is a fake provider as a forge world drives it: a history of commits, each adding
// files, pull requests over them, and the statuses posted.
type forgeFake interface {
	http.Handler
	commit(n int, message string, files ...string) // commit n, on commit n-1
	pull(number int, title string, base, head int)
	branch(name string, at int)
	refuseReads(code int)
	latest(sha string) (state, description string, ok bool)
	violations() []string
}

// forgeKind is one provider as a route names it: its fake, its configuration, its webhooks.
type forgeKind struct {
	name    string // the route's provider
	fake    func() forgeFake
	publish string // the route's publish.provider
	// push is the body of a push from commit before to head, listing its newest listed commits.
	push func(before, head, listed int, message func(int) string, files func(int) []string) (http.Header, []byte)
	// pull is the body of an update of pull request number, whose head is commit head.
	pull func(number int, title string, head int) (http.Header, []byte)
	// failed is the state a failed verdict shows; grant what a refused read names.
	failed, grant string
}

const forgeRepo = "acme/app"

var forgeKinds = []forgeKind{
	{name: "gitea", fake: newGiteaForge, publish: "gitea", push: giteaPush("X-Gitea-Event"), pull: giteaPull("X-Gitea-Event"),
		failed: "failure", grant: "grant the token the read:repository scope"},
	{name: "forgejo", fake: newGiteaForge, publish: "gitea", push: giteaPush("X-Forgejo-Event"), pull: giteaPull("X-Forgejo-Event"),
		failed: "failure", grant: "Forgejo answered 403; grant the token the read:repository scope"},
	{name: "gitlab", fake: newGitLabForge, publish: "gitlab", push: gitlabPush, pull: gitlabPull,
		failed: "failed", grant: "GitLab answered 403; grant the token the read_api scope"},
}

// giteaPush is a Gitea (or Forgejo) push's body: the newest listed commits, and total_commits.
func giteaPush(header string) func(before, head, listed int, message func(int) string, files func(int) []string) (http.Header, []byte) {
	return func(before, head, listed int, message func(int) string, files func(int) []string) (http.Header, []byte) {
		var commits []map[string]any
		for n := head; n > head-listed; n-- { // Gitea lists the newest first
			commits = append(commits, map[string]any{"id": forgeCommit(n), "message": message(n), "added": files(n), "removed": []string{}, "modified": []string{}})
		}
		b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": forgeCommit(before), "after": forgeCommit(head),
			"commits": commits, "total_commits": head - before, "repository": map[string]any{"full_name": forgeRepo}})
		h := http.Header{}
		h.Set(header, "push")
		return h, b
	}
}

func giteaPull(header string) func(number int, title string, head int) (http.Header, []byte) {
	return func(number int, title string, head int) (http.Header, []byte) {
		b, _ := json.Marshal(map[string]any{"action": "synchronized", "number": number, "repository": map[string]any{"full_name": forgeRepo},
			"pull_request": map[string]any{"number": number, "title": title, "head": map[string]any{"sha": forgeCommit(head), "ref": "changes"},
				"base": map[string]any{"ref": "main"}}})
		h := http.Header{}
		h.Set(header, "pull_request")
		return h, b
	}
}

// gitlabPush is a GitLab push's body: the newest listed commits (GitLab lists 20), oldest first,
// and total_commits_count.
func gitlabPush(before, head, listed int, message func(int) string, files func(int) []string) (http.Header, []byte) {
	var commits []map[string]any
	for n := head - listed + 1; n <= head; n++ {
		commits = append(commits, map[string]any{"id": forgeCommit(n), "message": message(n), "added": files(n), "removed": []string{}, "modified": []string{}})
	}
	b, _ := json.Marshal(map[string]any{"object_kind": "push", "ref": "refs/heads/main", "before": forgeCommit(before), "after": forgeCommit(head),
		"checkout_sha": forgeCommit(head), "total_commits_count": head - before, "commits": commits,
		"project": map[string]any{"path_with_namespace": forgeRepo}})
	return http.Header{}, b
}

func gitlabPull(number int, title string, head int) (http.Header, []byte) {
	b, _ := json.Marshal(map[string]any{"object_kind": "merge_request", "project": map[string]any{"path_with_namespace": forgeRepo},
		"object_attributes": map[string]any{"iid": number, "title": title, "action": "update", "target_branch": "main", "source_branch": "changes",
			"last_commit": map[string]any{"id": forgeCommit(head)}}})
	return http.Header{}, b
}

// giteaForge adapts giteatest.
type giteaForge struct{ *giteatest.Gitea }

func newGiteaForge() forgeFake {
	return giteaForge{giteatest.New(func(tok string) bool { return tok == "forge-token" })}
}

func (g giteaForge) commit(n int, message string, files ...string) {
	var fs []giteatest.File
	for _, f := range files {
		fs = append(fs, giteatest.File{Filename: f, Status: "added"})
	}
	g.AddCommit(forgeRepo, giteatest.Commit{SHA: forgeCommit(n), Parent: forgeCommit(n - 1), Message: message, Files: fs})
}

func (g giteaForge) pull(number int, title string, base, head int) {
	g.AddPull(forgeRepo, giteatest.Pull{Number: number, Title: title, Base: "main", Head: "changes", BaseSHA: forgeCommit(base), HeadSHA: forgeCommit(head)})
}

func (g giteaForge) branch(name string, at int) { g.SetBranch(forgeRepo, name, forgeCommit(at)) }

func (g giteaForge) refuseReads(code int) {
	g.Answer = func(string, int) int { return code }
}

func (g giteaForge) latest(sha string) (string, string, bool) {
	s, ok := g.Latest(forgeRepo, sha, "amiss")
	return s.State, s.Description, ok
}

func (g giteaForge) violations() []string { return g.Violations() }

// gitlabForge adapts gitlabtest.
type gitlabForge struct{ *gitlabtest.GitLab }

func newGitLabForge() forgeFake {
	return gitlabForge{gitlabtest.New(func(tok string) bool { return tok == "forge-token" })}
}

func (g gitlabForge) commit(n int, message string, files ...string) {
	var fs []gitlabtest.File
	for _, f := range files {
		fs = append(fs, gitlabtest.File{Path: f, Status: "added"})
	}
	g.AddCommit(forgeRepo, gitlabtest.Commit{SHA: forgeCommit(n), Parent: forgeCommit(n - 1), Message: message, Files: fs})
}

func (g gitlabForge) pull(number int, title string, base, head int) {
	g.AddMergeRequest(forgeRepo, gitlabtest.MergeRequest{IID: number, Title: title, Source: "changes", Target: "main",
		BaseSHA: forgeCommit(base), HeadSHA: forgeCommit(head)})
}

func (g gitlabForge) branch(name string, at int) { g.SetBranch(forgeRepo, name, forgeCommit(at)) }

func (g gitlabForge) refuseReads(code int) {
	g.Answer = func(string, int) int { return code }
}

func (g gitlabForge) latest(sha string) (string, string, bool) {
	s, ok := g.Latest(forgeRepo, sha, "amiss")
	return s.State, s.Description, ok
}

func (g gitlabForge) violations() []string { return g.Violations() }

// forgeSecrets is a secrets source of fixed values.
type forgeSecrets map[string]string

func (s forgeSecrets) Get(_ context.Context, ref string) (string, error) {
	if v, ok := s[ref]; ok {
		return v, nil
	}
	return "", fmt.Errorf("no secret %s", ref)
}

// forgeWorld is a FileLedger, a fake provider on 127.0.0.1, and a runner whose route r is
// built by wiring from a configuration publishing to the fake with its token.
type forgeWorld struct {
	t      *testing.T
	kind   forgeKind
	fake   forgeFake
	l      *localfs.Ledger
	clock  *ledger.ManualClock
	runner *runner.Runner
	seq    atomic.Int64
}

// the route's rules: a conventional title, capitalised commit messages, no secrets.
const forgeRules = `{pull_request_title: "^feat: ", commit_message: "^[A-Z]", forbidden_paths: ["secrets/**"]}`

func newForgeWorld(t *testing.T, kind forgeKind, rules string) *forgeWorld {
	t.Helper()
	w := &forgeWorld{t: t, kind: kind, fake: kind.fake(), clock: ledger.NewManualClock(epoch)}
	srv := httptest.NewServer(w.fake)
	t.Cleanup(srv.Close)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: w.clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w.l = l
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
routes:
  r:
    provider: %s
    secrets: [{id: a, from: "env:HOOK"}]
    repositories: [%q]
    rules: %s
    publish: {provider: %s, base_url: %q, token: {from: "env:TOKEN"}}
`, kind.name, forgeRepo, rules, kind.publish, srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	w.runner = &runner.Runner{Ledger: l, Owner: "a", Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond, RetryDelay: time.Second,
		Now: w.clock.Now, Routes: wiring.Routes(cfg, forgeSecrets{"env:TOKEN": "forge-token", "env:HOOK": "h"}, srv.Client(), nil)}
	return w
}

// deliver reads a webhook's body as the ingress does, admits it on route r and processes it
// until it is done.
func (w *forgeWorld) deliver(h http.Header, body []byte) change.Change {
	w.t.Helper()
	s, err := only(provider.Extract(w.kind.name, h, body))
	if err != nil {
		w.t.Fatalf("extract: %v", err)
	}
	b, _ := json.Marshal(s)
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "forge", Identity: fmt.Sprint(w.seq.Add(1)),
		BodyDigest: ledger.SumBody(body)}, Change: b}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.t.Fatalf("admit: %+v %v", a, err)
	}
	drive(w.t, &world{l: w.l, clock: w.clock, msg: queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}}, w.runner, 10)
	if v := w.fake.violations(); len(v) > 0 {
		w.t.Fatalf("requests outside %s's API description: %v", w.kind.name, v)
	}
	return s
}

// verdict is the status commit n shows.
func (w *forgeWorld) verdict(n int) (state, description string) {
	w.t.Helper()
	state, description, ok := w.fake.latest(forgeCommit(n))
	if !ok {
		w.t.Fatalf("no status on commit %d", n)
	}
	return state, description
}

func capitalised(n int) string { return fmt.Sprintf("Change %d", n) }

func oneFile(n int) []string { return []string{fmt.Sprintf("src/f%d.go", n)} }

// history adds commits 1..n, commit n's message and files as message and files give them.
func (w *forgeWorld) history(n int, message func(int) string, files func(int) []string) {
	for i := 1; i <= n; i++ {
		w.fake.commit(i, message(i), files(i)...)
	}
	w.fake.branch("main", 0)
}

// forEachForge runs test for each of gitea, forgejo and gitlab.
func forEachForge(t *testing.T, test func(t *testing.T, kind forgeKind)) {
	for _, kind := range forgeKinds {
		t.Run(kind.name, func(t *testing.T) { test(t, kind) })
	}
}

// A push adding a forbidden file fails: when its webhook lists the commit, and when only the
// provider's API shows it (the webhook listed the newest commits of the push, Gitea 5, GitLab
// 20, and the file came in an older one).
func TestForgePushesAddingAForbiddenFileFail(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		files := func(n int) []string {
			if n == 2 {
				return []string{"secrets/prod.env"}
			}
			return oneFile(n)
		}
		w := newForgeWorld(t, kind, forgeRules)
		w.history(30, capitalised, files)
		w.deliver(kind.push(1, 3, 2, capitalised, files)) // listed whole: commits 2 and 3
		if state, desc := w.verdict(3); state != kind.failed || !strings.Contains(desc, "forbidden path secrets/prod.env") {
			t.Fatalf("a push listing the file: %s %q", state, desc)
		}
		s := w.deliver(kind.push(0, 30, 5, capitalised, files)) // the webhook lists 26..30
		if s.Whole.Has(change.PathsInput) {
			t.Fatal("the webhook's change holds the paths whole: the test's premise is gone")
		}
		if state, desc := w.verdict(30); state != kind.failed || !strings.Contains(desc, "forbidden path secrets/prod.env") {
			t.Fatalf("a push whose webhook does not list the file: %s %q", state, desc)
		}
	})
}

// A pull request adding a forbidden file fails (no pull request webhook names its files).
func TestForgePullRequestsAddingAForbiddenFileFail(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		w := newForgeWorld(t, kind, forgeRules)
		w.history(3, capitalised, func(n int) []string {
			if n == 3 {
				return []string{"src/a.go", "secrets/key.pem"}
			}
			return oneFile(n)
		})
		w.fake.pull(9, "feat: add the key", 0, 3)
		w.deliver(kind.pull(9, "feat: add the key", 3))
		if state, desc := w.verdict(3); state != kind.failed || !strings.Contains(desc, "forbidden path secrets/key.pem") {
			t.Fatalf("%s %q", state, desc)
		}
	})
}

// A pull request one of whose commits breaks the commit-message rule fails, naming it; so does
// a push whose bad message only the API shows.
func TestForgeCommitsWhoseMessageBreaksTheRuleFail(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		message := func(n int) string {
			if n == 2 {
				return "lowercase, against the rule"
			}
			return capitalised(n)
		}
		w := newForgeWorld(t, kind, forgeRules)
		w.history(30, message, oneFile)
		w.fake.pull(9, "feat: the change", 0, 4)
		w.deliver(kind.pull(9, "feat: the change", 4))
		if state, desc := w.verdict(4); state != kind.failed || !strings.Contains(desc, "commit message of "+forgeCommit(2)[:12]) {
			t.Fatalf("pull request: %s %q", state, desc)
		}
		w.deliver(kind.push(0, 30, 5, message, oneFile))
		if state, desc := w.verdict(30); state != kind.failed || !strings.Contains(desc, "commit message of "+forgeCommit(2)[:12]) {
			t.Fatalf("push: %s %q", state, desc)
		}
	})
}

// A clean push (also one only partly listed) and a clean pull request succeed.
func TestForgeCleanPushesAndPullRequestsSucceed(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		w := newForgeWorld(t, kind, forgeRules)
		w.history(30, capitalised, oneFile)
		w.deliver(kind.push(0, 30, 5, capitalised, oneFile))
		w.fake.pull(9, "feat: the change", 20, 28)
		w.deliver(kind.pull(9, "feat: the change", 28))
		for _, n := range []int{30, 28} {
			if state, desc := w.verdict(n); state != "success" || desc != "all rules hold" {
				t.Fatalf("commit %d: %s %q", n, state, desc)
			}
		}
	})
}

// A read the provider refuses (a token without the scope) fails the rules that need it
// closed, naming the scope to grant; a rule that needs no read still holds or fails on what
// the webhook carried.
func TestForgeARefusedReadFailsClosedNamingWhatToGrant(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		w := newForgeWorld(t, kind, forgeRules)
		w.history(3, capitalised, oneFile)
		w.fake.pull(9, "fix: not a feature", 0, 3)
		w.fake.refuseReads(http.StatusForbidden)
		w.deliver(kind.pull(9, "fix: not a feature", 3))
		state, desc := w.verdict(3)
		bothUnread := strings.Contains(desc, "commit messages, changed paths (could not be read: ") ||
			strings.Contains(desc, "commit messages (could not be read: ") && strings.Contains(desc, "changed paths (could not be read: ")
		if state != kind.failed || !bothUnread || !strings.Contains(desc, kind.grant) || !strings.Contains(desc, "pull request title") {
			t.Fatalf("%s %q", state, desc)
		}
	})
}

// A route whose rules need nothing the webhook lacks reads nothing: a title rule on a pull
// request.
func TestForgeATitleRuleReadsNothing(t *testing.T) {
	forEachForge(t, func(t *testing.T, kind forgeKind) {
		w := newForgeWorld(t, kind, `{pull_request_title: "^feat: "}`)
		w.history(3, capitalised, oneFile)
		w.fake.pull(9, "feat: x", 0, 3)
		w.fake.refuseReads(http.StatusForbidden) // a read would fail the verdict
		w.deliver(kind.pull(9, "feat: x", 3))
		if state, desc := w.verdict(3); state != "success" {
			t.Fatalf("%s %q", state, desc)
		}
	})
}
