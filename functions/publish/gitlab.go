package publish

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
)

// GitLab posts commit statuses, POST {base}/api/v4/projects/{path}/statuses/{sha}, through
// GitLab's client. GitLab has no "error" state: error and failure are both "failed". Current
// GitLab answers 201 for a repeated final state (it adds a job); older versions answered 400,
// so on a 400 the publisher reads the commit's statuses under the name back, once, and counts
// a match as published. 409 means GitLab's per-commit lock was busy: it is retried. target_url
// is limited to 255 characters: a longer one is left out rather than cut into a broken link
// (the configuration refuses one).
type GitLab struct {
	*gitlab.Client
}

// NewGitLab returns a GitLab publisher.
func NewGitLab(baseURL, token string, hc *http.Client) *GitLab {
	return &GitLab{gitlab.NewClient(baseURL, token, hc)}
}

// GitLabMaxField is GitLab's limit on a status's target_url, description and name.
const GitLabMaxField = 255

func gitlabState(s string) string {
	if s == "success" {
		return "success"
	}
	return "failed"
}

// Publish implements Publisher.
func (g *GitLab) Publish(ctx context.Context, s Status) error {
	body := map[string]string{"state": gitlabState(s.State), "name": s.Context, "description": cutRunes(s.Description, GitLabMaxField)}
	if s.TargetURL != "" && utf8.RuneCountInString(s.TargetURL) <= GitLabMaxField {
		body["target_url"] = s.TargetURL
	}
	_, err := g.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: fmt.Sprintf("%s/statuses/%s", gitlab.ProjectPath(s.Repository),
		url.PathEscape(s.SHA)), Body: body})
	if err == nil || StatusOf(err) != http.StatusBadRequest {
		return err
	}
	// 400 from an older GitLab: maybe the status already holds this state (a POST that landed
	// and whose answer was lost). Ours only if the latest status under this name shows every
	// field it would: another delivery's verdict for the same commit and context in the same
	// state (failure and error are both "failed") is not.
	st, rerr := g.Standing(ctx, s)
	switch {
	case rerr == nil && st == StandingOurs:
		return nil
	case rerr != nil && ClassOf(rerr) != Permanent:
		// The POST did nothing (a 400 is GitLab's refusal); the read-back is what failed, for
		// now: the whole thing is tried again later.
		return providerapi.Wrap(rerr, Transient, fmt.Sprintf("the POST was answered 400 (%s), and reading the statuses back failed",
			providerapi.AnswerText([]byte(providerapi.StatusMessage(err)))))
	}
	return err
}

// gitlabPerPage is the statuses asked for a page of the read-back (GitLab serves at most 100).
const gitlabPerPage = 100

type gitlabStatus struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Status      string  `json:"status"`
	Description *string `json:"description"`
	TargetURL   *string `json:"target_url"`
}

// Standing implements Publisher: GET
// {base}/api/v4/projects/{path}/repository/commits/{sha}/statuses?name=..., every page GitLab
// names (X-Next-Page). GitLab lists them oldest first; the one with the highest id is the
// latest.
func (g *GitLab) Standing(ctx context.Context, s Status) (Standing, error) {
	var latest *gitlabStatus
	page := 0
	err := g.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: fmt.Sprintf("%s/repository/commits/%s/statuses?name=%s&all=true&per_page=%d",
		gitlab.ProjectPath(s.Repository), url.PathEscape(s.SHA), url.QueryEscape(s.Context), gitlabPerPage)}, readPages,
		func(a *providerapi.Answer) (bool, error) {
			page++
			var statuses []gitlabStatus
			if err := a.Decode(fmt.Sprintf("page %d of the commit's statuses", page), &statuses); err != nil {
				return false, err
			}
			for i := range statuses {
				if st := &statuses[i]; st.Name == s.Context && (latest == nil || st.ID > latest.ID) {
					latest = st
				}
			}
			return len(statuses) > 0, nil
		})
	if err != nil || latest == nil {
		return StandingNone, err
	}
	target := s.TargetURL
	if utf8.RuneCountInString(target) > GitLabMaxField {
		target = "" // left out when posted
	}
	return standingOf(true, latest.Status == gitlabState(s.State) && deref(latest.Description) == cutRunes(s.Description, GitLabMaxField) &&
		deref(latest.TargetURL) == target), nil
}
