package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// gitHubWithApp is the fake GitHub on 127.0.0.1 serving an App's endpoints (JWTs checked with
// the App's public key, installation tokens that expire), the checks API and the commits and
// pull requests a re-run reads (requests checked against GitHub's description, only tokens of
// installation 7, on acme/app, accepted).
type gitHubWithApp struct {
	*githubtest.GitHub
	srv *httptest.Server
	pem []byte
}

func newGitHubWithApp(t *testing.T) *gitHubWithApp {
	t.Helper()
	key, pem := githubtest.GenerateKey()
	g := &gitHubWithApp{GitHub: githubtest.NewApp(42, &key.PublicKey), pem: pem}
	g.Install(7, "acme/app")
	g.srv = httptest.NewServer(g.GitHub)
	t.Cleanup(g.srv.Close)
	return g
}

// exampleAppConfig writes examples/github-app.yaml pointed at baseURL, with its environment
// (the App's id and key file, the webhook secret, the repository) set for the test.
func exampleAppConfig(t *testing.T, dir, baseURL string, pem []byte) string {
	t.Helper()
	example, err := os.ReadFile("../../examples/github-app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), "https://api.github.com") {
		t.Fatal("examples/github-app.yaml no longer names https://api.github.com as its base URL")
	}
	keyFile := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AMISS_GITHUB_SECRET", "app-webhook-secret")
	t.Setenv("AMISS_APP_ID", "42")
	t.Setenv("AMISS_APP_KEY_FILE", keyFile)
	t.Setenv("AMISS_REPOSITORIES", "acme/app")
	cfg := filepath.Join(dir, "github-app.yaml")
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(string(example), "https://api.github.com", baseURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// postAppWebhook sends body as the App's webhook of the event kind to the example's route.
func postAppWebhook(t *testing.T, addr, event, body string) (int, string) {
	t.Helper()
	m := hmac.New(sha256.New, []byte("app-webhook-secret"))
	m.Write([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/github", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The local path of examples/github-app.yaml, end to end: amiss serve receives the App's push
// webhook and publishes a check run (annotating the forbidden file, named by the delivery's
// key) with an installation token it exchanged for the App's JWT; a Re-run webhook for the
// commit is a new delivery, evaluated on the push's files (its check run names the push's
// delivery), that leads to a new check run with the same verdict, with the token kept from the
// first.
func TestServePublishesCheckRunsAsAGitHubApp(t *testing.T) {
	gh := newGitHubWithApp(t)
	dir := t.TempDir()
	cfg := exampleAppConfig(t, dir, gh.srv.URL, gh.pem)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{config: cfg, root: filepath.Join(dir, "root"), listen: "127.0.0.1:0", workers: 2,
			lease: 10 * time.Second, cleanupEvery: time.Hour, grace: 5 * time.Second, ready: ready, create: true}, out)
	}()
	addr := <-ready
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	const sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
	gh.AddCommit("acme/app", githubtest.HistoryCommit{SHA: sha, Parent: "9fceb02d0ae598e95dc970b74767f19372d61af8",
		Message: "add config", Files: []githubtest.ChangedFile{{Filename: "secrets/prod.env", Status: "added"},
			{Filename: "README.md", Status: "modified"}}})
	push := fmt.Sprintf(`{"ref":"refs/heads/main","before":"9fceb02d0ae598e95dc970b74767f19372d61af8","after":%q,"repository":{"full_name":"acme/app"},`+
		`"installation":{"id":7},"commits":[{"id":%q,"message":"add config","added":["secrets/prod.env"],"modified":["README.md"]}]}`, sha, sha)
	if code, body := postAppWebhook(t, addr, "push", push); code != http.StatusAccepted {
		t.Fatalf("push: %d %s", code, body)
	}
	first := waitForCheckRuns(t, gh.GitHub, sha, 1, out)
	ops := []string{githubtest.OpGetCommit, githubtest.OpCompareCommits, githubtest.OpGetRepo}
	pushReads := map[string]int{}
	for _, op := range ops {
		pushReads[op] = gh.Requests(op)
	}
	if pushReads[githubtest.OpCompareCommits] == 0 {
		t.Fatalf("the push read no comparison (%v): its paths are what it changes on its branch, which its webhook's lists do not show", pushReads)
	}
	run := first[0]
	if run.Name != "amiss/local" || run.Status != "completed" || run.Conclusion != "failure" || len(run.ExternalID) != 64 {
		t.Fatalf("check run: %+v", run)
	}
	if len(run.Annotations) != 1 || run.Annotations[0].Path != "secrets/prod.env" || run.Annotations[0].Level != "failure" {
		t.Fatalf("annotations: %+v", run.Annotations)
	}

	rerun := fmt.Sprintf(`{"action":"rerequested","check_run":{"id":%d,"name":"amiss/local","head_sha":%q,"external_id":%q,`+
		`"status":"completed","conclusion":"failure","check_suite":{"id":5,"head_branch":"main","head_sha":%q},"pull_requests":[]},`+
		`"repository":{"full_name":"acme/app"},"installation":{"id":7}}`, run.ID, sha, run.ExternalID, sha)
	if code, body := postAppWebhook(t, addr, "check_run", rerun); code != http.StatusAccepted {
		t.Fatalf("re-run: %d %s", code, body)
	}
	runs := waitForCheckRuns(t, gh.GitHub, sha, 2, out)
	// The re-run found the push through its delivery (the re-run's body names no push), read
	// what the push read, and refused the same file.
	again := runs[1]
	if again.ExternalID == run.ExternalID || again.Name != "amiss/local" || again.Status != "completed" ||
		again.Conclusion != "failure" || again.Summary != run.Summary {
		t.Fatalf("the re-run's check run: %+v (first %+v)", again, run)
	}
	if len(again.Annotations) != 1 || again.Annotations[0].Path != "secrets/prod.env" {
		t.Fatalf("the re-run's annotations: %+v", again.Annotations)
	}
	for _, op := range ops {
		if n := gh.Requests(op) - pushReads[op]; n != pushReads[op] {
			t.Fatalf("the re-run read %s %d times, the push %d: it was not read as its push", op, n, pushReads[op])
		}
	}
	if v := gh.Violations(); len(v) != 0 {
		t.Fatalf("requests GitHub's description refuses: %q", v)
	}
	if n := gh.Exchanges(7); n != 1 {
		t.Fatalf("%d token exchanges for two deliveries: the installation token was not kept", n)
	}
	if gh.Creates() != 2 {
		t.Fatalf("%d check runs created for two verdicts", gh.Creates())
	}
}

func waitForCheckRuns(t *testing.T, c *githubtest.GitHub, sha string, n int, out *syncBuffer) []githubtest.CheckRun {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if runs := c.Runs("acme/app", sha); len(runs) >= n {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d check runs on %s, want %d; violations %q\n%s", len(c.Runs("acme/app", sha)), sha, n, c.Violations(), out.String())
		}
	}
}

// A pull request that adds a forbidden file fails as a GitHub App's check run, though its
// webhook names no file: amiss reads the pull request's files from GitHub before it evaluates
// (as a new user tries it with examples/github-app.yaml). Pressing Re-run on that check run
// (a fork's pull request: the webhook names no pull request) gives the same verdict, the pull
// request found through the check run's delivery.
func TestServeFailsAPullRequestAddingAForbiddenFileAsAGitHubApp(t *testing.T) {
	gh := newGitHubWithApp(t)
	dir := t.TempDir()
	cfg := exampleAppConfig(t, dir, gh.srv.URL, gh.pem)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{config: cfg, root: filepath.Join(dir, "root"), listen: "127.0.0.1:0", workers: 2,
			lease: 10 * time.Second, cleanupEvery: time.Hour, grace: 5 * time.Second, ready: ready, create: true}, out)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve ended before it listened: %v\n%s", err, out.String())
	}
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	const base, head = "9fceb02d0ae598e95dc970b74767f19372d61af8", "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
	gh.AddCommit("acme/app", githubtest.HistoryCommit{SHA: head, Parent: base, Message: "feat: add the config",
		Files: []githubtest.ChangedFile{{Filename: "secrets/prod.env", Status: "added"}, {Filename: "README.md", Status: "modified"}}})
	gh.AddPull("acme/app", githubtest.HistoryPull{Number: 12, Title: "feat: add the config", Base: "main", Head: "config",
		BaseSHA: base, HeadSHA: head})
	now := time.Now().UTC().Format(time.RFC3339)
	opened := fmt.Sprintf(`{"action":"opened","number":12,"pull_request":{"number":12,"title":"feat: add the config",`+
		`"updated_at":%q,"head":{"sha":%q,"ref":"config","repo":{"pushed_at":%q}},"base":{"ref":"main"}},`+
		`"repository":{"full_name":"acme/app"},"installation":{"id":7}}`, now, head, now)
	if code, body := postAppWebhook(t, addr, "pull_request", opened); code != http.StatusAccepted {
		t.Fatalf("pull request: %d %s", code, body)
	}
	run := waitForCheckRuns(t, gh.GitHub, head, 1, out)[0]
	if run.Conclusion != "failure" || !strings.Contains(run.Summary, "secrets/prod.env") {
		t.Fatalf("the pull request's check run: %+v", run)
	}
	if len(run.Annotations) != 1 || run.Annotations[0].Path != "secrets/prod.env" {
		t.Fatalf("annotations: %+v", run.Annotations)
	}
	if n := gh.Requests(githubtest.OpListPullFiles); n != 1 {
		t.Fatalf("the pull request's files were read %d times", n)
	}

	rerun := fmt.Sprintf(`{"action":"rerequested","check_run":{"id":%d,"name":"amiss/local","head_sha":%q,"external_id":%q,`+
		`"status":"completed","conclusion":"failure","check_suite":{"id":5,"head_branch":"config","head_sha":%q},"pull_requests":[]},`+
		`"repository":{"full_name":"acme/app"},"installation":{"id":7}}`, run.ID, head, run.ExternalID, head)
	if code, body := postAppWebhook(t, addr, "check_run", rerun); code != http.StatusAccepted {
		t.Fatalf("re-run: %d %s", code, body)
	}
	again := waitForCheckRuns(t, gh.GitHub, head, 2, out)[1]
	if again.Conclusion != run.Conclusion || again.Summary != run.Summary {
		t.Fatalf("the re-run's check run %+v, the pull request's %+v", again, run)
	}
	if v := gh.Violations(); len(v) != 0 {
		t.Fatalf("requests GitHub's description refuses: %q", v)
	}
}
