package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// One commit, one verdict: for every provider whose reader amiss has here (GitHub, Gitea,
// GitLab), a pull request's event and a re-evaluation of the same pull request give the same
// verdict, over generated pull requests (their titles, commits and files), and it is the
// verdict the rules give the pull request seen whole. The re-evaluations are the same change
// admitted again, and the pull request held without its title (as a GitHub Re-run holds it,
// and a title cut by amiss's bound): every input is then read from the provider.

// generatedPull is a pull request on commits 1..len(messages), each adding its files.
type generatedPull struct {
	title    string
	messages []string
	files    [][]string
}

func generatePull(r *rand.Rand) generatedPull {
	titles := []string{"feat: a feature", "feat: another", "feat: a third", "fix: a fix", "wip"}
	g := generatedPull{title: titles[r.IntN(len(titles))]}
	commits := 1 + r.IntN(60)
	seq := 0
	for n := range commits {
		msg := fmt.Sprintf("Change %d", n)
		if r.IntN(120) == 0 {
			msg = "lowercase " + msg
		}
		g.messages = append(g.messages, msg)
		var files []string
		for range r.IntN(6) {
			seq++
			dir := []string{"src", "docs", "test"}[r.IntN(3)]
			if r.IntN(250) == 0 {
				dir = "secrets"
			}
			files = append(files, fmt.Sprintf("%s/f%d", dir, seq))
		}
		g.files = append(g.files, files)
	}
	return g
}

// whole is the pull request as the rules would see it whole.
func (g generatedPull) whole(head change.Change) change.Change {
	s := head
	s.Pull = &change.Pull{Number: head.Pull.Number, Title: g.title, TargetBranch: "main", SourceBranch: "changes"}
	s.Commits, s.Paths = nil, nil
	for n, msg := range g.messages {
		s.Commits = append(s.Commits, change.Commit{ID: forgeCommit(n + 1), Message: msg})
		s.Paths = append(s.Paths, g.files[n]...)
	}
	s.Whole = change.AllInputs
	return s
}

// readerKind is a provider's fake loaded with a generated pull request, and the reader the
// provider table builds for it.
type readerKind struct {
	name string
	// serve loads g as pull request 9 of forgeRepo into a new fake, and returns it.
	serve func(g generatedPull) (srv *httptest.Server, violations func() []string)
	// rerun is the re-evaluation holding the pull request without its title.
	rerun func(s change.Change) change.Change
}

var readerKinds = []readerKind{
	{name: "github", serve: func(g generatedPull) (*httptest.Server, func() []string) {
		f := githubtest.New(githubtest.Token("read-token"))
		for n, msg := range g.messages {
			var files []githubtest.ChangedFile
			for _, p := range g.files[n] {
				files = append(files, githubtest.ChangedFile{Filename: p, Status: "added"})
			}
			f.AddCommit(forgeRepo, githubtest.HistoryCommit{SHA: forgeCommit(n + 1), Parent: forgeCommit(n), Message: msg, Files: files})
		}
		f.AddPull(forgeRepo, githubtest.HistoryPull{Number: 9, Title: g.title, Base: "main", Head: "changes", BaseSHA: forgeCommit(0),
			HeadSHA: forgeCommit(len(g.messages))})
		return httptest.NewServer(f), f.Violations
	}, rerun: func(s change.Change) change.Change {
		s.Event, s.Whole = change.Rerun, change.PullInput
		p := *s.Pull
		p.Title = ""
		s.Pull = &p
		return s
	}},
	{name: "gitea", serve: func(g generatedPull) (*httptest.Server, func() []string) {
		f := giteatest.New(func(tok string) bool { return tok == "read-token" })
		for n, msg := range g.messages {
			var files []giteatest.File
			for _, p := range g.files[n] {
				files = append(files, giteatest.File{Filename: p, Status: "added"})
			}
			f.AddCommit(forgeRepo, giteatest.Commit{SHA: forgeCommit(n + 1), Parent: forgeCommit(n), Message: msg, Files: files})
		}
		f.AddPull(forgeRepo, giteatest.Pull{Number: 9, Title: g.title, Base: "main", Head: "changes", BaseSHA: forgeCommit(0),
			HeadSHA: forgeCommit(len(g.messages))})
		return httptest.NewServer(f), f.Violations
	}, rerun: titleless},
	{name: "gitlab", serve: func(g generatedPull) (*httptest.Server, func() []string) {
		f := gitlabtest.New(func(tok string) bool { return tok == "read-token" })
		for n, msg := range g.messages {
			var files []gitlabtest.File
			for _, p := range g.files[n] {
				files = append(files, gitlabtest.File{Path: p, Status: "added"})
			}
			f.AddCommit(forgeRepo, gitlabtest.Commit{SHA: forgeCommit(n + 1), Parent: forgeCommit(n), Message: msg, Files: files})
		}
		f.AddMergeRequest(forgeRepo, gitlabtest.MergeRequest{IID: 9, Title: g.title, Source: "changes", Target: "main",
			BaseSHA: forgeCommit(0), HeadSHA: forgeCommit(len(g.messages))})
		return httptest.NewServer(f), f.Violations
	}, rerun: titleless},
}

// titleless is the pull request's change held without its title.
func titleless(s change.Change) change.Change {
	s.Whole = change.PullInput
	p := *s.Pull
	p.Title = ""
	s.Pull = &p
	return s
}

func TestAPullRequestAndItsReevaluationsGetOneVerdict(t *testing.T) {
	rules, err := evaluate.NewRules(config.Rules{PullRequestTitle: "^feat: ", CommitMessage: "^[A-Z]", ForbiddenPaths: []string{"secrets/**"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range readerKinds {
		t.Run(kind.name, func(t *testing.T) {
			states := map[string]int{}
			for seed := range uint64(8) {
				g := generatePull(rand.New(rand.NewPCG(seed, 37)))
				srv, violations := kind.serve(g)
				p, _ := provider.Sender(kind.name)
				reader := p.Reader(provider.Target{BaseURL: srv.URL, Token: "read-token", Client: srv.Client()})
				event := change.Change{Provider: kind.name, Repository: forgeRepo, SHA: forgeCommit(len(g.messages)), Event: change.PullRequest,
					Ref: "refs/heads/changes", Whole: change.TitleInput | change.PullInput,
					Pull: &change.Pull{Number: 9, Title: g.title, TargetBranch: "main", SourceBranch: "changes"}}
				want, _ := rules.Evaluate(context.Background(), g.whole(event))
				states[want.State]++

				b, _ := json.Marshal(event)
				w := newWorldWithChange(t, b)
				r := w.inputsRunner(rules, reader)
				drive(t, w, r, 5)
				for i, again := range []change.Change{event, kind.rerun(event)} {
					w.clock.Advance(time.Minute)
					w.msg = w.admit(t, again, fmt.Sprintf("re-evaluation %d", i))
					drive(t, w, r, 5)
				}
				srv.Close()
				if v := violations(); len(v) > 0 {
					t.Fatalf("seed %d: requests outside %s's API description: %v", seed, kind.name, v)
				}
				all := w.pub.all()
				if len(all) != 3 {
					t.Fatalf("seed %d: %d verdicts posted, want 3", seed, len(all))
				}
				for i, got := range all {
					if got.State != want.State || got.Description != want.Description {
						t.Fatalf("seed %d (%d commits, title %q): verdict %d is %s %q; the rules give the whole pull request %s %q",
							seed, len(g.messages), g.title, i, got.State, got.Description, want.State, want.Description)
					}
				}
				if want.State == evaluate.Failure && !strings.HasPrefix(all[0].Description, "failed: ") {
					t.Fatalf("seed %d: %q", seed, all[0].Description)
				}
			}
			if states[evaluate.Success] == 0 || states[evaluate.Failure] == 0 {
				t.Fatalf("the generated pull requests gave %v: both verdicts must be among them", states)
			}
		})
	}
}
