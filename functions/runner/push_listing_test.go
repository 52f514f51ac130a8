package runner_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// A push whose webhook lists commits that are not the ones it brings to its branch, end to end:
// the webhook is read as the ingress reads it, and the runner reads the push from the fake
// provider's API, so a forbidden path the listing left out still fails the push.

// githubForge adapts githubtest to a forge world.
type githubForge struct{ *githubtest.GitHub }

func newGitHubForge() forgeFake {
	return githubForge{githubtest.New(func(tok string) bool { return tok == "forge-token" })}
}

func (g githubForge) commit(n int, message string, files ...string) {
	var fs []githubtest.ChangedFile
	for _, f := range files {
		fs = append(fs, githubtest.ChangedFile{Filename: f, Status: "added"})
	}
	g.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(n), Parent: forgeCommit(n - 1), Message: message, Files: fs})
}

func (g githubForge) pull(number int, title string, base, head int) {
	g.AddPull(forgeRepo, githubtest.HistoryPull{Number: number, Title: title, Base: "main", Head: "changes",
		BaseSHA: forgeCommit(base), HeadSHA: forgeCommit(head)})
}

func (g githubForge) branch(name string, at int) { g.SetBranch(forgeRepo, name, forgeCommit(at)) }

func (g githubForge) refuseReads(code int) { g.Answer = func(string, int) int { return code } }

func (g githubForge) latest(sha string) (string, string, bool) {
	s, ok := g.Latest(forgeRepo, sha, "amiss")
	return s.State, s.Description, ok
}

func (g githubForge) violations() []string { return g.Violations() }

var githubKind = forgeKind{name: "github", fake: newGitHubForge, publish: "github", failed: "failure"}

// githubPushBody is a GitHub push webhook's body moving ref from before to head, listing
// commits (GitHub's: those new to the repository).
func githubPushBody(ref, before string, head int, created bool, commits ...int) (http.Header, []byte) {
	return githubPush(ref, before, head, created, false, commits...)
}

// githubPush is githubPushBody, forced or not.
func githubPush(ref, before string, head int, created, forced bool, commits ...int) (http.Header, []byte) {
	listed := []map[string]any{}
	for _, n := range commits {
		listed = append(listed, map[string]any{"id": forgeCommit(n), "distinct": true, "message": capitalised(n),
			"added": oneFile(n), "removed": []string{}, "modified": []string{}})
	}
	b, _ := json.Marshal(map[string]any{"ref": ref, "before": before, "after": forgeCommit(head), "created": created,
		"deleted": false, "forced": forced, "commits": listed, "head_commit": map[string]any{"id": forgeCommit(head)},
		"repository": map[string]any{"full_name": forgeRepo, "default_branch": "main"}})
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	return h, b
}

// Commit 2 adds secrets/prod.pem and was pushed first to a scratch branch. GitHub's webhooks
// for main fast-forwarded to it, and for a release branch created at it, list no commit: the
// runner reads what each brings (main's comparison from commit 1; release's from the default
// branch) and fails both on the file.
func TestAGitHubPushOfACommitPushedBeforeFailsOnItsForbiddenFile(t *testing.T) {
	files := func(n int) []string {
		if n == 2 {
			return []string{"secrets/prod.pem"}
		}
		return oneFile(n)
	}
	for _, c := range []struct {
		name string
		push func() (http.Header, []byte)
	}{
		{"main fast-forwarded from commit 1", func() (http.Header, []byte) {
			return githubPushBody("refs/heads/main", forgeCommit(1), 2, false)
		}},
		{"release created at commit 2", func() (http.Header, []byte) {
			return githubPushBody("refs/heads/release", strings.Repeat("0", 40), 2, true)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newForgeWorld(t, githubKind, forgeRules)
			w.history(2, capitalised, files)
			w.fake.branch("main", 1)
			w.fake.branch("scratch", 2)
			w.deliver(c.push())
			if state, desc := w.verdict(2); state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.pem") {
				t.Fatalf("%s %q, want a failure naming secrets/prod.pem", state, desc)
			}
		})
	}
	// A push listing its head, neither forced nor creating its branch, is evaluated on the
	// commits its webhook lists; its paths are read from its comparison, one request.
	w := newForgeWorld(t, githubKind, forgeRules)
	w.history(3, capitalised, oneFile)
	w.fake.branch("main", 3)
	s := w.deliver(githubPushBody("refs/heads/main", forgeCommit(2), 3, false, 3))
	if !s.Whole.Has(change.CommitsInput) {
		t.Fatalf("a push of one new commit holds %q whole", s.Whole)
	}
	if state, desc := w.verdict(3); state != "success" {
		t.Fatalf("a clean push: %s %q", state, desc)
	}
	if n := w.fake.(githubForge).Requests(githubtest.OpCompareCommits); n != 1 {
		t.Fatalf("%d comparisons read for a push of one new commit, want 1", n)
	}
}

// A Gitea instance whose [ui] FEED_MAX_COMMIT_NUM is 10 or more lists every commit of the
// newest 10 its webhook counts for a new branch: those of the head's history, not what the
// branch brings. A release branch bringing commits 1 to 12 lists 3 to 12, 10 of 10; commit 2
// added secrets/prod.env. The runner reads what the branch brings to main, and fails it.
func TestAGiteaBranchCreatedWithMoreThanTenCommitsFailsOnAForbiddenFileInTheOldest(t *testing.T) {
	files := secretsAt(2)
	for _, c := range giteaPushers {
		kind := c.kind
		t.Run(kind.name, func(t *testing.T) {
			w := newForgeWorld(t, kind, forgeRules)
			w.history(12, capitalised, files)
			var commits []map[string]any
			for n := 12; n > 2; n-- { // newest first
				commits = append(commits, map[string]any{"id": forgeCommit(n), "message": capitalised(n), "added": files(n),
					"removed": []string{}, "modified": []string{}})
			}
			b, _ := json.Marshal(map[string]any{"ref": "refs/heads/release", "before": strings.Repeat("0", 40), "after": forgeCommit(12),
				"commits": commits, "total_commits": 10, "repository": map[string]any{"full_name": forgeRepo}})
			if state, desc := w.deliverPush(c.header, b, 12); state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.env") {
				t.Fatalf("%s %q, want a failure naming secrets/prod.env", state, desc)
			}
		})
	}
}

// A GitHub push whose comparison brings 300 files or more (GitHub gives a comparison's first
// 300), end to end: a branch force-pushed with its 4 commits rebased, and a release branch
// created with them, each commit adding 100 files under docs/. The runner reads the push's
// commits one by one: with secrets/prod.pem added in the last commit, past the comparison's
// 300 files, the push fails naming it; without it, the push passes.
func TestAGitHubPushOfMoreFilesThanItsComparisonGivesIsReadCommitByCommit(t *testing.T) {
	pushes := []struct {
		name string
		push func() (http.Header, []byte)
	}{
		{"forced over a rewritten commit", func() (http.Header, []byte) {
			return githubPush("refs/heads/feature", forgeCommit(90), 5, false, true)
		}},
		{"creating a release branch", func() (http.Header, []byte) {
			return githubPush("refs/heads/release", strings.Repeat("0", 40), 5, true, false)
		}},
	}
	for _, p := range pushes {
		for _, forbidden := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, forbidden file %v", p.name, forbidden), func(t *testing.T) {
				w := newForgeWorld(t, githubKind, forgeRules)
				w.history(1, capitalised, oneFile)
				w.fake.branch("main", 1)
				// The branch's head before the forced push: a commit the push drops.
				w.fake.(githubForge).AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(90), Parent: forgeCommit(1), Message: "Dropped"})
				for n := 2; n <= 5; n++ {
					files := hundredDocs(n)
					if n == 5 && forbidden {
						files = append(files, "secrets/prod.pem")
					}
					w.fake.commit(n, capitalised(n), files...)
				}
				w.deliver(p.push())
				state, desc := w.verdict(5)
				if forbidden && (state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.pem") || strings.Contains(desc, "could not be read")) {
					t.Fatalf("%s %q, want a failure naming secrets/prod.pem alone", state, desc)
				}
				if !forbidden && state != "success" {
					t.Fatalf("%s %q, want success: the push's 400 files are harmless", state, desc)
				}
				pages := 4 // a page of 100 files for each of the push's commits
				if forbidden {
					pages++ // the last commit's 101st file
				}
				if n := w.fake.(githubForge).Requests(githubtest.OpGetCommit); n != pages {
					t.Fatalf("%d reads of commits, want %d", n, pages)
				}
			})
		}
	}
}

// A GitHub push whose comparison GitHub cuts, and that brings more commits than amiss reads one
// by one, fails closed, naming the bound.
func TestAGitHubPushOfMoreCommitsThanAmissReadsOneByOneFailsClosed(t *testing.T) {
	w := newForgeWorld(t, githubKind, forgeRules)
	last := github.MaxPushCommitsRead + 2 // commits 2 to last, one more than the bound
	w.history(1, capitalised, oneFile)
	w.fake.branch("main", 1)
	for n := 2; n <= last; n++ {
		w.fake.commit(n, capitalised(n), hundredDocs(n)[:7]...)
	}
	w.deliver(githubPush("refs/heads/release", strings.Repeat("0", 40), last, true, false))
	state, desc := w.verdict(last)
	if state != "failure" || !strings.Contains(desc, "changed paths (could not be read") ||
		!strings.Contains(desc, fmt.Sprintf("at most %d commits", github.MaxPushCommitsRead)) {
		t.Fatalf("%s %q, want a failure naming amiss's bound", state, desc)
	}
}

// hundredDocs is the 100 files commit n adds under docs/.
func hundredDocs(n int) []string {
	var out []string
	for i := 0; i < 100; i++ {
		out = append(out, fmt.Sprintf("docs/c%d/page%03d.md", n, i))
	}
	return out
}
