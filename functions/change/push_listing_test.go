package change_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
)

// The commits a provider's push webhook lists are not always the commits the push brings to
// its branch. Where a payload cannot show that they are, the change does not hold them (nor the
// paths their added, modified and removed lists name) whole: the runner reads the push from
// the provider's API instead, and a forbidden path the listing left out still fails the rule.
// Taken whole, the listing would pass a push that brings the path.

// secretRules forbids secrets/** and wants every commit message to begin with a capital.
func secretRules(t *testing.T) *evaluate.Rules {
	t.Helper()
	r, err := evaluate.NewRules(config.Rules{ForbiddenPaths: []string{"secrets/**"}, CommitMessage: `^[A-Z]`})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// githubPush is a GitHub push webhook's body: before, after, created, forced and commits as
// given; its head_commit is after, adding secrets/prod.pem.
func githubPush(t *testing.T, before, after string, created, forced bool, commits ...map[string]any) []byte {
	t.Helper()
	if commits == nil {
		commits = []map[string]any{}
	}
	b, err := json.Marshal(map[string]any{"ref": "refs/heads/release", "before": before, "after": after,
		"created": created, "deleted": false, "forced": forced,
		"commits":     commits,
		"head_commit": map[string]any{"id": after, "distinct": false, "message": "add the key", "added": []string{"secrets/prod.pem"}},
		"repository":  map[string]any{"full_name": "octo-org/octo-repo", "default_branch": "main"}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// GitHub's push webhook lists the commits new to the repository: a push that brings commits
// pushed before lists none of them. GitHub's own Slack app skips "pushes with no new commits",
// which are, its author at GitHub wrote, a branch fast-forwarded to a commit pushed before and a
// ref created from one pushed before (integrations/slack 987cef0d), and announces a force push
// of "0 new commits" (4b7ec7e5); buildbot received a forced push with commits [] whose
// head_commit added a file (buildbot/buildbot#4334); Travis CI builds head_commit when "a
// branch is pushed with a HEAD commit which already exists on github" (travis-ci/travis-core#264).
// A commit pushed to a scratch branch and then fast-forwarded onto release, or made the head of
// a new branch, brings secrets/prod.pem to that branch: its push is not held whole, so the
// rules do not pass it unread.
func TestAGitHubPushListingNotTheCommitsItBringsIsNotHeldWhole(t *testing.T) {
	const (
		old     = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
		scratch = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c" // pushed before, to another branch: adds secrets/prod.pem
		head    = "ec26c3e57ca3a959ca5aad62de7213c562f8c821" // new, on top of scratch
		zero    = "0000000000000000000000000000000000000000"
	)
	newHead := map[string]any{"id": head, "distinct": true, "message": "Touch the readme", "added": []string{}, "removed": []string{},
		"modified": []string{"README.md"}}
	hdr := http.Header{}
	hdr.Set("X-GitHub-Event", "push")
	rules := secretRules(t)
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"a branch fast-forwarded to a commit pushed before", githubPush(t, old, scratch, false, false)},
		{"a branch created at a commit pushed before", githubPush(t, zero, scratch, true, false)},
		{"a branch created with a new commit on one pushed before", githubPush(t, zero, head, true, false, newHead)},
		{"a force push of no new commit", githubPush(t, old, scratch, false, true)},
		{"a force push of a new commit on one pushed before", githubPush(t, old, head, false, true, newHead)},
	} {
		s, err := only(provider.Extract("github", hdr, c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Whole.Has(change.PathsInput) || s.Whole.Has(change.CommitsInput) {
			t.Errorf("%s: holds %q whole, though its listing may leave out what it brings", c.name, s.Whole)
		}
		if need := rules.Needs(s) &^ s.Whole; !need.Has(change.PathsInput | change.CommitsInput) {
			t.Errorf("%s: the rules would read %q, not the push's commits and paths", c.name, need)
		}
		if v, err := rules.Evaluate(context.Background(), s); err != nil || v.State == evaluate.Success {
			t.Errorf("%s: unread, the rules give %+v (%v), never success", c.name, v, err)
		}
	}
	// A push listing its head among new commits, neither forced nor creating its branch, still
	// holds the commits it lists whole (its paths are read: see the test of a merge below).
	s, err := only(provider.Extract("github", hdr, githubPush(t, scratch, head, false, false, newHead)))
	if err != nil || !s.Whole.Has(change.CommitsInput) {
		t.Fatalf("a push of one new commit: whole %q, %v", s.Whole, err)
	}
}

// Gitea's and Forgejo's webhook for a push creating a branch lists the newest 10 commits of
// its head's history, whatever the branch adds to the repository, and counts those in
// total_commits (services/repository/push.go: CommitsBeforeLimit(10) for a new ref; the
// webhook notifier's TotalCommits is their number). An instance whose [ui]
// FEED_MAX_COMMIT_NUM is 10 or more lists all 10 of 10: taken whole, a branch bringing 11
// commits would pass the oldest unread. A listing of fewer than 10 is the head's whole
// history: its commits stay whole (its paths are read, as every Gitea push's).
func TestAGiteaNewBranchsTenCommitListingIsNotHeldWhole(t *testing.T) {
	hdr := http.Header{}
	hdr.Set("X-Gitea-Event", "push")
	push := func(n int) []byte {
		var commits []map[string]any
		for i := range n {
			commits = append(commits, map[string]any{"id": strings.Repeat(string("abcdef1234"[i]), 40), "message": "Touch the readme",
				"added": []string{}, "removed": []string{}, "modified": []string{"README.md"}})
		}
		b, _ := json.Marshal(map[string]any{"ref": "refs/heads/release", "before": "0000000000000000000000000000000000000000",
			"after": commits[0]["id"], "commits": commits, "total_commits": n,
			"repository": map[string]any{"full_name": "gitea/webhooks"}})
		return b
	}
	for _, p := range []string{"gitea", "forgejo"} {
		s, err := only(provider.Extract(p, hdr, push(10)))
		if err != nil || s.Whole.Has(change.PathsInput) || s.Whole.Has(change.CommitsInput) {
			t.Errorf("%s: a new branch listing 10 of 10 commits holds %q whole (%v): its history may hold more it brings", p, s.Whole, err)
		}
		s, err = only(provider.Extract(p, hdr, push(9)))
		if err != nil || !s.Whole.Has(change.CommitsInput) {
			t.Errorf("%s: a new branch listing its history's 9 commits holds %q whole (%v), want its commits", p, s.Whole, err)
		}
	}
}

// A GitHub push webhook lists each commit's added, removed and modified files against the
// commit's first parent, as GitHub shows a commit (a merge's too): what the push changes on its
// branch is not always among them. main removed secrets/prod.pem in commit B; a merge of main
// made on a commit from before the removal with "git merge -s ours main" keeps that commit's
// tree, key included, and main fast-forwards to it without a force. The webhook lists the merge
// alone, changing nothing against its first parent: neither forced, nor creating its branch,
// and listing its head. Taken whole, its paths would pass the key back onto main unread; they
// are read from GitHub's comparison of before...after instead, which names it. The commits it
// lists are every commit of before...after, and stay whole.
func TestAGitHubPushOfAMergeRestoringAFileIsNotHeldWholeForItsPaths(t *testing.T) {
	const (
		removal = "6113728f27ae82c7b1a177c8d03f9e96e0adf246" // main, which removed secrets/prod.pem
		merge   = "ec26c3e57ca3a959ca5aad62de7213c562f8c821" // parents: a commit from before the removal, and removal
	)
	listed := map[string]any{"id": merge, "distinct": true, "message": "Merge branch 'main' into restore",
		"added": []string{}, "removed": []string{}, "modified": []string{}}
	hdr := http.Header{}
	hdr.Set("X-GitHub-Event", "push")
	b, err := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": removal, "after": merge,
		"created": false, "deleted": false, "forced": false, "commits": []map[string]any{listed}, "head_commit": listed,
		"repository": map[string]any{"full_name": "octo-org/octo-repo", "default_branch": "main"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := only(provider.Extract("github", hdr, b))
	if err != nil {
		t.Fatal(err)
	}
	rules := secretRules(t)
	if s.Whole.Has(change.PathsInput) || !(rules.Needs(s) &^ s.Whole).Has(change.PathsInput) {
		t.Fatalf("holds %q whole: the merge's listing names none of the paths the push changes on main", s.Whole)
	}
	if v, err := rules.Evaluate(context.Background(), s); err != nil || v.State == evaluate.Success {
		t.Fatalf("unread, the rules give %+v (%v), never success", v, err)
	}
	if !s.Whole.Has(change.CommitsInput) {
		t.Fatalf("holds %q whole: the listing names every commit of before...after", s.Whole)
	}
}

// Gitea's and Forgejo's webhook for a new tag lists no commit and counts none (total_commits 0:
// services/repository/push.go notifies a tag with an empty PushCommits, its head commit alone
// set), and so does their webhook for a branch forced back to an older commit (the commits of
// before..after, none). A listing of 0 of 0 commits is not every commit the push brings: its
// commits and paths are read (a tag's from the default branch, as a new ref's), never passed
// as none. A push listing its head holds its commits whole.
func TestAGiteaPushListingNotItsHeadIsNotHeldWhole(t *testing.T) {
	const (
		tagged = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c" // adds secrets/prod.pem
		later  = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
		zero   = "0000000000000000000000000000000000000000"
	)
	head := map[string]any{"id": tagged, "message": "add the key", "added": []string{"secrets/prod.pem"}, "removed": []string{}, "modified": []string{}}
	push := func(ref, before string, commits []map[string]any) []byte {
		if commits == nil {
			commits = []map[string]any{}
		}
		b, _ := json.Marshal(map[string]any{"ref": ref, "before": before, "after": tagged, "commits": commits,
			"total_commits": len(commits), "head_commit": head, "repository": map[string]any{"full_name": "gitea/webhooks"}})
		return b
	}
	rules := secretRules(t)
	for _, p := range []string{"gitea", "forgejo"} {
		hdr := http.Header{}
		hdr.Set("X-Gitea-Event", "push")
		for _, c := range []struct {
			name string
			body []byte
		}{
			{"a new tag", push("refs/tags/v1.0", zero, nil)},
			{"a branch forced back", push("refs/heads/main", later, nil)},
		} {
			s, err := only(provider.Extract(p, hdr, c.body))
			if err != nil {
				t.Fatalf("%s, %s: %v", p, c.name, err)
			}
			if s.Whole.Has(change.PathsInput) || s.Whole.Has(change.CommitsInput) {
				t.Errorf("%s, %s: holds %q whole, though it lists none of its commits", p, c.name, s.Whole)
			}
			if v, err := rules.Evaluate(context.Background(), s); err != nil || v.State == evaluate.Success {
				t.Errorf("%s, %s: unread, the rules give %+v (%v), never success", p, c.name, v, err)
			}
		}
		s, err := only(provider.Extract(p, hdr, push("refs/heads/main", later, []map[string]any{head})))
		if err != nil || !s.Whole.Has(change.CommitsInput) {
			t.Errorf("%s: a push listing its one commit holds %q whole (%v), want its commits", p, s.Whole, err)
		}
	}
}

// Gitea and Forgejo list each commit's files against its first parent too (git log
// --name-status -m --first-parent; an older Gitea lists none of a merge's), and their
// payload names no commit's parents either: a merge restoring a file the branch removed (made
// with "git merge -s ours" on an older commit, fast-forwarded onto main) lists nothing, though
// the push lists every commit and its head. Its paths are read, never held whole; its commits
// stay whole.
func TestAGiteaPushOfAMergeRestoringAFileIsNotHeldWholeForItsPaths(t *testing.T) {
	const (
		removal = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
		merge   = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
	)
	listed := map[string]any{"id": merge, "message": "Merge branch 'main' into restore", "added": []string{}, "removed": []string{}, "modified": []string{}}
	b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": removal, "after": merge, "commits": []any{listed},
		"total_commits": 1, "head_commit": listed, "repository": map[string]any{"full_name": "gitea/webhooks"}})
	rules := secretRules(t)
	for _, p := range []string{"gitea", "forgejo"} {
		hdr := http.Header{}
		hdr.Set("X-Gitea-Event", "push")
		s, err := only(provider.Extract(p, hdr, b))
		if err != nil {
			t.Fatal(err)
		}
		if s.Whole.Has(change.PathsInput) || !s.Whole.Has(change.CommitsInput) {
			t.Errorf("%s: holds %q whole, want the commits and not the paths", p, s.Whole)
		}
		if v, err := rules.Evaluate(context.Background(), s); err != nil || v.State == evaluate.Success {
			t.Errorf("%s: unread, the rules give %+v (%v), never success", p, v, err)
		}
	}
}
