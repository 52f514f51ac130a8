package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// BenchmarkReadsPerDelivery measures the requests the runner sends to a provider's API to read
// what a delivery's webhook lacks, by route kind (the rules it has) and delivery (a pull
// request of so many commits and files; a push listed whole or in part), for each provider with
// a reader here. The publisher is a recorder: only reads are counted, in reads/delivery.
//
//	go test -run '^$' -bench ReadsPerDelivery -benchtime 3x ./functions/runner/
func BenchmarkReadsPerDelivery(b *testing.B) {
	kinds := []struct {
		name  string
		rules config.Rules
	}{
		{"title", config.Rules{PullRequestTitle: "^feat: "}},
		{"paths", config.Rules{ForbiddenPaths: []string{"secrets/**"}}},
		{"messages", config.Rules{CommitMessage: "^[A-Z]"}},
		{"all", config.Rules{PullRequestTitle: "^feat: ", CommitMessage: "^[A-Z]", ForbiddenPaths: []string{"secrets/**"}}},
	}
	pulls := []struct{ commits, perFile int }{{3, 4}, {60, 4}}
	for _, rk := range readerKinds {
		for _, kind := range kinds {
			rules, err := evaluate.NewRules(kind.rules)
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range pulls {
				g := benchPull(p.commits, p.perFile)
				name := fmt.Sprintf("%s/%s/pull-%d-commits-%d-files", rk.name, kind.name, p.commits, p.commits*p.perFile)
				b.Run(name, func(b *testing.B) {
					measureReads(b, rk, g, rules, func(head string) change.Change {
						return change.Change{Provider: rk.name, Repository: forgeRepo, SHA: head, Event: change.PullRequest,
							Ref: "refs/heads/changes", Whole: change.TitleInput | change.PullInput,
							Pull: &change.Pull{Number: 9, Title: g.title, TargetBranch: "main", SourceBranch: "changes"}}
					})
				})
			}
			// A push of 30 commits, as each provider's webhook lists it: GitHub every commit,
			// GitLab the newest 20, Gitea the newest 5; and one of 3 commits, listed whole (its
			// commits: no provider's push holds its paths whole).
			for _, n := range []int{3, 30} {
				g := benchPull(n, 1)
				listed := map[string]int{"github": n, "gitea": min(n, 5), "gitlab": min(n, 20)}[rk.name]
				b.Run(fmt.Sprintf("%s/%s/push-%d-commits-%d-listed", rk.name, kind.name, n, listed), func(b *testing.B) {
					measureReads(b, rk, g, rules, func(head string) change.Change {
						s := change.Change{Provider: rk.name, Repository: forgeRepo, SHA: head, Event: change.Push, Ref: "refs/heads/main",
							Before: forgeCommit(0), Whole: change.TitleInput | change.PullInput}
						for i := n - listed; i < n; i++ {
							s.Commits = append(s.Commits, change.Commit{ID: forgeCommit(i + 1), Message: g.messages[i]})
							s.Paths = append(s.Paths, g.files[i]...)
						}
						if listed == n {
							s.Whole = change.AllInputs
						}
						// No push holds its paths whole: each listed commit's files are
						// against its first parent, not what the push changes on its branch
						// (change.fromGitHubEvent, change.fromGitLab).
						s.Whole &^= change.PathsInput
						return s
					})
				})
			}
		}
	}
}

// benchPull is a clean pull request of commits commits, each adding perFile files.
func benchPull(commits, perFile int) generatedPull {
	g := generatedPull{title: "feat: measured"}
	for n := range commits {
		g.messages = append(g.messages, fmt.Sprintf("Change %d", n))
		var files []string
		for f := range perFile {
			files = append(files, fmt.Sprintf("src/c%d/f%d.go", n, f))
		}
		g.files = append(g.files, files)
	}
	return g
}

// measureReads delivers b.N deliveries of the change at g's head to a runner reading from
// rk's fake, and reports the reads per delivery.
func measureReads(b *testing.B, rk readerKind, g generatedPull, rules evaluate.Evaluator, changeAt func(head string) change.Change) {
	srv, _ := rk.serve(g)
	defer srv.Close()
	p, _ := provider.Sender(rk.name)
	reader := p.Reader(provider.Target{BaseURL: srv.URL, Token: "read-token", Client: srv.Client()})
	s, _ := json.Marshal(changeAt(forgeCommit(len(g.messages))))
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(b.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	pub := &recorder{}
	r := &runner.Runner{Log: slog.New(slog.DiscardHandler), Ledger: l, Owner: "a", Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond, RetryDelay: time.Second, Now: clock.Now,
		Routes: func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: rules, Publisher: pub, Inputs: reader, Context: "amiss"}, nil
		}}
	before := reads(srv)
	for i := range b.N {
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "bench", Identity: fmt.Sprint(i), BodyDigest: ledger.SumBody([]byte(fmt.Sprint(i)))},
			Change: s}
		if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
			b.Fatalf("admit: %+v %v", a, err)
		}
		m := queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
		for attempt := 0; ; attempt++ {
			res, err := r.Process(context.Background(), m)
			if err != nil || attempt > 5 {
				b.Fatalf("delivery %d, attempt %d: %+v %v", i, attempt, res, err)
			}
			if res.Done {
				break
			}
			clock.Set(res.RetryAt)
		}
		clock.Advance(time.Minute)
	}
	b.ReportMetric(float64(reads(srv)-before)/float64(b.N), "reads/delivery")
	if got := pub.all(); len(got) != b.N || got[0].State != evaluate.Success {
		b.Fatalf("verdicts %+v", got)
	}
}

// reads counts the requests a fake has answered.
func reads(srv *httptest.Server) int {
	switch f := srv.Config.Handler.(type) {
	case *githubtest.GitHub:
		n := 0
		for _, op := range []string{githubtest.OpGetPull, githubtest.OpListPullFiles, githubtest.OpListPullCommits, githubtest.OpCompareCommits, githubtest.OpGetCommit} {
			n += f.Requests(op)
		}
		return n
	case *giteatest.Gitea:
		return f.AllRequests()
	case *gitlabtest.GitLab:
		return f.AllRequests()
	}
	panic("unknown fake")
}
