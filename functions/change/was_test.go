package change_test

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/provider"
)

// What an edit proves of the pull request before it: GitHub, Gitea and Forgejo name what an
// edited action changed (changes.title.from; the target branch: GitHub's changes.base.ref.from,
// Gitea's and Forgejo's changes.ref.from), GitLab what an update
// changed (changes.title.previous, changes.target_branch.previous), Bitbucket Data Center what
// a pr:modified changed (previousTitle, previousTarget); what an edit did not change is as it
// is now. Any other action proves nothing; a Standard Webhooks sender's claim
// is not taken.
func TestAnEditProvesThePullRequestBeforeIt(t *testing.T) {
	gh := func(action, changes string) []byte {
		return fmt.Appendf(nil, `{"action":%q,"number":7,%s"repository":{"full_name":"acme/app"},`+
			`"pull_request":{"title":"feat: new","head":{"sha":"%040d","ref":"f"},"base":{"ref":"main"}}}`, action, changes, 1)
	}
	gl := func(action, extra string) []byte {
		return fmt.Appendf(nil, `{"object_kind":"merge_request","project":{"path_with_namespace":"acme/app"},`+
			`"object_attributes":{"iid":7,"title":"feat: new","action":%q,"target_branch":"main","source_branch":"f",`+
			`"last_commit":{"id":"%040d"}%s}}`, action, 1, extra)
	}
	bbd := func(event, extra string) []byte {
		repo := `{"slug":"app","project":{"key":"ACME"}}`
		return fmt.Appendf(nil, `{"eventKey":%q,"pullRequest":{"id":7,"title":"feat: new",`+
			`"fromRef":{"id":"refs/heads/f","displayId":"f","latestCommit":"%040d","repository":%s},`+
			`"toRef":{"id":"refs/heads/main","displayId":"main","repository":%s}}%s}`, event, 1, repo, repo, extra)
	}
	cases := []struct {
		name, provider, header, event string
		body                          []byte
		want                          *change.PullState
	}{
		{"github edited title", "github", "X-GitHub-Event", "pull_request", gh("edited", `"changes":{"title":{"from":"add stuff"}},`),
			&change.PullState{Title: "add stuff", TargetBranch: "main"}},
		{"github edited base", "github", "X-GitHub-Event", "pull_request", gh("edited", `"changes":{"base":{"ref":{"from":"dev"},"sha":{"from":"x"}}},`),
			&change.PullState{Title: "feat: new", TargetBranch: "dev"}},
		{"github edited body", "github", "X-GitHub-Event", "pull_request", gh("edited", `"changes":{"body":{"from":"b"}},`),
			&change.PullState{Title: "feat: new", TargetBranch: "main"}},
		{"github opened", "github", "X-GitHub-Event", "pull_request", gh("opened", ""), nil},
		{"forgejo edited title", "forgejo", "X-Forgejo-Event", "pull_request", gh("edited", `"changes":{"title":{"from":"add stuff"}},`),
			&change.PullState{Title: "add stuff", TargetBranch: "main"}},
		// Gitea and Forgejo name a changed target branch changes.ref.from.
		{"gitea edited target", "gitea", "X-Gitea-Event", "pull_request", gh("edited", `"changes":{"ref":{"from":"dev"}},`),
			&change.PullState{Title: "feat: new", TargetBranch: "dev"}},
		{"forgejo edited target", "forgejo", "X-Forgejo-Event", "pull_request", gh("edited", `"changes":{"ref":{"from":"dev"}},`),
			&change.PullState{Title: "feat: new", TargetBranch: "dev"}},
		{"gitlab update", "gitlab", "", "", gl("update", `},"changes":{"title":{"previous":"Draft: new","current":"feat: new"}`),
			&change.PullState{Title: "Draft: new", TargetBranch: "main"}},
		{"gitlab update by a push", "gitlab", "", "", gl("update", `,"oldrev":"`+strings.Repeat("2", 40)+`"`), nil},
		{"gitlab open", "gitlab", "", "", gl("open", ""), nil},
		{"bitbucket data center modified", "bitbucket", "X-Event-Key", "pr:modified", bbd("pr:modified",
			`,"previousTitle":"WIP","previousTarget":{"id":"refs/heads/dev","displayId":"dev"}`), &change.PullState{Title: "WIP", TargetBranch: "dev"}},
		{"bitbucket data center opened", "bitbucket", "X-Event-Key", "pr:opened", bbd("pr:opened", ""), nil},
		{"standard webhooks claim", "standard-webhooks", "", "", fmt.Appendf(nil, `{"type":"pull_request","data":{"repository":"acme/app",`+
			`"sha":"%040d","pull_request":{"number":7,"title":"t","target_branch":"main","was":{"title":"x","target_branch":"main"}}}}`, 1), nil},
	}
	for _, c := range cases {
		h := http.Header{}
		if c.header != "" {
			h.Set(c.header, c.event)
		}
		s, err := only(provider.Extract(c.provider, h, c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(s.Pull.Was, c.want) {
			t.Errorf("%s: was %+v, want %+v", c.name, s.Pull.Was, c.want)
		}
	}
}

// An event that made the change's commit the pull request's head (its opening, a push to it)
// says so: every edit carrying that head came after it. An edit, a reopening, and a Standard
// Webhooks sender's claim do not.
func TestAnEventThatMadeTheHeadSaysSo(t *testing.T) {
	gh := func(action string) []byte {
		return fmt.Appendf(nil, `{"action":%q,"number":7,"repository":{"full_name":"acme/app"},`+
			`"pull_request":{"title":"t","head":{"sha":"%040d","ref":"f"},"base":{"ref":"main"}}}`, action, 1)
	}
	gl := func(action, extra string) []byte {
		return fmt.Appendf(nil, `{"object_kind":"merge_request","project":{"path_with_namespace":"acme/app"},`+
			`"object_attributes":{"iid":7,"title":"t","action":%q,"target_branch":"main","source_branch":"f",`+
			`"last_commit":{"id":"%040d"}%s}}`, action, 1, extra)
	}
	bbd := func(event string) []byte {
		repo := `{"slug":"app","project":{"key":"ACME"}}`
		return fmt.Appendf(nil, `{"eventKey":%q,"pullRequest":{"id":7,"title":"t",`+
			`"fromRef":{"id":"refs/heads/f","displayId":"f","latestCommit":"%040d","repository":%s},`+
			`"toRef":{"id":"refs/heads/main","displayId":"main","repository":%s}}}`, event, 1, repo, repo)
	}
	cases := []struct {
		name, provider, header, event string
		body                          []byte
		starts                        bool
	}{
		{"github opened", "github", "X-GitHub-Event", "pull_request", gh("opened"), true},
		{"github synchronize", "github", "X-GitHub-Event", "pull_request", gh("synchronize"), true},
		{"github edited", "github", "X-GitHub-Event", "pull_request", gh("edited"), false},
		{"github reopened", "github", "X-GitHub-Event", "pull_request", gh("reopened"), false},
		{"gitea synchronized", "gitea", "X-Gitea-Event", "pull_request", gh("synchronized"), true},
		{"gitlab open", "gitlab", "", "", gl("open", ""), true},
		{"gitlab update by a push", "gitlab", "", "", gl("update", `,"oldrev":"`+strings.Repeat("2", 40)+`"`), true},
		{"gitlab update of the title", "gitlab", "", "", gl("update", ""), false},
		{"gitlab reopen", "gitlab", "", "", gl("reopen", ""), false},
		{"bitbucket data center opened", "bitbucket", "X-Event-Key", "pr:opened", bbd("pr:opened"), true},
		{"bitbucket data center pushed to", "bitbucket", "X-Event-Key", "pr:from_ref_updated", bbd("pr:from_ref_updated"), true},
		{"bitbucket data center modified", "bitbucket", "X-Event-Key", "pr:modified", bbd("pr:modified"), false},
		{"standard webhooks claim", "standard-webhooks", "", "", fmt.Appendf(nil, `{"type":"pull_request","data":{"repository":"acme/app",`+
			`"sha":"%040d","pull_request":{"number":7,"title":"t","target_branch":"main","starts":true}}}`, 1), false},
	}
	for _, c := range cases {
		h := http.Header{}
		if c.header != "" {
			h.Set(c.header, c.event)
		}
		s, err := only(provider.Extract(c.provider, h, c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Pull.Starts != c.starts {
			t.Errorf("%s: starts %v, want %v", c.name, s.Pull.Starts, c.starts)
		}
	}
}
