package github_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

// What GitHub shows now of a pull request, read with an installation's token: its title and
// base branch, in one request.

// pullChange is a pull request event's change of pull request n, from installation 2311213.
func pullChange(n int, title, target string) change.Change {
	return change.Change{Provider: "github", Repository: rerunRepo, SHA: commitN(2), Event: change.PullRequest, Installation: 2311213,
		Pull: &change.Pull{Number: n, Title: title, TargetBranch: target}}
}

func TestPullNowReadsTheTitleAndBaseGitHubShows(t *testing.T) {
	w := newRerunWorld(t)
	w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 7, Title: "feat: as it is now", Base: "release/2", Head: "topic",
		HeadSHA: commitN(2)})
	got, err := w.reader.PullNow(context.Background(), pullChange(7, "as the webhook had it", "main"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (change.PullState{Title: "feat: as it is now", TargetBranch: "release/2"}); got != want {
		t.Fatalf("PullNow = %+v, want %+v", got, want)
	}
	if n := w.history.Requests(githubtest.OpGetPull); n != 1 {
		t.Fatalf("%d reads of the pull request, want 1", n)
	}
	if v := w.history.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
}

// A refused read, an outage, a pull request GitHub does not know or a change naming none
// answer an error and no state: the runner then orders nothing by the read. An outage is not
// retried within the call: the read is sent once.
func TestAPullNowThatFailsAnswersAnErrorAndNoState(t *testing.T) {
	for _, c := range []struct {
		name    string
		answer  int
		number  int
		refused bool
		reads   int
	}{
		{name: "forbidden", answer: http.StatusForbidden, number: 7, refused: true, reads: 1},
		{name: "outage", answer: http.StatusBadGateway, number: 7, reads: 1},
		{name: "unknown pull request", number: 8, refused: true, reads: 1},
		{name: "no pull request", number: 0},
	} {
		w := newRerunWorld(t)
		w.history.AddPull(rerunRepo, githubtest.HistoryPull{Number: 7, Title: "feat: x", Base: "main", Head: "topic", HeadSHA: commitN(2)})
		w.history.Answer = func(op string, _ int) int {
			if op == githubtest.OpGetPull {
				return c.answer
			}
			return 0
		}
		s := pullChange(c.number, "feat: x", "main")
		if c.number == 0 {
			s.Pull = nil
		}
		got, err := w.reader.PullNow(context.Background(), s)
		if err == nil || got != (change.PullState{}) {
			t.Fatalf("%s: PullNow = %+v, %v; want an error and no state", c.name, got, err)
		}
		var refused *github.Refused
		if errors.As(err, &refused) != c.refused {
			t.Fatalf("%s: %v: refused %v, want %v", c.name, err, !c.refused, c.refused)
		}
		if c.answer == http.StatusBadGateway && providerapi.ClassOf(err) != providerapi.Transient {
			t.Fatalf("%s: %v is %v, want transient", c.name, err, providerapi.ClassOf(err))
		}
		if n := w.history.Requests(githubtest.OpGetPull); n != c.reads {
			t.Fatalf("%s: %d reads of the pull request, want %d", c.name, n, c.reads)
		}
	}
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
