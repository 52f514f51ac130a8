package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// checkOutput runs amiss check on the configuration text, returning what it printed.
func checkOutput(t *testing.T, config string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "amiss.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"check", "-config", cfg, "-root", filepath.Join(dir, "root")}, &out, io.Discard)
	return out.String(), err
}

func says(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("check does not say %q:\n%s", w, out)
		}
	}
}

// amiss check reads, for each route whose rules read what its webhooks lack, each repository
// it names with the route's read credential (Gitea: the repository; GitLab: the project and
// its code), posting nothing; it fails a route that has no credential to read, and a read the
// provider refuses, naming the scope to grant. A route whose rules read nothing is not read.
func TestCheckReadsWhatTheRulesNeed(t *testing.T) {
	gt := giteatest.New(func(tok string) bool { return tok == "gitea-token" })
	gt.SetBranch("acme/app", "main", "0123456789012345678901234567890123456789")
	gtSrv := httptest.NewServer(gt)
	defer gtSrv.Close()
	gl := gitlabtest.New(func(tok string) bool { return tok == "gitlab-token" })
	gl.AddCommit("group/sub/app", gitlabtest.Commit{SHA: "0123456789012345678901234567890123456789", Message: "Root"})
	gl.SetBranch("group/sub/app", "main", "0123456789012345678901234567890123456789")
	glSrv := httptest.NewServer(gl)
	defer glSrv.Close()
	t.Setenv("AMISS_TEST_HOOK", "h")
	t.Setenv("AMISS_TEST_GITEA", "gitea-token")
	t.Setenv("AMISS_TEST_GITLAB", "gitlab-token")
	config := `
routes:
  gt:
    provider: gitea
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app, "acme/*"]
    rules: {forbidden_paths: ["secrets/**"]}
    publish: {provider: gitea, base_url: "` + gtSrv.URL + `", token: {from: "env:AMISS_TEST_GITEA"}}
  fj:
    provider: forgejo
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    rules: {commit_message: "^[A-Z]"}
    read: {base_url: "` + gtSrv.URL + `", token: {from: "env:AMISS_TEST_GITEA"}}
  gl:
    provider: gitlab
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [group/sub/app]
    rules: {commit_message: "^[A-Z]", forbidden_paths: ["secrets/**"]}
    publish: {provider: gitlab, base_url: "` + glSrv.URL + `", token: {from: "env:AMISS_TEST_GITLAB"}}
  logged:
    provider: gitea
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    rules: {forbidden_paths: ["secrets/**"]}
  titled:
    provider: gitea
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    rules: {pull_request_title: "^feat: "}
`
	out, err := checkOutput(t, config)
	if err == nil {
		t.Fatalf("a route without a credential to read passed:\n%s", out)
	}
	says(t, out,
		"ok    routes.gt.publish: acme/app: the credential reads gitea's API, as forbidden_paths need (nothing was posted)",
		"ok    routes.gt.publish: acme/* names no repository to read",
		"ok    routes.fj.read: acme/app: the credential reads forgejo's API, as commit_message need",
		"ok    routes.gl.publish: group/sub/app: the credential reads gitlab's API, as commit_message, forbidden_paths need",
		"FAIL  routes.logged.rules: forbidden_paths read from gitea's API what its webhooks lack, and the route has no credential to read it: "+
			"publish to gitea, or add a read block",
		"amiss check: 19 passed, 1 failed")
	if strings.Contains(out, "routes.titled.read") || strings.Contains(out, "routes.titled.publish: acme") || strings.Contains(out, "routes.titled.rules") {
		t.Errorf("a route whose rules read nothing was checked for reads:\n%s", out)
	}
	if gl.Requests(gitlabtest.OpCompare) != 1 {
		t.Errorf("GitLab's project code was read %d times, want 1", gl.Requests(gitlabtest.OpCompare))
	}

	gt.Answer = func(string, int) int { return http.StatusForbidden }
	gl.Answer = func(op string, _ int) int {
		if op == gitlabtest.OpCompare {
			return http.StatusForbidden // a Guest of a private project
		}
		return 0
	}
	out, _ = checkOutput(t, config)
	says(t, out,
		"FAIL  routes.gt.publish: acme/app: GET /api/v1/repos/acme/app answered 403",
		"grant the token the read:repository scope, as a user who can read the repository; until then forbidden_paths fail closed",
		"FAIL  routes.gl.publish: group/sub/app: GET /api/v4/projects/group%2Fsub%2Fapp/repository/compare answered 403",
		"grant the token the read_api scope, as a member who can read the project's code (Reporter); until then commit_message, forbidden_paths fail closed")
	if gt.Requests(giteatest.OpCreateStatus) != 0 || gl.Posts() != 0 {
		t.Errorf("check posted: %d to Gitea, %d to GitLab", gt.Requests(giteatest.OpCreateStatus), gl.Posts())
	}
	for _, v := range append(gt.Violations(), gl.Violations()...) {
		// The publishers' base URLs are probed with a GET that carries no credential.
		if !strings.Contains(v, "is not a token") && !strings.Contains(v, "no PRIVATE-TOKEN") {
			t.Errorf("a request outside the providers' descriptions: %v", v)
		}
	}
}

// On GitHub, check reads the comparison of the default branch with itself, as a token or as
// the App's installation, whose read permissions it checks first.
func TestCheckReadsFromGitHubAsATokenAndAsAnApp(t *testing.T) {
	key, pemKey := githubtest.GenerateKey()
	fake := githubtest.NewApp(4242, &key.PublicKey)
	fake.Authorize = githubtest.Token("ghp_read")
	fake.Install(7, "acme/app")
	srv := httptest.NewServer(fake)
	defer srv.Close()
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	os.WriteFile(keyFile, pemKey, 0o600)
	t.Setenv("AMISS_TEST_HOOK", "h")
	t.Setenv("AMISS_TEST_GITHUB", "ghp_read")
	config := `
routes:
  token:
    provider: github
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    rules: {forbidden_paths: ["secrets/**"]}
    publish: {provider: github, base_url: "` + srv.URL + `", token: {from: "env:AMISS_TEST_GITHUB"}}
  app:
    provider: github
    secrets: [{id: a, from: "env:AMISS_TEST_HOOK"}]
    repositories: [acme/app]
    rules: {commit_message: "^[A-Z]"}
    publish: {provider: github-checks, base_url: "` + srv.URL + `", app: {id: "4242", private_key: {from: "file:` + keyFile + `"}}}
`
	out, err := checkOutput(t, config)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	says(t, out, "ok    routes.token.publish: acme/app: the credential reads github's API, as forbidden_paths need",
		"ok    routes.app.publish.app: acme/app: the credential reads github's API, as commit_message need")
	if fake.Requests(githubtest.OpCompareCommits) != 2 {
		t.Errorf("%d comparisons read, want 2", fake.Requests(githubtest.OpCompareCommits))
	}

	fake.Permissions = map[string]string{"checks": "write", "statuses": "write", "metadata": "read"}
	fake.Answer = func(op string, _ int) int {
		if op == githubtest.OpCompareCommits {
			return http.StatusForbidden
		}
		return 0
	}
	out, _ = checkOutput(t, config)
	says(t, out, "FAIL  routes.token.publish: acme/app: GET /repos/acme/app/compare/HEAD...HEAD answered 403",
		"grant it the Contents: read and Pull requests: read permissions (a classic token: the repo scope); until then forbidden_paths fail closed",
		"FAIL  routes.app.publish.app: acme/app: installation 7 may not read pull_requests and contents (it has checks:write, metadata:read, statuses:write)",
		"give the App those permissions Read-only")
	if strings.Contains(out, "which a Re-run reads") {
		t.Errorf("the App's read permissions were reported twice:\n%s", out)
	}
	for _, v := range fake.Violations() {
		t.Errorf("check sent a request GitHub would refuse: %s", v)
	}
}
