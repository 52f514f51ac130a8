package bitbucketdc

import (
	"context"
	"errors"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNow reads what the Data Center server shows now of s's pull request: its title and
// target branch (the runner's Route.PullNow, which orders two verdicts of one second by it).
// It costs one GET of pull-requests/{id}, with the token and the permission of the reads of
// what a webhook lacks (REPO_READ), sent once: the runner takes a failure for nothing read and
// goes on, so it is not worth a retry's wait; the client's timeout bounds it. A change naming
// no pull request or coming from Bitbucket Cloud, a refusal, an outage, or an answer without a
// title or target is an error, never a state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	if s.API != "" && s.API != change.BitbucketDataCenter {
		return change.PullState{}, errors.New("the change came from Bitbucket Cloud, and the route reads a Bitbucket Data Center server's API")
	}
	return providerapi.PullNow(ctx, s, "Bitbucket Data Center", providerapi.PullRequestNumbered, func(ctx context.Context, n int) (string, string, error) {
		once := *c
		once.MaxAttempts = 1
		pr, err := once.PullRequest(ctx, s.Repository, n)
		if err != nil {
			return "", "", err
		}
		return pr.Title, pr.ToRef.DisplayID, nil
	})
}
