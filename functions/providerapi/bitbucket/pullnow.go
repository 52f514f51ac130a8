package bitbucket

import (
	"context"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
)

// errNoPull: PullNow was asked of a change that names no pull request.
var errNoPull = errors.New("the change names no pull request")

// PullNow reads what Bitbucket Cloud shows now of s's pull request: its title and destination
// branch (the runner's Route.PullNow, which orders two verdicts of one second by it). It costs
// one GET of pullrequests/{id}, with the token and the scope of the reads of what a webhook
// lacks (pullrequest), sent once: the runner takes a failure for nothing read and goes on, so
// it is not worth a retry's wait; the client's timeout bounds it. A change naming no pull
// request or coming from a Data Center server, a refusal, an outage, or an answer without a
// title or destination is an error, never a state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	if s.Pull == nil || s.Pull.Number <= 0 {
		return change.PullState{}, errNoPull
	}
	if s.API != "" && s.API != change.BitbucketCloud {
		return change.PullState{}, errors.New("the change came from a Bitbucket Data Center server, and the route reads Bitbucket Cloud's API")
	}
	once := *c
	once.MaxAttempts = 1
	pr, err := once.PullRequest(ctx, s.Repository, s.Pull.Number)
	if err == nil && (pr.Title == "" || pr.Destination.Branch.Name == "") {
		err = errors.New("the answer names no title or destination branch")
	}
	if err != nil {
		return change.PullState{}, fmt.Errorf("reading pull request %d of %s as Bitbucket Cloud shows it now: %w", s.Pull.Number, s.Repository, err)
	}
	return change.PullState{Title: pr.Title, TargetBranch: pr.Destination.Branch.Name}, nil
}
