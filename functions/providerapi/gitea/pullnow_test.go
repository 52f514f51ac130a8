package gitea_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What the server shows now of a pull request: its title and base branch, in one request, or
// an error and no state.
func TestPullNowReadsTheTitleAndBaseGiteaShows(t *testing.T) {
	providerapitest.CheckPullNow(t, func(t *testing.T) providerapitest.PullNowWorld {
		w := newReadWorld(t)
		return providerapitest.PullNowWorld{
			PullNow: w.reader.PullNow,
			AddPull: func(n int, title, target string) {
				w.gitea.AddPull(readRepo, giteatest.Pull{Number: n, Title: title, Base: target, Head: "topic", HeadSHA: commitN(2)})
			},
			Change: func(n int) change.Change {
				return change.Change{Provider: "gitea", Repository: readRepo, SHA: commitN(2), Event: change.PullRequest,
					Pull: &change.Pull{Number: n, Title: "as the webhook had it", TargetBranch: "main"}}
			},
			Answer:     func(code int) { w.gitea.Answer = providerapitest.AnswerOnly(giteatest.OpGetPull, code) },
			Reads:      func() int { return w.gitea.Requests(giteatest.OpGetPull) },
			Violations: w.gitea.Violations,
			Refusal:    http.StatusForbidden,
			Refused:    func(err error) bool { var r *gitea.Refused; return errors.As(err, &r) },
		}
	})
}
