package github

import (
	"context"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNow reads what GitHub shows now of s's pull request: its title and base branch (the
// runner's Route.PullNow, which orders two verdicts of one second by it). It costs one GET of
// pulls/{n}, with the credential and the permission of the reads of what a webhook lacks
// (Pull requests: read), sent once: the runner takes a failure for nothing read and goes on,
// so it is not worth a retry's wait; the client's timeout bounds it. A change naming no pull
// request, a refusal, an outage, or an answer without a title or base is an error, never a
// state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	return providerapi.PullNow(ctx, s, "GitHub", providerapi.PullRequestNumbered, func(ctx context.Context, n int) (string, string, error) {
		once := *c
		once.MaxAttempts = 1
		pr, err := once.PullRequest(ctx, s.Installation, s.Repository, n)
		if err != nil {
			return "", "", err
		}
		return pr.Title, pr.Base.Ref, nil
	})
}
