package bitbucketdc_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

func pullChange(n int) change.Change {
	return change.Change{Provider: "bitbucket", API: change.BitbucketDataCenter, Repository: repo, SHA: hash(4), Event: change.PullRequest,
		Pull: &change.Pull{Number: n, Title: "as the webhook had it", TargetBranch: "main"}}
}

// What a Data Center server shows now of a pull request: its title and target branch, in one
// request, or an error and no state.
func TestPullNowReadsTheTitleAndTargetBitbucketDataCenterShows(t *testing.T) {
	providerapitest.CheckPullNow(t, func(t *testing.T) providerapitest.PullNowWorld {
		w := newReadWorld(t)
		return providerapitest.PullNowWorld{
			PullNow: w.client.PullNow,
			AddPull: func(n int, title, target string) {
				w.fake.AddPull(repo, bitbucketdctest.Pull{ID: n, Title: title, FromBranch: "feature", ToBranch: target, FromCommit: hash(4), ToCommit: hash(1)})
			},
			Change:     pullChange,
			Answer:     func(code int) { w.fake.Answer = providerapitest.AnswerOnly(bitbucketdctest.OpGetPull, code) },
			Reads:      func() int { return w.fake.Requests(bitbucketdctest.OpGetPull) },
			Violations: w.fake.Violations,
			Refusal:    http.StatusUnauthorized,
			Refused:    func(err error) bool { var r *bitbucketdc.Refused; return errors.As(err, &r) },
		}
	})
}

// Bitbucket Cloud's change is not read through a Data Center server's API.
func TestPullNowOfABitbucketCloudChangeSendsNothing(t *testing.T) {
	w := newReadWorld(t)
	w.fake.AddPull(repo, bitbucketdctest.Pull{ID: 7, Title: "feat: x", FromBranch: "feature", ToBranch: "main", FromCommit: hash(4), ToCommit: hash(1)})
	s := pullChange(7)
	s.API = change.BitbucketCloud
	if got, err := w.client.PullNow(context.Background(), s); err == nil || got != (change.PullState{}) {
		t.Fatalf("PullNow = %+v, %v; want an error and no state", got, err)
	}
	if n := w.fake.Requests(bitbucketdctest.OpGetPull); n != 0 {
		t.Fatalf("%d reads of the pull request, want none", n)
	}
}
