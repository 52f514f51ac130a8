package bitbucket_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

func pullChange(n int) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketCloud, Repository: repo, SHA: hash(4)[:12], Event: change.PullRequest,
		Pull: &change.Pull{Number: n, Title: "as the webhook had it", TargetBranch: "main"}}
}

// What Bitbucket Cloud shows now of a pull request: its title and destination branch, in one
// request, or an error and no state.
func TestPullNowReadsTheTitleAndDestinationBitbucketCloudShows(t *testing.T) {
	providerapitest.CheckPullNow(t, func(t *testing.T) providerapitest.PullNowWorld {
		w := newReadWorld(t)
		return providerapitest.PullNowWorld{
			PullNow: w.client.PullNow,
			AddPull: func(n int, title, target string) {
				w.fake.AddPull(repo, bitbuckettest.Pull{ID: n, Title: title, Source: "feature", Destination: target, SourceCommit: hash(4), DestinationCommit: hash(1)})
			},
			Change:     pullChange,
			Answer:     func(code int) { w.fake.Answer = providerapitest.AnswerOnly(bitbuckettest.OpGetPull, code) },
			Reads:      func() int { return w.fake.Requests(bitbuckettest.OpGetPull) },
			Violations: w.fake.Violations,
			Refusal:    http.StatusForbidden,
			Refused:    func(err error) bool { var r *bitbucket.Refused; return errors.As(err, &r) },
		}
	})
}

// A Data Center server's change is not read through Bitbucket Cloud's API.
func TestPullNowOfADataCenterChangeSendsNothing(t *testing.T) {
	w := newReadWorld(t)
	w.fake.AddPull(repo, bitbuckettest.Pull{ID: 7, Title: "feat: x", Source: "feature", Destination: "main", SourceCommit: hash(4), DestinationCommit: hash(1)})
	s := pullChange(7)
	s.API = change.BitbucketDataCenter
	if got, err := w.client.PullNow(context.Background(), s); err == nil || got != (change.PullState{}) {
		t.Fatalf("PullNow = %+v, %v; want an error and no state", got, err)
	}
	if n := w.fake.Requests(bitbuckettest.OpGetPull); n != 0 {
		t.Fatalf("%d reads of the pull request, want none", n)
	}
}
