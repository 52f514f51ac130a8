package githubtest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// The fake compares as git does: base...head lists head's commits that base lacks and the
// files whose content differs between the merge base's tree and head's, which a merge builds
// on its first parent. Main removed secrets/prod.pem; a merge of main made with "-s ours" on
// a commit from before the removal keeps the old tree, so main fast-forwarded to it gets the
// key back, though the merge itself changes nothing against its first parent (git diff
// main...merge names the key; git show --first-parent merge names nothing).
func TestTheFakesComparisonOfAMergeIsWhatItsTreeChanges(t *testing.T) {
	const repo = "o/r"
	sha := func(c byte) string {
		b := make([]byte, 40)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	base, removal, merge := sha('a'), sha('b'), sha('c')
	fake := githubtest.New(func(string) bool { return true })
	fake.AddCommit(repo, githubtest.HistoryCommit{SHA: base, Message: "Base", Files: []githubtest.ChangedFile{
		{Filename: "secrets/prod.pem", Status: "added"}, {Filename: "README.md", Status: "added"}}})
	fake.AddCommit(repo, githubtest.HistoryCommit{SHA: removal, Parent: base, Message: "Remove the key",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.pem", Status: "removed"}}})
	fake.AddCommit(repo, githubtest.HistoryCommit{SHA: merge, Parent: base, Merged: []string{removal}, Message: "Merge main"})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	get := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header = github.Header("Bearer t")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, %v", path, resp.StatusCode, err)
		}
	}
	type file struct{ Filename, Status string }
	var cmp struct {
		Status          string
		Ahead           int                  `json:"ahead_by"`
		Behind          int                  `json:"behind_by"`
		MergeBaseCommit struct{ SHA string } `json:"merge_base_commit"`
		Commits         []struct {
			SHA     string
			Parents []struct{ SHA string }
		}
		Files []file
	}
	get("/repos/o/r/compare/"+removal+"..."+merge+"?per_page=100&page=1", &cmp)
	if cmp.MergeBaseCommit.SHA != removal || cmp.Ahead != 1 || cmp.Behind != 0 || cmp.Status != "ahead" ||
		len(cmp.Commits) != 1 || len(cmp.Commits[0].Parents) != 2 || cmp.Commits[0].Parents[0].SHA != base ||
		!reflect.DeepEqual(cmp.Files, []file{{"secrets/prod.pem", "added"}}) {
		t.Fatalf("main...merge: %+v", cmp)
	}
	var commit struct{ Files []file }
	get("/repos/o/r/commits/"+merge+"?per_page=100", &commit)
	if len(commit.Files) != 0 {
		t.Fatalf("the merge's own files against its first parent: %+v", commit.Files)
	}
	// Backwards: main reset from the removal to the base drops a commit and brings none.
	get("/repos/o/r/compare/"+removal+"..."+base+"?per_page=100&page=1", &cmp)
	if cmp.Status != "behind" || cmp.Ahead != 0 || cmp.Behind != 1 || len(cmp.Files) != 0 || cmp.MergeBaseCommit.SHA != base {
		t.Fatalf("main...base: %+v", cmp)
	}
}
