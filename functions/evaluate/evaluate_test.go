package evaluate_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
)

func rules(t *testing.T) *evaluate.Rules {
	r, err := evaluate.NewRules(config.Rules{
		PullRequestTitle: `^(feat|fix)(\([a-z]+\))?: `,
		CommitMessage:    `^[A-Z]`,
		ForbiddenPaths:   []string{"secrets/**", "**/*.pem"},
		TargetBranches:   []string{"main", "release/*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRules(t *testing.T) {
	r := rules(t)
	ctx := context.Background()
	pr := func(title, target string) change.Change {
		return change.Change{Event: "pull_request", Pull: &change.Pull{Title: title, TargetBranch: target}, Whole: change.AllInputs}
	}
	push := func(s change.Change) change.Change { s.Event, s.Whole = "push", change.AllInputs; return s }
	cases := []struct {
		s      change.Change
		state  string
		naming []string
	}{
		{pr("feat(api): add", "main"), evaluate.Success, nil},
		{pr("feat: add", "release/1.2"), evaluate.Success, nil},
		{pr("add stuff", "main"), evaluate.Failure, []string{"pull request title"}},
		{pr("fix: x", "develop"), evaluate.Failure, []string{"target branch develop"}},
		{pr("oops", "develop"), evaluate.Failure, []string{"pull request title", "target branch develop"}},
		{push(change.Change{Commits: []change.Commit{{ID: "0123456789abcdef", Message: "Good"}},
			Paths: []string{"a/b.go", "deploy/keys/server.pem"}}), evaluate.Failure, []string{"forbidden path deploy/keys/server.pem (**/*.pem)"}},
		{push(change.Change{Paths: []string{"secrets/prod/env"}}), evaluate.Failure, []string{"forbidden path secrets/prod/env (secrets/**)"}},
		{push(change.Change{Paths: []string{"src/secrets.go"}}), evaluate.Success, nil},
		{push(change.Change{Commits: []change.Commit{{ID: "0123456789abcdef", Message: "lower case"}}}), evaluate.Failure,
			[]string{"commit message of 0123456789ab"}},
	}
	for i, c := range cases {
		v, err := r.Evaluate(ctx, c.s)
		if err != nil || v.State != c.state {
			t.Fatalf("case %d: %+v %v, want %s", i, v, err, c.state)
		}
		for _, n := range c.naming {
			if !strings.Contains(v.Description, n) {
				t.Fatalf("case %d: description %q does not name %q", i, v.Description, n)
			}
		}
	}
}

// A rule whose input the change does not hold whole fails closed, naming what could not be
// read and why; a forbidden path among those read still names the path. A rule that holds
// does not depend on inputs it does not need.
func TestARuleFailsClosedOnWhatItCouldNotSee(t *testing.T) {
	r := rules(t)
	ctx := context.Background()
	granted := "GitHub answered 403; grant the GitHub App the Pull requests: read permission"
	pr := change.Change{Event: "pull_request", Pull: &change.Pull{Title: "feat: x", TargetBranch: "main"},
		Whole: change.TitleInput | change.PullInput}
	cases := []struct {
		name   string
		s      func() change.Change
		naming []string
		absent []string
	}{
		{"a pull request whose files and commits were not read", func() change.Change { return pr },
			[]string{"commit messages, changed paths (could not be read"}, []string{"pull request title"}},
		{"a refused read names what to grant", func() change.Change {
			s := pr
			s.MarkUnread(change.CommitsInput|change.PathsInput, granted)
			return s
		}, []string{"commit messages, changed paths (could not be read: " + granted + ")"}, nil},
		{"paths read in part: a forbidden one among them is named", func() change.Change {
			s := pr
			s.Whole |= change.CommitsInput
			s.Commits = []change.Commit{{ID: "0123456789abcdef", Message: "Fine"}}
			s.Paths = []string{"secrets/prod.env"}
			s.MarkUnread(change.PathsInput, "GitHub lists at most 3,000 files of a pull request")
			return s
		}, []string{"forbidden path secrets/prod.env"}, []string{"could not be read"}},
		{"commits cut by the provider", func() change.Change {
			s := pr
			s.Whole |= change.PathsInput
			s.Commits = []change.Commit{{ID: "0123456789abcdef", Message: "Fine"}}
			s.MarkUnread(change.CommitsInput, "GitHub lists at most 250 commits of a pull request")
			return s
		}, []string{"commit messages (could not be read: GitHub lists at most 250 commits"}, []string{"changed paths"}},
		{"a re-run whose pull request cannot be identified", func() change.Change {
			s := change.Change{Event: "rerun", Whole: change.CommitsInput | change.PathsInput}
			s.MarkUnread(change.PullInput|change.TitleInput, "the re-run's check run names no pull request")
			return s
		}, []string{"pull request title (could not be read: the re-run's check run names no pull request"}, []string{"target branch"}},
		{"a re-run of a push: no pull request rules apply", func() change.Change {
			return change.Change{Event: "rerun", Whole: change.AllInputs}
		}, nil, []string{"pull request", "target branch"}},
		{"a push whose webhook listed part of its commits", func() change.Change {
			return change.Change{Event: "push", Whole: change.TitleInput | change.PullInput | change.PathsInput,
				Commits: []change.Commit{{ID: "0123456789abcdef", Message: "Fine"}}}
		}, []string{"commit messages (could not be read"}, []string{"changed paths"}},
	}
	for _, c := range cases {
		v, err := r.Evaluate(ctx, c.s())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := evaluate.Failure
		if len(c.naming) == 0 {
			want = evaluate.Success
		}
		if v.State != want {
			t.Errorf("%s: %s %q, want %s", c.name, v.State, v.Description, want)
		}
		for _, n := range c.naming {
			if !strings.Contains(v.Description, n) {
				t.Errorf("%s: %q does not name %q", c.name, v.Description, n)
			}
		}
		for _, n := range c.absent {
			if strings.Contains(v.Description, n) {
				t.Errorf("%s: %q names %q", c.name, v.Description, n)
			}
		}
	}
}

// The rules say which inputs they need, and only those: a route with a title rule alone needs
// nothing a pull request's webhook lacks, and nothing at all on a push.
func TestRulesNeedOnlyWhatTheyCheck(t *testing.T) {
	need := func(rs config.Rules, event string) change.Inputs {
		r, err := evaluate.NewRules(rs)
		if err != nil {
			t.Fatal(err)
		}
		return r.Needs(change.Change{Event: event})
	}
	title := config.Rules{PullRequestTitle: "^feat"}
	for _, c := range []struct {
		rules config.Rules
		event string
		want  change.Inputs
	}{
		{title, "pull_request", change.TitleInput | change.PullInput},
		{title, "push", 0},
		{config.Rules{TargetBranches: []string{"main"}}, "rerun", change.PullInput},
		{config.Rules{CommitMessage: "^[A-Z]"}, "push", change.CommitsInput},
		{config.Rules{ForbiddenPaths: []string{"secrets/**"}}, "pull_request", change.PathsInput},
		{config.Rules{}, "pull_request", 0},
	} {
		if got := need(c.rules, c.event); got != c.want {
			t.Errorf("%+v on %s: needs %q, want %q", c.rules, c.event, got, c.want)
		}
	}
}

func TestHTTPEvaluator(t *testing.T) {
	secret := []byte("evaluator-secret")
	var answer string
	var status int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(r.Header.Get("X-Amiss-Timestamp") + "."))
		mac.Write(body)
		if r.Header.Get("X-Amiss-Signature-256") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var s change.Change
		if json.Unmarshal(body, &s) != nil || s.Repository != "acme/app" {
			http.Error(w, "bad change", http.StatusBadRequest)
			return
		}
		if status != 0 {
			w.WriteHeader(status)
		}
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	e := &evaluate.HTTP{URL: srv.URL, Secret: secret, Timeout: time.Second}
	s := change.Change{Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: "push"}
	answer = `{"state":"failure","description":"licence check failed"}`
	v, err := e.Evaluate(context.Background(), s)
	if err != nil || v.State != evaluate.Failure || v.Description != "licence check failed" {
		t.Fatalf("%+v %v", v, err)
	}
	for _, bad := range []struct {
		answer string
		status int
	}{{`{"state":"pending"}`, 0}, {`not json`, 0}, {`{"state":"success"}`, 500}} {
		answer, status = bad.answer, bad.status
		if _, err := e.Evaluate(context.Background(), s); err == nil {
			t.Fatalf("answer %q (%d) taken as a verdict", bad.answer, bad.status)
		}
	}
	wrong := &evaluate.HTTP{URL: srv.URL, Secret: []byte("other"), Timeout: time.Second}
	status, answer = 0, `{"state":"success"}`
	if _, err := wrong.Evaluate(context.Background(), s); err == nil {
		t.Fatal("the endpoint accepted a request signed with another secret")
	}
}

// TestHTTPEvaluatorFollowsNoRedirect: a redirect is never followed. A 307 or 308 would send the
// signed request (change and signature, replayable within the timestamp window) to wherever
// the answer points; a 301, 302 or 303 turns the POST into a GET, whose answer is not an
// evaluation of the change even when it reads like a verdict. Either is an error naming
// where the redirect pointed, and the other host hears nothing.
func TestHTTPEvaluatorFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Write([]byte(`{"state":"success","description":"not an evaluation"}`))
	}))
	defer other.Close()
	for _, code := range []int{301, 302, 303, 307, 308} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/moved", code)
		}))
		e := &evaluate.HTTP{URL: srv.URL, Secret: []byte("s"), Client: srv.Client(), Timeout: time.Second}
		v, err := e.Evaluate(context.Background(), change.Change{Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: "push"})
		srv.Close()
		if err == nil {
			t.Fatalf("%d: a redirect was followed and %+v taken as the verdict", code, v)
		}
		if !strings.Contains(err.Error(), other.URL+"/moved") || !strings.Contains(err.Error(), fmt.Sprint(code)) {
			t.Errorf("%d: the error does not say where the redirect pointed: %v", code, err)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect target was sent %d requests", n)
	}
}

// The evaluator's configured timeout bounds its call, not the timeout of the client it was
// given: the runner's wiring shares one client (15 s) among every route, and a route may allow
// its evaluator up to 5 minutes. Copying that client whole cut every evaluation at the
// client's timeout, and an evaluator configured for longer failed every attempt, then got an
// error verdict.
func TestHTTPEvaluatorTimeoutOverridesTheClients(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // slower than the client's timeout, within the evaluator's
		w.Write([]byte(`{"state":"success","description":"all checks hold"}`))
	}))
	defer srv.Close()
	client := srv.Client()
	client.Timeout = 50 * time.Millisecond
	e := &evaluate.HTTP{URL: srv.URL, Secret: []byte("s"), Client: client, Timeout: 5 * time.Second}
	v, err := e.Evaluate(context.Background(), change.Change{Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: "push"})
	if err != nil || v.State != evaluate.Success {
		t.Fatalf("an evaluator allowed 5 s answering in 300 ms, through a client with a 50 ms timeout: %+v %v", v, err)
	}
	if client.Timeout != 50*time.Millisecond {
		t.Fatalf("the caller's client was changed: timeout %s", client.Timeout)
	}
	e.Timeout = 100 * time.Millisecond
	if _, err := e.Evaluate(context.Background(), change.Change{Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: "push"}); err == nil {
		t.Fatal("an evaluator allowed 100 ms answering in 300 ms was answered")
	}
}

// The forbidden-paths rule names the first forbidden path in the description and lists every
// forbidden one in Files, in the order of the changed paths; a verdict that holds has none.
func TestForbiddenPathsAreAllListed(t *testing.T) {
	r := rules(t)
	v, err := r.Evaluate(context.Background(), change.Change{Event: "push",
		Paths: []string{"README.md", "secrets/a", "cmd/key.pem", "main.go", "secrets/b/c"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"secrets/a", "cmd/key.pem", "secrets/b/c"}
	if v.State != evaluate.Failure || !strings.Contains(v.Description, "forbidden path secrets/a (secrets/**)") || len(v.Files) != len(want) {
		t.Fatalf("verdict %+v", v)
	}
	for i, f := range v.Files {
		if f.Path != want[i] || f.Rule != evaluate.ForbiddenPathRule || !strings.Contains(f.Message, want[i]) {
			t.Fatalf("file %d: %+v, want %s", i, f, want[i])
		}
	}
	if v, _ := r.Evaluate(context.Background(), change.Change{Event: "push", Paths: []string{"README.md"}, Whole: change.AllInputs}); v.State != evaluate.Success || v.Files != nil {
		t.Fatalf("verdict %+v", v)
	}
}

// A re-run carries no changed paths, commit messages or pull request title: each configured
// rule that needs them fails closed, saying why; one that needs none (the target branch) is
// checked as for any pull request.
func TestARerunFailsClosedOnWhatItDoesNotCarry(t *testing.T) {
	rerun := change.Change{Event: change.Rerun, Whole: change.PullInput, Pull: &change.Pull{Number: 2, TargetBranch: "main", SourceBranch: "x"}}
	v, err := rules(t).Evaluate(context.Background(), rerun)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"pull request title, commit messages, changed paths (could not be read"} {
		if v.State != evaluate.Failure || !strings.Contains(v.Description, rule) {
			t.Fatalf("re-run verdict %q does not fail closed on %q", v.Description, rule)
		}
	}
	if strings.Contains(v.Description, "target branch") {
		t.Fatalf("re-run verdict %q fails the target branch main", v.Description)
	}
	branch, err := evaluate.NewRules(config.Rules{TargetBranches: []string{"main"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := branch.Evaluate(context.Background(), rerun); v.State != evaluate.Success {
		t.Fatalf("a re-run onto main under a target branch rule: %+v", v)
	}
}

// A re-run whose inputs the runner read from the provider (held whole) is evaluated like the
// event it re-runs: a clean one succeeds, a forbidden path fails and is listed, and paths the
// provider's listing cut still fail closed.
func TestAFilledRerunIsEvaluatedLikeTheEventItReruns(t *testing.T) {
	clean := change.Change{Event: change.Rerun, Whole: change.AllInputs, Pull: &change.Pull{Number: 2, Title: "feat: add it", TargetBranch: "main"},
		Commits: []change.Commit{{ID: "a1", Message: "Add it"}}, Paths: []string{"docs/it.md"}}
	if v, err := rules(t).Evaluate(context.Background(), clean); err != nil || v.State != evaluate.Success {
		t.Fatalf("a clean filled re-run: %+v %v", v, err)
	}
	forbidden := clean
	forbidden.Paths = []string{"docs/it.md", "secrets/key.pem"}
	v, _ := rules(t).Evaluate(context.Background(), forbidden)
	if v.State != evaluate.Failure || !strings.Contains(v.Description, "forbidden path secrets/key.pem") ||
		len(v.Files) != 1 || v.Files[0].Path != "secrets/key.pem" {
		t.Fatalf("a filled re-run changing a forbidden path: %+v", v)
	}
	cut := clean
	cut.MarkUnread(change.PathsInput, "GitHub lists at most 300 files of a comparison")
	if v, _ := rules(t).Evaluate(context.Background(), cut); v.State != evaluate.Failure ||
		!strings.Contains(v.Description, "changed paths (could not be read: GitHub lists at most 300 files") {
		t.Fatalf("a filled re-run cut to the bounds: %+v", v)
	}
}

// A re-run whose inputs could not be read (a permission the App lacks) fails closed on each
// rule that needs them, naming why once after the rules it failed.
func TestARerunWhoseInputsCouldNotBeReadFailsClosedNamingWhy(t *testing.T) {
	rerun := change.Change{Event: change.Rerun, Whole: change.PullInput, Pull: &change.Pull{Number: 2, TargetBranch: "main"}}
	rerun.MarkUnread(change.TitleInput|change.CommitsInput|change.PathsInput, "grant the GitHub App Contents: read")
	v, _ := rules(t).Evaluate(context.Background(), rerun)
	for _, rule := range []string{"pull request title, commit messages, changed paths (could not be read: grant the GitHub App Contents: read)"} {
		if v.State != evaluate.Failure || !strings.Contains(v.Description, rule) {
			t.Fatalf("re-run verdict %q does not fail closed on %q", v.Description, rule)
		}
	}
}

// A re-run's commits and changed paths are its pull request's or its push's: a rule that
// needs them needs the pull request too (a fork's re-run names none), and a rule that needs
// neither reads nothing more.
func TestARerunsCommitsAndPathsNeedItsPullRequest(t *testing.T) {
	rerun := change.Change{Event: change.Rerun}
	for _, c := range []struct {
		rules config.Rules
		want  change.Inputs
	}{
		{config.Rules{ForbiddenPaths: []string{"secrets/**"}}, change.PathsInput | change.PullInput},
		{config.Rules{CommitMessage: "^[A-Z]"}, change.CommitsInput | change.PullInput},
		{config.Rules{PullRequestTitle: "^feat: "}, change.TitleInput | change.PullInput},
	} {
		r, err := evaluate.NewRules(c.rules)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Needs(rerun); got != c.want {
			t.Errorf("%+v needs %q of a re-run, want %q", c.rules, got, c.want)
		}
		push := change.Change{Event: change.Push}
		if got := r.Needs(push); got.Has(change.PullInput) {
			t.Errorf("%+v needs %q of a push, which has no pull request", c.rules, got)
		}
	}
}

// Rules that failed closed for one reason name it once, after them, where the first of them
// failed; a rule that failed for another reason names its own, and a rule that failed on what
// it read keeps its place. A status description is short (GitHub keeps 140 characters): a
// reason repeated for every rule pushed the rest out of it.
func TestAReasonSharedByRulesIsSaidOnce(t *testing.T) {
	pr := change.Change{Event: change.PullRequest, Pull: &change.Pull{Title: "WIP", TargetBranch: "main"},
		Whole: change.TitleInput | change.PullInput}
	pr.MarkUnread(change.CommitsInput, "grant the token read_api")
	pr.MarkUnread(change.PathsInput, "grant the token read_api")
	v, err := rules(t).Evaluate(context.Background(), pr)
	if err != nil {
		t.Fatal(err)
	}
	want := "failed: pull request title; commit messages, changed paths (could not be read: grant the token read_api)"
	if v.State != evaluate.Failure || v.Description != want {
		t.Fatalf("verdict %s %q, want %q", v.State, v.Description, want)
	}
	pr.Unread = nil
	pr.MarkUnread(change.CommitsInput, "GitLab answered 403")
	pr.MarkUnread(change.PathsInput, "GitLab cuts the diff at 1,000 files")
	v, _ = rules(t).Evaluate(context.Background(), pr)
	want = "failed: pull request title; commit messages (could not be read: GitLab answered 403); changed paths (could not be read: GitLab cuts the diff at 1,000 files)"
	if v.Description != want {
		t.Fatalf("description %q, want %q", v.Description, want)
	}
}

// target_branches is a pull request's rule: a push has no target branch, and passes it
// whatever branch it updates; a pull request onto another branch fails it.
func TestTargetBranchesJudgePullRequestsOnly(t *testing.T) {
	r, err := evaluate.NewRules(config.Rules{TargetBranches: []string{"main", "release/**"}})
	if err != nil {
		t.Fatal(err)
	}
	push := change.Change{Event: change.Push, Ref: "refs/heads/feature/x", Whole: change.AllInputs}
	if v, _ := r.Evaluate(context.Background(), push); v.State != evaluate.Success {
		t.Errorf("a push to feature/x: %s %q", v.State, v.Description)
	}
	for target, holds := range map[string]bool{"main": true, "release/2/hotfix": true, "feature/x": false, "Main": false} {
		pr := change.Change{Event: change.PullRequest, Whole: change.AllInputs, Pull: &change.Pull{Number: 1, TargetBranch: target}}
		v, _ := r.Evaluate(context.Background(), pr)
		if (v.State == evaluate.Success) != holds {
			t.Errorf("a pull request onto %s: %s %q", target, v.State, v.Description)
		}
	}
}

// A route without rules needs nothing and passes every change, whatever it holds whole.
func TestNoRulesPassEverything(t *testing.T) {
	r, err := evaluate.NewRules(config.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	s := change.Change{Event: change.PullRequest, Pull: &change.Pull{Number: 1}}
	if need := r.Needs(s); need != 0 {
		t.Errorf("no rules need %q", need)
	}
	if v, _ := r.Evaluate(context.Background(), s); v.State != evaluate.Success {
		t.Errorf("no rules: %s %q", v.State, v.Description)
	}
}
