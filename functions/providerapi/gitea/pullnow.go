package gitea

import (
	"context"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNow reads what the server shows now of s's pull request: its title and base branch (the
// runner's Route.PullNow, which orders two verdicts of one second by it). It costs one GET of
// repoGetPullRequest, with the token and the scope of the reads of what a webhook lacks
// (read:repository), sent once: the runner takes a failure for nothing read and goes on, so it
// is not worth a retry's wait; the client's timeout bounds it. A change naming no pull
// request, a refusal, an outage, or an answer without a title or base is an error, never a
// state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	return providerapi.PullNow(ctx, s, displayName(s.Provider), providerapi.PullRequestNumbered, func(ctx context.Context, n int) (string, string, error) {
		once := *c
		once.MaxAttempts = 1
		pr, err := once.PullRequest(ctx, s.Repository, n)
		if err != nil {
			return "", "", err
		}
		return pr.Title, pr.Base.Ref, nil
	})
}
