package gitea

import (
	"context"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
)

// errNoPull: PullNow was asked of a change that names no pull request.
var errNoPull = errors.New("the change names no pull request")

// PullNow reads what the server shows now of s's pull request: its title and base branch (the
// runner's Route.PullNow, which orders two verdicts of one second by it). It costs one GET of
// repoGetPullRequest, with the token and the scope of the reads of what a webhook lacks
// (read:repository), sent once: the runner takes a failure for nothing read and goes on, so it
// is not worth a retry's wait; the client's timeout bounds it. A change naming no pull
// request, a refusal, an outage, or an answer without a title or base is an error, never a
// state made up.
func (c *Client) PullNow(ctx context.Context, s change.Change) (change.PullState, error) {
	if s.Pull == nil || s.Pull.Number <= 0 {
		return change.PullState{}, errNoPull
	}
	once := *c
	once.MaxAttempts = 1
	pr, err := once.PullRequest(ctx, s.Repository, s.Pull.Number)
	if err == nil && (pr.Title == "" || pr.Base.Ref == "") {
		err = errors.New("the answer names no title or base branch")
	}
	if err != nil {
		return change.PullState{}, fmt.Errorf("reading pull request %d of %s as %s shows it now: %w", s.Pull.Number, s.Repository,
			displayName(s.Provider), err)
	}
	return change.PullState{Title: pr.Title, TargetBranch: pr.Base.Ref}, nil
}
