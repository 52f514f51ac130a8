package runner_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// A GitLab push restoring a forbidden file, end to end, two ways. Commit 1 added
// secrets/prod.env, commit 2 removed it on main. A merge of main into commit 1 made with
// "git merge -s ours" (commit 3, its tree commit 1's), onto which main fast-forwards, lists
// nothing against its first parent, as GitLab's webhook lists a commit's files; main forced
// from commit 2 back to commit 1 lists no commit (GitLab lists before..after). Either restores
// the key on main; neither push ever succeeds, and each names the key.
func TestAGitLabPushRestoringAForbiddenFileNeverSucceeds(t *testing.T) {
	for _, p := range []struct {
		name   string
		head   int
		listed []int
	}{
		{"a merge taking an older tree", 3, []int{3}},
		{"forced back past the removal", 1, nil},
	} {
		t.Run(p.name, func(t *testing.T) {
			w := newForgeWorld(t, forgeKinds[2], forgeRules)
			g := w.fake.(gitlabForge)
			g.AddCommit(forgeRepo, gitlabtest.Commit{SHA: forgeCommit(1), Parent: forgeCommit(0), Message: "Add the key",
				Files: []gitlabtest.File{{Path: "secrets/prod.env", Status: "added"}}})
			g.AddCommit(forgeRepo, gitlabtest.Commit{SHA: forgeCommit(2), Parent: forgeCommit(1), Message: "Remove the key",
				Files: []gitlabtest.File{{Path: "secrets/prod.env", Status: "deleted"}}})
			g.AddCommit(forgeRepo, gitlabtest.Commit{SHA: forgeCommit(3), Parent: forgeCommit(1), Merged: []string{forgeCommit(2)},
				Message: "Merge branch 'main' into restore"})
			g.SetBranch(forgeRepo, "main", forgeCommit(p.head))
			commits := []any{}
			for _, n := range p.listed {
				commits = append(commits, map[string]any{"id": forgeCommit(n), "message": "Merge branch 'main' into restore",
					"added": []string{}, "removed": []string{}, "modified": []string{}})
			}
			b, _ := json.Marshal(map[string]any{"object_kind": "push", "ref": "refs/heads/main", "before": forgeCommit(2),
				"after": forgeCommit(p.head), "checkout_sha": forgeCommit(p.head), "total_commits_count": len(commits), "commits": commits,
				"project": map[string]any{"path_with_namespace": forgeRepo}})
			w.deliver(nil, b)
			if state, desc := w.verdict(p.head); state != "failed" || !strings.Contains(desc, "forbidden path secrets/prod.env") {
				t.Fatalf("%s %q, want a failure naming secrets/prod.env", state, desc)
			}
		})
	}
}
