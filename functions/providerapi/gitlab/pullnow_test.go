package gitlab_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// What GitLab shows now of a merge request: its title and target branch, in one request.

func mergeRequestChange(iid int) change.Change {
	return change.Change{Provider: "gitlab", Repository: readProject, SHA: commitN(2), Event: change.PullRequest,
		Pull: &change.Pull{Number: iid, Title: "as the webhook had it", TargetBranch: "main"}}
}

func TestPullNowReadsTheTitleAndTargetGitLabShows(t *testing.T) {
	w := newReadWorld(t)
	w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "feat: as it is now", Source: "topic", Target: "release/2",
		HeadSHA: commitN(2)})
	got, err := w.reader.PullNow(context.Background(), mergeRequestChange(7))
	if err != nil {
		t.Fatal(err)
	}
	if want := (change.PullState{Title: "feat: as it is now", TargetBranch: "release/2"}); got != want {
		t.Fatalf("PullNow = %+v, want %+v", got, want)
	}
	if n := w.gitlab.Requests(gitlabtest.OpGetMR); n != 1 {
		t.Fatalf("%d reads of the merge request, want 1", n)
	}
	if v := w.gitlab.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitLab's API description: %v", v)
	}
}

// A refused read, an outage, a merge request GitLab does not know or a change naming none
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
		{name: "unknown merge request", number: 8, refused: true, reads: 1},
		{name: "no merge request"},
	} {
		w := newReadWorld(t)
		w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: 7, Title: "feat: x", Source: "topic", Target: "main", HeadSHA: commitN(2)})
		w.gitlab.Answer = func(op string, _ int) int {
			if op == gitlabtest.OpGetMR {
				return c.answer
			}
			return 0
		}
		s := mergeRequestChange(c.number)
		if c.number == 0 {
			s.Pull = nil
		}
		got, err := w.reader.PullNow(context.Background(), s)
		if err == nil || got != (change.PullState{}) {
			t.Fatalf("%s: PullNow = %+v, %v; want an error and no state", c.name, got, err)
		}
		var refused *gitlab.Refused
		if errors.As(err, &refused) != c.refused {
			t.Fatalf("%s: %v: refused %v, want %v", c.name, err, !c.refused, c.refused)
		}
		if n := w.gitlab.Requests(gitlabtest.OpGetMR); n != c.reads {
			t.Fatalf("%s: %d reads of the merge request, want %d", c.name, n, c.reads)
		}
	}
}
