package bitbucket

import (
	"context"
	"errors"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNow reads what Bitbucket Cloud shows now of s's pull request: its title and destination
// branch (the runner's Route.PullNow, which orders two verdicts of one second by it). It costs
// one GET of pullrequests/{id}, with the token and the scope of the reads of what a webhook
// lacks (pullrequest), sent once
// (providerapi.PullNow says why, and what is an error). A change naming no pull
// request or coming from a Data Center server, a refusal, an outage, or an answer without a
// title or destination is an error, never a state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	if s.API != "" && s.API != change.BitbucketCloud {
		return change.PullState{}, errors.New("the change came from a Bitbucket Data Center server, and the route reads Bitbucket Cloud's API")
	}
	return providerapi.PullNow(ctx, s, "Bitbucket Cloud", providerapi.PullRequestNumbered, func(ctx context.Context, n int) (string, string, error) {
		once := *c
		once.MaxAttempts = 1
		pr, err := once.PullRequest(ctx, s.Repository, n)
		if err != nil {
			return "", "", err
		}
		return pr.Title, pr.Destination.Branch.Name, nil
	})
}
