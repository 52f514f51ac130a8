package providerapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
)

// PullNow is the procedure every provider's PullNow follows (the runner's Route.PullNow: what
// the provider shows now of a change's pull request, which orders two verdicts of one second).
// read is the provider's one GET of the pull request numbered n, sent once (the runner takes a
// failure for nothing read and goes on, so it is not worth a retry's wait) and bounded by its
// client's timeout; it answers the title and the target branch. A change naming no pull
// request, a failed read, or an answer without a title or a target is an error, never a state
// made up. what names the pull request as the provider does ("pull request 7", "merge request
// !7"), and name the provider as a verdict names it.
func PullNow(ctx context.Context, s change.Change, name string, what func(n int) string,
	read func(ctx context.Context, n int) (title, target string, err error)) (change.PullState, error) {
	if s.Pull == nil || s.Pull.Number <= 0 {
		return change.PullState{}, fmt.Errorf("reading what %s shows now of %s: the change names no pull request", name, s.Repository)
	}
	title, target, err := read(ctx, s.Pull.Number)
	if err == nil && (title == "" || target == "") {
		err = errors.New("the answer names no title or target branch")
	}
	if err != nil {
		return change.PullState{}, fmt.Errorf("reading %s of %s as %s shows it now: %w", what(s.Pull.Number), s.Repository, name, err)
	}
	return change.PullState{Title: title, TargetBranch: target}, nil
}

// PullRequestNumbered names a pull request as GitHub, Gitea and Bitbucket do ("pull request 7").
func PullRequestNumbered(n int) string { return fmt.Sprintf("pull request %d", n) }
