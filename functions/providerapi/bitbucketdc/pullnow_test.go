package bitbucketdc_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
)

// What a Data Center server shows now of a pull request: its title and target branch, in one
// request.

func pullChange(n int) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketDataCenter, Repository: repo, SHA: hash(4), Event: change.PullRequest,
		Pull: &change.Pull{Number: n, Title: "as the webhook had it", TargetBranch: "main"}}
}

func TestPullNowReadsTheTitleAndTargetBitbucketDataCenterShows(t *testing.T) {
	w := newReadWorld(t)
	w.fake.AddPull(repo, bitbucketdctest.Pull{ID: 7, Title: "feat: as it is now", FromBranch: "feature", ToBranch: "release/2",
		FromCommit: hash(4), ToCommit: hash(1)})
	got, err := w.client.PullNow(context.Background(), pullChange(7))
	if err != nil {
		t.Fatal(err)
	}
	if want := (change.PullState{Title: "feat: as it is now", TargetBranch: "release/2"}); got != want {
		t.Fatalf("PullNow = %+v, want %+v", got, want)
	}
	if n := w.fake.Requests(bitbucketdctest.OpGetPull); n != 1 {
		t.Fatalf("%d reads of the pull request, want 1", n)
	}
}

// A refused read, an outage, a pull request the server does not know, a change naming none or
// Bitbucket Cloud's change answer an error and no state; an outage is not retried within the
// call.
func TestAPullNowThatFailsAnswersAnErrorAndNoState(t *testing.T) {
	for _, c := range []struct {
		name           string
		answer, number int
		api            string
		refused        bool
		reads          int
	}{
		{name: "unauthorized", answer: http.StatusUnauthorized, number: 7, refused: true, reads: 1},
		{name: "outage", answer: http.StatusServiceUnavailable, number: 7, reads: 1},
		{name: "unknown pull request", number: 8, refused: true, reads: 1},
		{name: "no pull request"},
		{name: "Bitbucket Cloud's", number: 7, api: change.BitbucketCloud},
	} {
		w := newReadWorld(t)
		w.fake.AddPull(repo, bitbucketdctest.Pull{ID: 7, Title: "feat: x", FromBranch: "feature", ToBranch: "main", FromCommit: hash(4),
			ToCommit: hash(1)})
		w.fake.Answer = func(op string, _ int) int {
			if op == bitbucketdctest.OpGetPull {
				return c.answer
			}
			return 0
		}
		s := pullChange(c.number)
		if c.number == 0 {
			s.Pull = nil
		}
		if c.api != "" {
			s.API = c.api
		}
		got, err := w.client.PullNow(context.Background(), s)
		if err == nil || got != (change.PullState{}) {
			t.Fatalf("%s: PullNow = %+v, %v; want an error and no state", c.name, got, err)
		}
		var refused *bitbucketdc.Refused
		if errors.As(err, &refused) != c.refused {
			t.Fatalf("%s: %v: refused %v, want %v", c.name, err, !c.refused, c.refused)
		}
		if n := w.fake.Requests(bitbucketdctest.OpGetPull); n != c.reads {
			t.Fatalf("%s: %d reads of the pull request, want %d", c.name, n, c.reads)
		}
	}
}
