package gitea_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
)

// What the server shows now of a pull request: its title and base branch, in one request.

func pullChange(n int) change.Change {
	return change.Change{Provider: "gitea", Repository: readRepo, SHA: commitN(2), Event: change.PullRequest,
		Pull: &change.Pull{Number: n, Title: "as the webhook had it", TargetBranch: "main"}}
}

func TestPullNowReadsTheTitleAndBaseGiteaShows(t *testing.T) {
	w := newReadWorld(t)
	w.gitea.AddPull(readRepo, giteatest.Pull{Number: 7, Title: "feat: as it is now", Base: "release/2", Head: "topic", HeadSHA: commitN(2)})
	got, err := w.reader.PullNow(context.Background(), pullChange(7))
	if err != nil {
		t.Fatal(err)
	}
	if want := (change.PullState{Title: "feat: as it is now", TargetBranch: "release/2"}); got != want {
		t.Fatalf("PullNow = %+v, want %+v", got, want)
	}
	if n := w.gitea.Requests(giteatest.OpGetPull); n != 1 {
		t.Fatalf("%d reads of the pull request, want 1", n)
	}
	if v := w.gitea.Violations(); len(v) > 0 {
		t.Fatalf("requests outside Gitea's API description: %v", v)
	}
}

// A refused read, an outage, a pull request the server does not know or a change naming none
// answer an error and no state; an outage is not retried within the call.
func TestAPullNowThatFailsAnswersAnErrorAndNoState(t *testing.T) {
	for _, c := range []struct {
		name           string
		answer, number int
		refused        bool
		reads          int
	}{
		{name: "forbidden", answer: http.StatusForbidden, number: 7, refused: true, reads: 1},
		{name: "outage", answer: http.StatusServiceUnavailable, number: 7, reads: 1},
		{name: "unknown pull request", number: 8, refused: true, reads: 1},
		{name: "no pull request"},
	} {
		w := newReadWorld(t)
		w.gitea.AddPull(readRepo, giteatest.Pull{Number: 7, Title: "feat: x", Base: "main", Head: "topic", HeadSHA: commitN(2)})
		w.gitea.Answer = func(op string, _ int) int {
			if op == giteatest.OpGetPull {
				return c.answer
			}
			return 0
		}
		s := pullChange(c.number)
		if c.number == 0 {
			s.Pull = nil
		}
		got, err := w.reader.PullNow(context.Background(), s)
		if err == nil || got != (change.PullState{}) {
			t.Fatalf("%s: PullNow = %+v, %v; want an error and no state", c.name, got, err)
		}
		var refused *gitea.Refused
		if errors.As(err, &refused) != c.refused {
			t.Fatalf("%s: %v: refused %v, want %v", c.name, err, !c.refused, c.refused)
		}
		if n := w.gitea.Requests(giteatest.OpGetPull); n != c.reads {
			t.Fatalf("%s: %d reads of the pull request, want %d", c.name, n, c.reads)
		}
	}
}
