package change_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/provider"
)

func load(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFixtures(t *testing.T) {
	cases := []struct {
		provider, header, event, file string
		want                          change.Change
	}{
		{"github", "X-GitHub-Event", "push", "github/push.json", change.Change{Event: "push", Repository: "octo-org/octo-repo",
			SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Ref: "refs/heads/main",
			Commits: []change.Commit{{ID: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Message: "Update README.md\n\nMention the new endpoint."}},
			// The listing's paths are its commits' against their first parents: kept, not whole.
			Paths: []string{"docs/endpoint.md", "README.md"}, Before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
			Whole: change.AllInputs &^ change.PathsInput}},
		{"github", "X-GitHub-Event", "pull_request", "github/pull_request.json", change.Change{Event: "pull_request",
			Repository: "octo-org/octo-repo", SHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821", Ref: "refs/heads/changes",
			Pull: &change.Pull{Number: 2, Title: "feat(api): add the endpoint", TargetBranch: "main", SourceBranch: "changes",
				Starts: true},
			Whole: change.TitleInput | change.PullInput}},
		{"github", "X-GitHub-Event", "check_run", "github/check_run_rerequested.json", change.Change{Event: "rerun",
			Repository: "octo-org/octo-repo", SHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821", Ref: "refs/heads/changes",
			// The pull request listed first stands in; the check run's own delivery (RerunOf)
			// says which it was for, so it is not held whole.
			Pull: &change.Pull{Number: 2, TargetBranch: "main", SourceBranch: "changes"}, Installation: 2311213, Listed: []int{2},
			Before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246", RerunOf: "3f1b1c1e6a0d4c4f9a8e2b7d5c6e1f00a1b2c3d4e5f60718293a4b5c6d7e8f90"}},
		{"github", "X-GitHub-Event", "check_suite", "github/check_suite_rerequested.json", change.Change{Event: "rerun",
			Repository: "octo-org/octo-repo", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Ref: "refs/heads/main",
			Installation: 2311213, Before: "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}},
		{"gitea", "X-Gitea-Event", "push", "gitea/push.json", change.Change{Event: "push", Repository: "gitea/webhooks",
			SHA: "bffeb74224043ba2feb48d137756c8a9331c449a", Ref: "refs/heads/develop",
			Commits: []change.Commit{{ID: "bffeb74224043ba2feb48d137756c8a9331c449a", Message: "fix: webhooks now sign the body\n"}},
			Paths:   []string{"main.go", "old/config.pem"}, Before: "28e1879d029cb852e4844d9c718537df08844e03",
			Whole: change.AllInputs &^ change.PathsInput}},
		{"forgejo", "X-Forgejo-Event", "pull_request", "gitea/pull_request.json", change.Change{Event: "pull_request",
			Repository: "gitea/webhooks", SHA: "8e9a4bd7a4c9f5d8b1a2c3d4e5f60718293a4b5c", Ref: "refs/heads/docs-window",
			Pull: &change.Pull{Number: 7, Title: "docs: describe the replay window", TargetBranch: "main", SourceBranch: "docs-window",
				Starts: true},
			Whole: change.TitleInput | change.PullInput}},
		{"gitlab", "X-Gitlab-Event", "Push Hook", "gitlab/push.json", change.Change{Event: "push", Repository: "mike/diaspora",
			SHA: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", Ref: "refs/heads/master",
			Commits: []change.Commit{{ID: "b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327", Message: "Update Catalan translation to e38cb41."},
				{ID: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", Message: "fixed readme"}},
			// The listing's paths are its commits' against their first parents: kept, not whole.
			Paths: []string{"CHANGELOG", "app/controller/application.rb"}, Before: "95790bf891e76fee5e1747ab589903a6a1f80f22",
			Whole: change.AllInputs &^ change.PathsInput}},
		{"gitlab", "X-Gitlab-Event", "Merge Request Hook", "gitlab/merge_request.json", change.Change{Event: "pull_request",
			Repository: "gitlabhq/gitlab-test", SHA: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", Ref: "refs/heads/ms-viewport",
			Pull:  &change.Pull{Number: 1, Title: "MS-Viewport", TargetBranch: "master", SourceBranch: "ms-viewport", Starts: true},
			Whole: change.TitleInput | change.PullInput}},
		{"bitbucket", "X-Event-Key", "repo:push", "bitbucket-cloud/push.json", change.Change{Event: "push", Repository: "team/app",
			SHA: "709d658dc5b6d6afcd46049c2f332ee3f515a67d", Ref: "refs/heads/main",
			Commits: []change.Commit{{ID: "03f4a7270240708834de475bcf21532d6134777e", Message: "Prepare the router\n"},
				{ID: "709d658dc5b6d6afcd46049c2f332ee3f515a67d", Message: "Add the health check\n"}},
			Before: "1e65c05c1d5171631d92438a13901ca7dae9618c", Whole: change.TitleInput | change.PullInput | change.CommitsInput,
			API: change.BitbucketCloud}},
		{"bitbucket", "X-Event-Key", "pullrequest:created", "bitbucket-cloud/pullrequest_created.json", change.Change{Event: "pull_request",
			Repository: "team/app", SHA: "a3b0c7e1d2f4", Ref: "refs/heads/fix-window",
			Pull:  &change.Pull{Number: 42, Title: "fix: close the replay window", TargetBranch: "main", SourceBranch: "fix-window"},
			Whole: change.TitleInput | change.PullInput, API: change.BitbucketCloud}},
		{"bitbucket", "X-Event-Key", "pullrequest:updated", "bitbucket-cloud/pullrequest_updated.json", change.Change{Event: "pull_request",
			Repository: "team/app", SHA: "e5f6a7b8c9d0", Ref: "refs/heads/fix-window",
			Pull:  &change.Pull{Number: 42, Title: "fix: close the replay window", TargetBranch: "main", SourceBranch: "fix-window"},
			Whole: change.TitleInput | change.PullInput, API: change.BitbucketCloud}},
		{"bitbucket", "X-Event-Key", "repo:refs_changed", "bitbucket-dc/refs_changed.json", change.Change{Event: "push",
			Repository: "PROJ/repository", SHA: "178864a7d521b6f5e720b386b2c2b0ef8563e0dc", Ref: "refs/heads/master",
			Before: "ecddabb624f6f5ba43816f5926e580a5f680a932", Whole: change.TitleInput | change.PullInput, API: change.BitbucketDataCenter}},
		{"bitbucket", "X-Event-Key", "pr:opened", "bitbucket-dc/pr_opened.json", change.Change{Event: "pull_request",
			Repository: "PROJ/repository", SHA: "ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca", Ref: "refs/heads/a-branch",
			Pull:  &change.Pull{Number: 1, Title: "feat: a new file added", TargetBranch: "master", SourceBranch: "a-branch", Starts: true},
			Whole: change.TitleInput | change.PullInput, API: change.BitbucketDataCenter}},
		{"standard-webhooks", "", "", "standard-webhooks/push.json", change.Change{Event: "push", Repository: "acme/app",
			SHA: "0123456789abcdef0123456789abcdef01234567", Ref: "refs/heads/main",
			Commits: []change.Commit{{ID: "0123456789abcdef0123456789abcdef01234567", Message: "chore: bump"}},
			Paths:   []string{"go.mod", "go.sum"}, Whole: change.AllInputs}},
		{"standard-webhooks", "", "", "standard-webhooks/pull_request.json", change.Change{Event: "pull_request", Repository: "acme/app",
			SHA: "89abcdef0123456789abcdef0123456789abcdef", Ref: "refs/heads/feature",
			Pull:    &change.Pull{Number: 12, Title: "feat: something", TargetBranch: "main", SourceBranch: "feature"},
			Commits: []change.Commit{{ID: "89abcdef0123456789abcdef0123456789abcdef", Message: "Add something"}},
			Paths:   []string{"src/something.go"}, Whole: change.AllInputs}},
	}
	for _, c := range cases {
		h := http.Header{}
		if c.header != "" {
			h.Set(c.header, c.event)
		}
		got, err := only(provider.Extract(c.provider, h, load(t, c.file)))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		c.want.Provider = c.provider
		if !reflect.DeepEqual(got, c.want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(c.want)
			t.Fatalf("%s:\n got  %s\n want %s", c.file, g, w)
		}
	}
}

func TestIgnoredAndMalformed(t *testing.T) {
	h := func(k, v string) http.Header { x := http.Header{}; x.Set(k, v); return x }
	ignored := []struct {
		provider string
		h        http.Header
		body     string
	}{
		{"github", h("X-GitHub-Event", "ping"), string(load(t, "github/ping.json"))},
		{"github", h("X-GitHub-Event", "pull_request"), strings.Replace(string(load(t, "github/pull_request.json")), `"opened"`, `"closed"`, 1)},
		{"github", h("X-GitHub-Event", "push"), strings.Replace(string(load(t, "github/push.json")), `"deleted": false`, `"deleted": true`, 1)},
		{"gitlab", nil, `{"object_kind":"pipeline"}`},
		{"gitlab", nil, strings.Replace(string(load(t, "gitlab/merge_request.json")), `"action": "open"`, `"action": "close"`, 1)},
		{"bitbucket", h("X-Event-Key", "diagnostics:ping"), `{}`},
		{"bitbucket", h("X-Event-Key", "repo:push"), `{"repository":{"full_name":"team/app"},"push":{"changes":[{"new":null}]}}`},
		{"standard-webhooks", nil, `{"type":"release","data":{}}`},
		// A check run's or suite's other actions report what GitHub or an App did.
		{"github", h("X-GitHub-Event", "check_run"), strings.Replace(string(load(t, "github/check_run_rerequested.json")), `"rerequested"`, `"created"`, 1)},
		{"github", h("X-GitHub-Event", "check_run"), strings.Replace(string(load(t, "github/check_run_rerequested.json")), `"rerequested"`, `"completed"`, 1)},
		{"github", h("X-GitHub-Event", "check_run"), strings.Replace(string(load(t, "github/check_run_rerequested.json")), `"rerequested"`, `"requested_action"`, 1)},
		{"github", h("X-GitHub-Event", "check_suite"), strings.Replace(string(load(t, "github/check_suite_rerequested.json")), `"rerequested"`, `"requested"`, 1)},
		{"github", h("X-GitHub-Event", "check_suite"), strings.Replace(string(load(t, "github/check_suite_rerequested.json")), `"rerequested"`, `"completed"`, 1)},
	}
	for i, c := range ignored {
		if c.h == nil {
			c.h = http.Header{}
		}
		if _, err := only(provider.Extract(c.provider, c.h, []byte(c.body))); !errors.Is(err, change.ErrIgnored) {
			t.Errorf("ignored case %d (%s): %v", i, c.provider, err)
		}
	}
	malformed := []struct {
		provider string
		h        http.Header
		body     string
	}{
		{"github", h("X-GitHub-Event", "push"), `not json`},
		{"github", http.Header{}, `{}`},
		{"github", h("X-GitHub-Event", "push"), `{}`}, // no after: not a deletion, a payload without its commit
		{"gitea", h("X-Gitea-Event", "push"), `{"ref":"refs/heads/main","repository":{"full_name":"a/b"}}`},
		{"gitlab", nil, `{"object_kind":"push","project":{"path_with_namespace":"a/b"}}`},
		{"github", h("X-GitHub-Event", "push"), `{"after":"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`},
		{"github", h("X-GitHub-Event", "push"), `{"after":"nothex","repository":{"full_name":"a/b"}}`},
		{"gitlab", nil, `{}`},
		{"bitbucket", http.Header{}, `{}`},
		{"standard-webhooks", nil, `{"data":{}}`},
		// A re-run's body under the other event's header lacks the object it names.
		{"github", h("X-GitHub-Event", "check_suite"), string(load(t, "github/check_run_rerequested.json"))},
		{"github", h("X-GitHub-Event", "check_run"), `{"action":"rerequested","repository":{"full_name":"a/b"}}`},
		{"github", h("X-GitHub-Event", "check_run"), `{"action":"rerequested","check_run":{"head_sha":"nothex"},"repository":{"full_name":"a/b"}}`},
		{"github", h("X-GitHub-Event", "push"), strings.Replace(string(load(t, "github/push.json")), `"sender"`, `"installation": {"id": -4}, "sender"`, 1)},
		{"standard-webhooks", nil, `{"type":"pull_request","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567"}}`},
	}
	for i, c := range malformed {
		if c.h == nil {
			c.h = http.Header{}
		}
		if _, err := only(provider.Extract(c.provider, c.h, []byte(c.body))); !errors.Is(err, change.ErrMalformed) {
			t.Errorf("malformed case %d (%s): %v", i, c.provider, err)
		}
	}
}

// Abbreviated hashes are accepted only where a provider sends them (Bitbucket Cloud's pull
// request events), and only as lower-case hex of at least 7 characters.
func TestAbbreviatedHashes(t *testing.T) {
	pr := string(load(t, "bitbucket-cloud/pullrequest_created.json"))
	h := http.Header{}
	h.Set("X-Event-Key", "pullrequest:created")
	for hash, ok := range map[string]bool{"a3b0c7e": true, "a3b0c7e1d2f4": true, "a3b0c7e1d2f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8": true,
		"a3b0c7": false, "A3B0C7E1D2F4": false, "a3b0c7e1d2fz": false, "": false} {
		_, err := only(provider.Extract("bitbucket", h, []byte(strings.Replace(pr, `"hash": "a3b0c7e1d2f4"`, `"hash": "`+hash+`"`, 1))))
		if (err == nil) != ok || (err != nil && !errors.Is(err, change.ErrMalformed)) {
			t.Errorf("pull request hash %q: %v (accept: %v)", hash, err, ok)
		}
	}
	// Pushes carry full hashes, on Cloud as elsewhere: an abbreviated one stays malformed.
	push := strings.ReplaceAll(string(load(t, "bitbucket-cloud/push.json")), "709d658dc5b6d6afcd46049c2f332ee3f515a67d", "709d658dc5b6")
	h.Set("X-Event-Key", "repo:push")
	if _, err := only(provider.Extract("bitbucket", h, []byte(push))); !errors.Is(err, change.ErrMalformed) {
		t.Errorf("abbreviated push hash: %v", err)
	}
	gh := http.Header{}
	gh.Set("X-GitHub-Event", "push")
	if _, err := only(provider.Extract("github", gh, []byte(`{"after":"0d1a26e67d8f","repository":{"full_name":"a/b"}}`))); !errors.Is(err, change.ErrMalformed) {
		t.Errorf("abbreviated GitHub hash: %v", err)
	}
}

func TestBounds(t *testing.T) {
	var commits []string
	for i := range 150 {
		commits = append(commits, `{"id":"c`+strings.Repeat("0", 39-len(itoa(i)))+itoa(i)+`","message":"`+strings.Repeat("é", 3000)+`","added":["p`+itoa(i)+`"]}`)
	}
	// A push of 150 commits on main, its head (the last listed) among them.
	body := `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"c` + strings.Repeat("0", 36) +
		`149","repository":{"full_name":"a/b"},"commits":[` + strings.Join(commits, ",") + `]}`
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	s, err := only(provider.Extract("github", h, []byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Whole.Has(change.CommitsInput) || len(s.Commits) != change.MaxCommits || len(s.Paths) != 150 ||
		len(s.Commits[0].Message) > change.MaxMessageBytes {
		t.Fatalf("bounds not applied: %d commits, %d paths, whole %v", len(s.Commits), len(s.Paths), s.Whole)
	}
	// Paths within their bound stay as whole as they were; more are cut, and no longer whole.
	for _, n := range []int{change.MaxPaths, change.MaxPaths + 1} {
		c := change.Change{Whole: change.AllInputs}
		for i := range n {
			c.Paths = append(c.Paths, "p"+itoa(i))
		}
		c.Bound()
		if cut := n > change.MaxPaths; len(c.Paths) != min(n, change.MaxPaths) || c.Whole.Has(change.PathsInput) == cut {
			t.Fatalf("%d paths bound to %d, whole %v", n, len(c.Paths), c.Whole)
		}
	}
	for _, c := range s.Commits {
		if !utf8.ValidString(c.Message) {
			t.Fatalf("message cut inside a rune")
		}
	}
	b, err := s.Marshal(16 << 10)
	if err != nil || len(b) > 16<<10 {
		t.Fatalf("marshal to fit: %d bytes, %v", len(b), err)
	}
	var back change.Change
	if err := json.Unmarshal(b, &back); err != nil || back.Whole.Has(change.PathsInput) || back.Whole.Has(change.CommitsInput) || back.SHA != s.SHA {
		t.Fatalf("fitted change: %v %+v", err, back)
	}
}

// A GitHub App's webhooks carry the installation in the signed body: the change keeps it, for
// every event kind; a repository's own webhook carries none (0). A Standard Webhooks sender's
// data cannot name one.
func TestInstallationIsKept(t *testing.T) {
	h := http.Header{}
	for event, file := range map[string]string{"push": "github/push.json", "pull_request": "github/pull_request.json"} {
		h.Set("X-GitHub-Event", event)
		body := strings.Replace(string(load(t, file)), `"sender"`, `"installation": {"id": 77, "node_id": "x"}, "sender"`, 1)
		s, err := only(provider.Extract("github", h, []byte(body)))
		if err != nil || s.Installation != 77 {
			t.Fatalf("%s from an App: installation %d, %v", event, s.Installation, err)
		}
		if s, err := only(provider.Extract("github", h, load(t, file))); err != nil || s.Installation != 0 {
			t.Fatalf("%s from a repository webhook: installation %d, %v", event, s.Installation, err)
		}
	}
	body := `{"type":"push","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","installation":5}}`
	if s, err := only(provider.Extract("standard-webhooks", http.Header{}, []byte(body))); err != nil || s.Installation != 0 {
		t.Fatalf("standard webhooks: installation %d, %v", s.Installation, err)
	}
}

// A Bitbucket change names the API its webhook came from, told apart by the event key, so that
// a route of Bitbucket Cloud never takes a Data Center server's delivery for its own (and back);
// a Standard Webhooks sender's data cannot name one.
func TestABitbucketChangeNamesTheAPIItCameFrom(t *testing.T) {
	for file, event := range map[string]string{"bitbucket-cloud/push.json": "repo:push", "bitbucket-cloud/pullrequest_created.json": "pullrequest:created",
		"bitbucket-cloud/pullrequest_updated.json": "pullrequest:updated"} {
		h := http.Header{}
		h.Set("X-Event-Key", event)
		if s, err := only(provider.Extract("bitbucket", h, load(t, file))); err != nil || s.API != change.BitbucketCloud {
			t.Fatalf("%s: API %q, %v; want %s", event, s.API, err, change.BitbucketCloud)
		}
	}
	pr := load(t, "bitbucket-dc/pr_opened.json")
	for file, event := range map[string]string{"bitbucket-dc/refs_changed.json": "repo:refs_changed", "bitbucket-dc/pr_opened.json": "pr:opened"} {
		h := http.Header{}
		h.Set("X-Event-Key", event)
		if s, err := only(provider.Extract("bitbucket", h, load(t, file))); err != nil || s.API != change.BitbucketDataCenter {
			t.Fatalf("%s: API %q, %v; want %s", event, s.API, err, change.BitbucketDataCenter)
		}
	}
	for _, event := range []string{"pr:from_ref_updated", "pr:modified"} {
		h := http.Header{}
		h.Set("X-Event-Key", event)
		if s, err := only(provider.Extract("bitbucket", h, pr)); err != nil || s.API != change.BitbucketDataCenter {
			t.Fatalf("%s: API %q, %v; want %s", event, s.API, err, change.BitbucketDataCenter)
		}
	}
	body := `{"type":"push","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","api":"bitbucket-datacenter"}}`
	if s, err := only(provider.Extract("standard-webhooks", http.Header{}, []byte(body))); err != nil || s.API != "" {
		t.Fatalf("standard webhooks: API %q, %v", s.API, err)
	}
}

// A change queued or frozen before installations were kept decodes unchanged, and one without
// an installation encodes as before (no new key).
func TestChangesWithoutAnInstallationKeepTheirEncoding(t *testing.T) {
	old := `{"provider":"github","repository":"a/b","sha":"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c","event":"push","changed_paths":["x"]}`
	var s change.Change
	if err := json.Unmarshal([]byte(old), &s); err != nil || s.Installation != 0 || s.Paths[0] != "x" {
		t.Fatalf("old change: %+v, %v", s, err)
	}
	b, err := s.Marshal(1 << 10)
	if err != nil || string(b) != old {
		t.Fatalf("re-encoded:\n got  %s\n want %s (%v)", b, old, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// A push's payload holds its commits and changed paths whole only when the provider listed
// every commit: GitLab lists the newest 20 (total_commits_count counts them all), Gitea and
// Forgejo the newest few (total_commits), Bitbucket Cloud 5 (truncated) and no paths at all,
// Bitbucket Data Center neither; GitHub lists up to 2,048. GitHub's, Gitea's, Forgejo's and
// GitLab's paths (each commit's against its first parent) are never taken for what the push
// changes. A list that is not whole is read from the provider before a rule that needs it is
// evaluated.
func TestAPushHoldsWhatItsProviderListedWhole(t *testing.T) {
	h := func(k, v string) http.Header { x := http.Header{}; x.Set(k, v); return x }
	const commitsAndPaths = change.CommitsInput | change.PathsInput
	cases := []struct {
		name, provider string
		h              http.Header
		body           string
		whole          change.Inputs
	}{
		{"gitlab, every commit listed", "gitlab", nil, string(load(t, "gitlab/push.json")), change.CommitsInput},
		{"gitlab, 21 of 40", "gitlab", nil, strings.Replace(string(load(t, "gitlab/push.json")), `"total_commits_count": 2`, `"total_commits_count": 40`, 1), 0},
		{"gitlab, no count", "gitlab", nil, strings.Replace(string(load(t, "gitlab/push.json")), `"total_commits_count": 2,`, ``, 1), 0},
		{"gitea, every commit listed", "gitea", h("X-Gitea-Event", "push"), string(load(t, "gitea/push.json")), change.CommitsInput},
		{"gitea, 1 of 9", "gitea", h("X-Gitea-Event", "push"), strings.Replace(string(load(t, "gitea/push.json")), `"total_commits": 1`, `"total_commits": 9`, 1), 0},
		{"forgejo, no count", "forgejo", h("X-Forgejo-Event", "push"), strings.Replace(string(load(t, "gitea/push.json")), `"total_commits": 1,`, ``, 1), 0},
		{"bitbucket cloud, every commit", "bitbucket", h("X-Event-Key", "repo:push"), string(load(t, "bitbucket-cloud/push.json")), change.CommitsInput},
		{"bitbucket cloud, truncated", "bitbucket", h("X-Event-Key", "repo:push"), strings.Replace(string(load(t, "bitbucket-cloud/push.json")), `"truncated": false`, `"truncated": true`, 1), 0},
		{"bitbucket data center", "bitbucket", h("X-Event-Key", "repo:refs_changed"), string(load(t, "bitbucket-dc/refs_changed.json")), 0},
		{"github", "github", h("X-GitHub-Event", "push"), string(load(t, "github/push.json")), change.CommitsInput},
	}
	for _, c := range cases {
		if c.h == nil {
			c.h = http.Header{}
		}
		s, err := only(provider.Extract(c.provider, c.h, []byte(c.body)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := s.Whole & commitsAndPaths; got != c.whole {
			t.Errorf("%s: holds %q whole, want %q", c.name, got, c.whole)
		}
		if !s.Whole.Has(change.TitleInput | change.PullInput) {
			t.Errorf("%s: a push has no pull request, so none is missing: whole %q", c.name, s.Whole)
		}
	}
	// GitHub lists at most 2,048 commits: a push listing that many may have had more.
	var commits []string
	for i := range 2048 {
		commits = append(commits, fmt.Sprintf(`{"id":"%040x","message":"m","added":["p%d"]}`, i+1, i))
	}
	body := `{"ref":"refs/heads/main","after":"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c","repository":{"full_name":"a/b"},"commits":[` +
		strings.Join(commits, ",") + `]}`
	s, err := only(provider.Extract("github", h("X-GitHub-Event", "push"), []byte(body)))
	if err != nil || s.Whole.Has(change.CommitsInput) || s.Whole.Has(change.PathsInput) {
		t.Fatalf("github push of 2,048 listed commits: whole %q, %v", s.Whole, err)
	}
}

// A pull request's webhook carries its title and branches, never its commits or changed paths,
// on every provider.
func TestAPullRequestHoldsItsTitleButNotItsFilesOrCommits(t *testing.T) {
	h := func(k, v string) http.Header { x := http.Header{}; x.Set(k, v); return x }
	for _, c := range []struct {
		provider string
		h        http.Header
		file     string
	}{
		{"github", h("X-GitHub-Event", "pull_request"), "github/pull_request.json"},
		{"forgejo", h("X-Forgejo-Event", "pull_request"), "gitea/pull_request.json"},
		{"gitlab", http.Header{}, "gitlab/merge_request.json"},
		{"bitbucket", h("X-Event-Key", "pullrequest:created"), "bitbucket-cloud/pullrequest_created.json"},
		{"bitbucket", h("X-Event-Key", "pr:opened"), "bitbucket-dc/pr_opened.json"},
	} {
		s, err := only(provider.Extract(c.provider, c.h, load(t, c.file)))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if s.Whole != change.TitleInput|change.PullInput {
			t.Errorf("%s: whole %q, want title and pull_request only", c.file, s.Whole)
		}
	}
}

// The inputs a change holds whole are kept with it in the ledger, by name; an unknown name
// does not decode.
func TestWholeInputsAreStoredByName(t *testing.T) {
	s := change.Change{Provider: "github", Repository: "a/b", SHA: strings.Repeat("a", 40), Event: "push",
		Whole: change.CommitsInput | change.TitleInput}
	b, err := s.Marshal(1 << 10)
	if err != nil || !strings.Contains(string(b), `"whole":["title","commits"]`) {
		t.Fatalf("encoded %s, %v", b, err)
	}
	var back change.Change
	if err := json.Unmarshal(b, &back); err != nil || back.Whole != s.Whole {
		t.Fatalf("decoded %q, %v", back.Whole, err)
	}
	if err := json.Unmarshal([]byte(`{"whole":["everything"]}`), &back); err == nil {
		t.Fatal("an unknown input decoded")
	}
}

// A check run's branch is its check suite's head_branch (the check run object names none):
// a re-run naming no pull request (a fork's, or a push's) still names its branch, from which
// a reader tells a new branch from the repository's default branch.
func TestACheckRunsRerunNamesItsSuitesBranch(t *testing.T) {
	var body map[string]any
	if err := json.Unmarshal(load(t, "github/check_run_rerequested.json"), &body); err != nil {
		t.Fatal(err)
	}
	run := body["check_run"].(map[string]any)
	run["pull_requests"] = []any{}
	run["check_suite"].(map[string]any)["pull_requests"] = []any{}
	b, _ := json.Marshal(body)
	hdr := http.Header{}
	hdr.Set("X-GitHub-Event", "check_run")
	s, err := only(change.Extract("github", change.GitHubFormat, hdr, b))
	if err != nil || s.Pull != nil || s.Ref != "refs/heads/changes" {
		t.Fatalf("re-run %+v %v, want the suite's branch refs/heads/changes and no pull request", s, err)
	}
}

// GitHub lists, among the pull requests a re-run's commit heads, those of other repositories
// whose head is the commit's branch (a fork's pull request merging this repository's branch
// into the fork): their numbers are the other repository's, and name no pull request here.
// They are not the re-run's pull request, nor listed: the one based in the repository is; a
// re-run heading only another repository's names none.
func TestARerunIgnoresThePullRequestsOfOtherRepositories(t *testing.T) {
	foreign := map[string]any{"url": "https://api.github.com/repos/forkowner/octo-repo/pulls/5", "id": 1234567890, "number": 5,
		"head": map[string]any{"ref": "changes", "sha": "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
			"repo": map[string]any{"id": 35129377, "url": "https://api.github.com/repos/octo-org/octo-repo", "name": "octo-repo"}},
		"base": map[string]any{"ref": "main", "sha": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
			"repo": map[string]any{"id": 99999999, "url": "https://api.github.com/repos/forkowner/octo-repo", "name": "octo-repo"}}}
	for _, event := range []string{"check_run", "check_suite"} {
		var body map[string]any
		if err := json.Unmarshal(load(t, "github/check_run_rerequested.json"), &body); err != nil {
			t.Fatal(err)
		}
		run := body["check_run"].(map[string]any)
		ours := run["pull_requests"].([]any)[0]
		check := run
		if event == "check_suite" {
			check = run["check_suite"].(map[string]any)
			check["head_sha"] = run["head_sha"]
			body["check_suite"] = check
			delete(body, "check_run")
		}
		hdr := http.Header{}
		hdr.Set("X-GitHub-Event", event)
		for _, c := range []struct {
			listed []any
			want   *change.Pull
		}{
			{[]any{foreign, ours}, &change.Pull{Number: 2, TargetBranch: "main", SourceBranch: "changes"}},
			{[]any{foreign}, nil},
		} {
			check["pull_requests"] = c.listed
			b, _ := json.Marshal(body)
			s, err := only(change.Extract("github", change.GitHubFormat, hdr, b))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Pull, c.want) || slices.Contains(s.Listed, 5) {
				t.Errorf("%s listing %d pull requests: pull request %+v, listed %v; want %+v, never #5 of forkowner/octo-repo",
					event, len(c.listed), s.Pull, s.Listed, c.want)
			}
			if c.want == nil && s.Whole.Has(change.PullInput) {
				t.Errorf("%s heading only another repository's pull request holds its pull request whole", event)
			}
		}
	}
}

// A Standard Webhooks sender's lists are whole as far as it sends them: a commits or
// changed_paths list it sends (empty included) is the event's every one; one it leaves out is
// not known, and the rules that need it fail closed, never passing a pull request whose
// sender named no file.
func TestAStandardWebhooksSendersListsAreWholeOnlyWhenSent(t *testing.T) {
	for _, c := range []struct {
		body  string
		whole change.Inputs
	}{
		{`{"type":"pull_request","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567",` +
			`"pull_request":{"number":1,"title":"feat: x","target_branch":"main"}}}`, change.TitleInput | change.PullInput},
		{`{"type":"pull_request","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567",` +
			`"pull_request":{"number":1,"title":"feat: x","target_branch":"main"},"commits":[],"changed_paths":["a.go"]}}`, change.AllInputs},
		{`{"type":"push","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","commits":[{"id":"c","message":"m"}]}}`,
			change.TitleInput | change.PullInput | change.CommitsInput},
		{`{"type":"push","data":{"repository":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","changed_paths":null,` +
			`"whole":["title","pull_request","commits","paths"]}}`, change.TitleInput | change.PullInput},
	} {
		s, err := only(provider.Extract("standard-webhooks", http.Header{}, []byte(c.body)))
		if err != nil || s.Whole != c.whole {
			t.Errorf("%s: whole %q (%v), want %q", c.body, s.Whole, err, c.whole)
		}
	}
}

// only is the one change of a webhook that carries one (an error passes through as it is).
func only(cs []change.Change, err error) (change.Change, error) {
	if err != nil {
		return change.Change{}, err
	}
	if len(cs) != 1 {
		return change.Change{}, fmt.Errorf("the webhook gave %d changes, want 1", len(cs))
	}
	return cs[0], nil
}

// A Bitbucket push lists every branch it updated: each branch it created or moved gives a
// change of its own, in the order the push lists them, holding that branch's head, its commit
// before the push (none for a new branch), its commits and what it lists whole (Cloud's
// truncated is per branch); a deleted branch and a tag give none.
func TestAPushOfSeveralBranchesGivesEachBranchItsOwnChange(t *testing.T) {
	const a, b, c, d, e = "1e65c05c1d5171631d92438a13901ca7dae9618c", "709d658dc5b6d6afcd46049c2f332ee3f515a67d",
		"a3b0c7e1d2f45b6c7d8e9f001122334455667788", "03f4a7270240708834de475bcf21532d6134777e", "5555555555555555555555555555555555555555"
	const zero = "0000000000000000000000000000000000000000"
	cloud := `{"repository":{"full_name":"team/app"},"push":{"changes":[
		{"new":{"type":"branch","name":"main","target":{"hash":"` + b + `"}},"old":{"type":"branch","name":"main","target":{"hash":"` + a + `"}},
		 "commits":[{"hash":"` + b + `","message":"Add the health check\n"},{"hash":"` + d + `","message":"Prepare the router\n"}],"truncated":false},
		{"new":null,"old":{"type":"branch","name":"gone","target":{"hash":"` + a + `"}},"commits":[],"truncated":false},
		{"new":{"type":"tag","name":"v1.0","target":{"hash":"` + b + `"}},"old":null,"commits":[],"truncated":false},
		{"new":{"type":"branch","name":"release/2.0","target":{"hash":"` + c + `"}},"old":null,
		 "commits":[{"hash":"` + c + `","message":"Cut 2.0\n"}],"truncated":true},
		{"new":{"type":"branch","name":"fix","target":{"hash":"` + e + `"}},"old":{"type":"branch","name":"fix","target":{"hash":"` + d + `"}},
		 "commits":[{"hash":"` + e + `","message":"Fix it\n"}],"truncated":false}]}}`
	cloudWhole := change.TitleInput | change.PullInput
	dc := `{"eventKey":"repo:refs_changed","repository":{"slug":"repository","project":{"key":"PROJ"}},"changes":[
		{"ref":{"id":"refs/heads/new-branch","type":"BRANCH"},"fromHash":"` + zero + `","toHash":"` + c + `","type":"ADD"},
		{"ref":{"id":"refs/heads/old","type":"BRANCH"},"fromHash":"` + a + `","toHash":"` + zero + `","type":"DELETE"},
		{"ref":{"id":"refs/tags/v1","type":"TAG"},"fromHash":"` + zero + `","toHash":"` + b + `","type":"ADD"},
		{"ref":{"id":"refs/heads/master","type":"BRANCH"},"fromHash":"` + a + `","toHash":"` + b + `","type":"UPDATE"}]}`
	dcWhole := change.TitleInput | change.PullInput
	for _, x := range []struct {
		event, body string
		want        []change.Change
	}{
		{"repo:push", cloud, []change.Change{
			{Provider: "bitbucket", API: change.BitbucketCloud, Event: change.Push, Repository: "team/app", SHA: b, Ref: "refs/heads/main", Before: a,
				Commits: []change.Commit{{ID: d, Message: "Prepare the router\n"}, {ID: b, Message: "Add the health check\n"}}, Whole: cloudWhole | change.CommitsInput},
			{Provider: "bitbucket", API: change.BitbucketCloud, Event: change.Push, Repository: "team/app", SHA: c, Ref: "refs/heads/release/2.0",
				Commits: []change.Commit{{ID: c, Message: "Cut 2.0\n"}}, Whole: cloudWhole},
			{Provider: "bitbucket", API: change.BitbucketCloud, Event: change.Push, Repository: "team/app", SHA: e, Ref: "refs/heads/fix", Before: d,
				Commits: []change.Commit{{ID: e, Message: "Fix it\n"}}, Whole: cloudWhole | change.CommitsInput}}},
		{"repo:refs_changed", dc, []change.Change{
			{Provider: "bitbucket", API: change.BitbucketDataCenter, Event: change.Push, Repository: "PROJ/repository", SHA: c, Ref: "refs/heads/new-branch", Whole: dcWhole},
			{Provider: "bitbucket", API: change.BitbucketDataCenter, Event: change.Push, Repository: "PROJ/repository", SHA: b, Ref: "refs/heads/master", Before: a, Whole: dcWhole}}},
	} {
		h := http.Header{}
		h.Set("X-Event-Key", x.event)
		got, err := provider.Extract("bitbucket", h, []byte(x.body))
		if err != nil || !reflect.DeepEqual(got, x.want) {
			t.Errorf("%s: %v\n got %+v\nwant %+v", x.event, err, got, x.want)
		}
	}
}
