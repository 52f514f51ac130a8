package gitlab

import (
	"context"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNow reads what GitLab shows now of s's merge request: its title and target branch (the
// runner's Route.PullNow, which orders two verdicts of one second by it). It costs one GET of
// merge_requests/{iid}, with the token and the scope of the reads of what a webhook lacks
// (read_api), sent once: the runner takes a failure for nothing read and goes on, so it is not
// worth a retry's wait; the client's timeout bounds it. A change naming no merge request, a
// refusal, an outage, or an answer without a title or target branch is an error, never a state
// made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	return providerapi.PullNow(ctx, s, "GitLab", func(n int) string { return fmt.Sprintf("merge request !%d", n) }, func(ctx context.Context, n int) (string, string, error) {
		once := *c
		once.MaxAttempts = 1
		pr, err := once.MergeRequest(ctx, s.Repository, n)
		if err != nil {
			return "", "", err
		}
		return pr.Title, pr.TargetBranch, nil
	})
}
