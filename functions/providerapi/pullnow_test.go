package providerapi_test

import (
	"context"
	"errors"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// What a provider shows now of a pull request is its answer's title and target, or an error and
// no state: for a change naming no pull request (nothing is read), a failed read (the error is
// kept), and an answer lacking either (the runner would freeze a state made up).
func TestPullNowAnswersWhatTheProviderShowsOrAnError(t *testing.T) {
	failed := errors.New("503")
	pull := change.Change{Repository: "acme/app", Pull: &change.Pull{Number: 7}}
	for _, c := range []struct {
		name          string
		s             change.Change
		title, target string
		err           error
		want          change.PullState
		reads         int
	}{
		{name: "shown", s: pull, title: "feat: x", target: "main", want: change.PullState{Title: "feat: x", TargetBranch: "main"}, reads: 1},
		{name: "no pull request", s: change.Change{Repository: "acme/app"}},
		{name: "a read that failed", s: pull, err: failed, reads: 1},
		{name: "no title", s: pull, target: "main", reads: 1},
		{name: "no target", s: pull, title: "feat: x", reads: 1},
	} {
		reads := 0
		got, err := providerapi.PullNow(context.Background(), c.s, "Forge", providerapi.PullRequestNumbered,
			func(_ context.Context, n int) (string, string, error) {
				reads++
				if n != 7 {
					t.Errorf("%s: read pull request %d, want 7", c.name, n)
				}
				return c.title, c.target, c.err
			})
		if got != c.want || (err == nil) != (c.want != change.PullState{}) || reads != c.reads {
			t.Errorf("%s: %+v, %v after %d reads; want %+v after %d", c.name, got, err, reads, c.want, c.reads)
		}
		if c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap the read's error", c.name, err)
		}
	}
}
