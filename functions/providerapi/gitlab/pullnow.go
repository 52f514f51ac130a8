package gitlab

import (
	"context"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
)

// errNoPull: PullNow was asked of a change that names no merge request.
var errNoPull = errors.New("the change names no merge request")

// PullNow reads what GitLab shows now of s's merge request: its title and target branch (the
// runner's Route.PullNow, which orders two verdicts of one second by it). It costs one GET of
// merge_requests/{iid}, with the token and the scope of the reads of what a webhook lacks
// (read_api), sent once: the runner takes a failure for nothing read and goes on, so it is not
// worth a retry's wait; the client's timeout bounds it. A change naming no merge request, a
// refusal, an outage, or an answer without a title or target branch is an error, never a state
// made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	if s.Pull == nil || s.Pull.Number <= 0 {
		return change.PullState{}, errNoPull
	}
	once := *c
	once.MaxAttempts = 1
	mr, err := once.MergeRequest(ctx, s.Repository, s.Pull.Number)
	if err == nil && (mr.Title == "" || mr.TargetBranch == "") {
		err = errors.New("the answer names no title or target branch")
	}
	if err != nil {
		return change.PullState{}, fmt.Errorf("reading merge request !%d of %s as GitLab shows it now: %w", s.Pull.Number, s.Repository, err)
	}
	return change.PullState{Title: mr.Title, TargetBranch: mr.TargetBranch}, nil
}
