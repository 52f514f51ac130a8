package gitlab_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// What GitLab shows now of a merge request: its title and target branch, in one request, or an
// error and no state.
func TestPullNowReadsTheTitleAndTargetGitLabShows(t *testing.T) {
	providerapitest.CheckPullNow(t, func(t *testing.T) providerapitest.PullNowWorld {
		w := newReadWorld(t)
		return providerapitest.PullNowWorld{
			PullNow: w.reader.PullNow,
			AddPull: func(iid int, title, target string) {
				w.gitlab.AddMergeRequest(readProject, gitlabtest.MergeRequest{IID: iid, Title: title, Source: "topic", Target: target, HeadSHA: commitN(2)})
			},
			Change: func(iid int) change.Change {
				return change.Change{Provider: "gitlab", Repository: readProject, SHA: commitN(2), Event: change.PullRequest,
					Pull: &change.Pull{Number: iid, Title: "as the webhook had it", TargetBranch: "main"}}
			},
			Answer:     func(code int) { w.gitlab.Answer = providerapitest.AnswerOnly(gitlabtest.OpGetMR, code) },
			Reads:      func() int { return w.gitlab.Requests(gitlabtest.OpGetMR) },
			Violations: w.gitlab.Violations,
			Refusal:    http.StatusForbidden,
			Refused:    func(err error) bool { var r *gitlab.Refused; return errors.As(err, &r) },
		}
	})
}
