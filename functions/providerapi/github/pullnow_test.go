package github_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// pullChange is a pull request event's change of pull request n, from installation 2311213.
func pullChange(n int, title, target string) change.Change {
	return change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(2), Event: change.PullRequest, Installation: 2311213,
		Pull: &change.Pull{Number: n, Title: title, TargetBranch: target}}
}

// What GitHub shows now of a pull request, read with an installation's token: its title and
// base branch, in one request, or an error and no state (the runner then orders nothing by the
// read).
func TestPullNowReadsTheTitleAndBaseGitHubShows(t *testing.T) {
	providerapitest.CheckPullNow(t, func(t *testing.T) providerapitest.PullNowWorld {
		w := newRerunWorld(t)
		return providerapitest.PullNowWorld{
			PullNow: w.reader.PullNow,
			AddPull: func(n int, title, target string) {
				w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: n, Title: title, Base: target, Head: "topic", HeadSHA: commitN(2)})
			},
			Change:     func(n int) change.Change { return pullChange(n, "as the webhook had it", "main") },
			Answer:     func(code int) { w.history.Answer = providerapitest.AnswerOnly(githubtest.OpGetPull, code) },
			Reads:      func() int { return w.history.Requests(githubtest.OpGetPull) },
			Violations: w.history.Violations,
			Refusal:    http.StatusForbidden,
			Refused:    func(err error) bool { var r *github.Refused; return errors.As(err, &r) },
		}
	})
}

// An App's client sends each request with an installation's token: a change whose webhook
// named no installation is not read.
func TestPullNowOfAChangeWithoutAnInstallationSendsNothing(t *testing.T) {
	w := newRerunWorld(t)
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 7, Title: "feat: x", Base: "main", Head: "topic", HeadSHA: commitN(2)})
	s := pullChange(7, "feat: x", "main")
	s.Installation = 0
	if got, err := w.reader.PullNow(context.Background(), s); !errors.Is(err, github.ErrNoInstallation) || got != (change.PullState{}) {
		t.Fatalf("PullNow = %+v, %v; want ErrNoInstallation", got, err)
	}
	if n := w.history.Requests(githubtest.OpGetPull); n != 0 {
		t.Fatalf("%d reads of the pull request, want none", n)
	}
}
