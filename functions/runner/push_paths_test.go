package runner_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// What a push changes on its branch, end to end, beyond what its commits change against their
// first parents: a merge taking an older tree back, a branch forced back past a commit, a tag.
// Each restores or brings a forbidden file; none ever succeeds.

// A GitHub push that restores a forbidden file through a merge, end to end. Commit 1 added
// secrets/prod.pem, commit 2 removed it on main; commit 3 merges main into commit 1 with
// "git merge -s ours" (its tree is commit 1's, key included), and main is fast-forwarded to
// it. The webhook lists the merge alone, which changes nothing against its first parent, as
// GitHub lists a commit's files: the runner reads main's comparison from commit 2, which adds
// the key, and fails the push naming it.
func TestAGitHubPushOfAMergeRestoringAForbiddenFileFails(t *testing.T) {
	w := newForgeWorld(t, githubKind, forgeRules)
	gh := w.fake.(githubForge)
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(1), Parent: forgeCommit(0), Message: "Add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}, {Filename: "src/f1.go", Status: "added"}}})
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(2), Parent: forgeCommit(1), Message: "Remove the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(3), Parent: forgeCommit(1), Merged: []string{forgeCommit(2)},
		Message: "Merge branch 'main' into restore"})
	gh.SetBranch(forgeRepo, "main", forgeCommit(3))
	merge := map[string]any{"id": forgeCommit(3), "distinct": true, "message": "Merge branch 'main' into restore",
		"added": []string{}, "removed": []string{}, "modified": []string{}}
	b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": forgeCommit(2), "after": forgeCommit(3), "created": false,
		"deleted": false, "forced": false, "commits": []any{merge}, "head_commit": merge,
		"repository": map[string]any{"full_name": forgeRepo, "default_branch": "main"}})
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	w.deliver(h, b)
	if state, desc := w.verdict(3); state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.pem") {
		t.Fatalf("%s %q, want a failure naming secrets/prod.pem", state, desc)
	}
}

// A GitHub push of a merge restoring a forbidden file, whose comparison GitHub cuts at 300
// files, end to end: main (commit 1) removed secrets/prod.pem; the docs line, begun before the
// removal, adds 300 files in commits 2 to 4, and merges main with "git merge -s ours" (commit
// 5), onto which main fast-forwards. The comparison's 300 files are the docs, the key past
// them; no commit changes it against its first parent. The push fails, its paths unread,
// never succeeds.
func TestAGitHubPushOfAMergeRestoringAForbiddenFilePastTheComparisonsCutFails(t *testing.T) {
	w := newForgeWorld(t, githubKind, forgeRules)
	gh := w.fake.(githubForge)
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(0), Message: "Root",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}}})
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(1), Parent: forgeCommit(0), Message: "Remove the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
	for n := 2; n <= 4; n++ {
		parent := forgeCommit(n - 1)
		if n == 2 {
			parent = forgeCommit(0)
		}
		var fs []githubtest.ChangedFile
		for _, f := range hundredDocs(n) {
			fs = append(fs, githubtest.ChangedFile{Filename: f, Status: "added"})
		}
		gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(n), Parent: parent, Message: capitalised(n), Files: fs})
	}
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(5), Parent: forgeCommit(4), Merged: []string{forgeCommit(1)},
		Message: "Merge branch 'main' into docs"})
	w.deliver(githubPush("refs/heads/main", forgeCommit(1), 5, false, false, 2, 3, 4, 5))
	if state, desc := w.verdict(5); state != "failure" || !strings.Contains(desc, "changed paths (could not be read") {
		t.Fatalf("%s %q, want a failure: the paths could not be read", state, desc)
	}
}

// A GitHub push forcing main back past the commit that removed a forbidden file restores it,
// end to end: commit 1 added secrets/prod.pem, commit 2 removed it, and main is forced from
// commit 2 back to commit 1. The push brings no commit, and fails naming the key.
func TestAGitHubPushForcedBackPastTheRemovalOfAForbiddenFileFails(t *testing.T) {
	w := newForgeWorld(t, githubKind, forgeRules)
	gh := w.fake.(githubForge)
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(1), Parent: forgeCommit(0), Message: "Add the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "added"}}})
	gh.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(2), Parent: forgeCommit(1), Message: "Remove the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
	gh.SetBranch(forgeRepo, "main", forgeCommit(1))
	w.deliver(githubPush("refs/heads/main", forgeCommit(2), 1, false, true))
	if state, desc := w.verdict(1); state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.pem") {
		t.Fatalf("%s %q, want a failure naming secrets/prod.pem", state, desc)
	}
}

// A Gitea or Forgejo tag pushed at a commit that adds a forbidden file, end to end: the webhook
// lists no commit and counts none, as Gitea's does for a new tag. The runner reads what the
// tagged commit brings to the default branch, and fails it: the commit's status is never set
// to success by its tag.
func TestAGiteaTagPushedAtAForbiddenFileFails(t *testing.T) {
	files := secretsAt(2)
	for _, c := range giteaPushers {
		t.Run(c.kind.name, func(t *testing.T) {
			w := newForgeWorld(t, c.kind, forgeRules)
			w.history(2, capitalised, files)
			b, _ := json.Marshal(map[string]any{"ref": "refs/tags/v1.0", "before": strings.Repeat("0", 40), "after": forgeCommit(2),
				"commits": []any{}, "total_commits": 0, "head_commit": map[string]any{"id": forgeCommit(2), "message": capitalised(2)},
				"repository": map[string]any{"full_name": forgeRepo}})
			if state, desc := w.deliverPush(c.header, b, 2); state != "failure" || !strings.Contains(desc, "forbidden path secrets/prod.env") {
				t.Fatalf("%s %q, want a failure naming secrets/prod.env", state, desc)
			}
		})
	}
}

// A Gitea or Forgejo push restoring a forbidden file, end to end, two ways. Commit 1 added
// secrets/prod.env, commit 2 removed it on main. A merge of main into commit 1 made with
// "git merge -s ours" (commit 3, its tree commit 1's), onto which main fast-forwards, lists
// nothing against its first parent; main forced from commit 2 back to commit 1 brings no
// commit. Either restores the key; neither push ever succeeds.
func TestAGiteaPushRestoringAForbiddenFileNeverSucceeds(t *testing.T) {
	for _, c := range giteaPushers {
		for _, p := range []struct {
			name     string
			head     int
			listed   []int
			wantPath bool // the verdict names the key (else it fails its paths unread)
		}{
			{"a merge taking an older tree", 3, []int{3}, false},
			{"forced back past the removal", 1, nil, true},
		} {
			t.Run(c.kind.name+", "+p.name, func(t *testing.T) {
				w := newForgeWorld(t, c.kind, forgeRules)
				g := w.fake.(giteaForge)
				g.AddCommit(forgeRepo, giteatest.Commit{SHA: forgeCommit(1), Parent: forgeCommit(0), Message: "Add the key",
					Files: []giteatest.File{{Filename: "secrets/prod.env", Status: "added"}}})
				g.AddCommit(forgeRepo, giteatest.Commit{SHA: forgeCommit(2), Parent: forgeCommit(1), Message: "Remove the key",
					Files: []giteatest.File{{Filename: "secrets/prod.env", Status: "deleted"}}})
				g.AddCommit(forgeRepo, giteatest.Commit{SHA: forgeCommit(3), Parent: forgeCommit(1), Merged: []string{forgeCommit(2)},
					Message: "Merge branch 'main' into restore"})
				commits := []any{}
				for _, n := range p.listed {
					commits = append(commits, map[string]any{"id": forgeCommit(n), "message": "Merge branch 'main' into restore",
						"added": []string{}, "removed": []string{}, "modified": []string{}})
				}
				b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": forgeCommit(2), "after": forgeCommit(p.head),
					"commits": commits, "total_commits": len(commits), "repository": map[string]any{"full_name": forgeRepo}})
				state, desc := w.deliverPush(c.header, b, p.head)
				if state != "failure" || p.wantPath && !strings.Contains(desc, "forbidden path secrets/prod.env") ||
					!p.wantPath && !strings.Contains(desc, "changed paths (could not be read") {
					t.Fatalf("%s %q, want a failure naming secrets/prod.env (or its paths unread)", state, desc)
				}
			})
		}
	}
}

// deliverPush delivers the push webhook body under the event header named header (Gitea's or
// Forgejo's) and answers the state and description of the verdict on commit n.
func (w *forgeWorld) deliverPush(header string, body []byte, n int) (string, string) {
	h := http.Header{}
	h.Set(header, "push")
	w.deliver(h, body)
	return w.verdict(n)
}

// giteaPushers are the forge kinds that send Gitea's push webhook, each with the header that
// names its event.
var giteaPushers = []struct {
	kind   forgeKind
	header string
}{{forgeKinds[0], "X-Gitea-Event"}, {forgeKinds[1], "X-Forgejo-Event"}}

// secretsAt is a history's files: commit k adds secrets/prod.env, every other one its own file.
func secretsAt(k int) func(n int) []string {
	return func(n int) []string {
		if n == k {
			return []string{"secrets/prod.env"}
		}
		return oneFile(n)
	}
}
