package publish

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
)

// GitHub posts commit statuses, POST {base}/repos/{owner}/{repo}/statuses/{sha} (GitHub
// Enterprise: base is https://HOST/api/v3), with a token (NewGitHub) or as a GitHub App
// (NewGitHubApp), through GitHub's client.
type GitHub struct {
	*github.Client
}

// NewGitHub returns a GitHub publisher that posts with token.
func NewGitHub(baseURL, token string, hc *http.Client) *GitHub {
	return &GitHub{github.NewTokenClient(baseURL, token, hc)}
}

// NewGitHubApp returns a GitHub publisher that posts each status with the installation token
// of its webhook's installation (Status.Installation), taken from tokens. A status whose
// webhook named no installation is refused as the operator's to fix (github.ErrNoInstallation).
func NewGitHubApp(baseURL string, tokens github.InstallationTokens, hc *http.Client) *GitHub {
	return &GitHub{github.NewInstallationClient(baseURL, tokens, hc)}
}

// Publish implements Publisher.
func (g *GitHub) Publish(ctx context.Context, s Status) error {
	repo, err := github.RepoPath(s.Repository)
	if err != nil {
		return err
	}
	body := map[string]string{"state": s.State, "description": cutRunes(s.Description, githubDescription), "context": s.Context}
	if s.TargetURL != "" {
		body["target_url"] = s.TargetURL
	}
	_, err = g.Do(ctx, s.Installation, providerapi.Request{Method: http.MethodPost, URL: fmt.Sprintf("%s/statuses/%s", repo, url.PathEscape(s.SHA)),
		Body: body})
	return err
}

// combinedStatus is GitHub's and Gitea's combined status of a ref: the latest status of each
// context (GitHub names the state "state", Gitea "status").
type combinedStatus struct {
	TotalCount int `json:"total_count"`
	Statuses   []struct {
		Context     string  `json:"context"`
		State       string  `json:"state"`
		Status      string  `json:"status"`
		Description *string `json:"description"`
		TargetURL   *string `json:"target_url"`
	} `json:"statuses"`
}

// find returns the standing of s among a page of the combined status, the description cut to
// cut characters; found is false when the page does not hold s's context.
func (c *combinedStatus) find(s Status, cut int) (Standing, bool) {
	for _, st := range c.Statuses {
		if st.Context != s.Context {
			continue
		}
		state := st.State
		if state == "" {
			state = st.Status
		}
		return standingOf(true, state == s.State && deref(st.Description) == cutRunes(s.Description, cut) &&
			deref(st.TargetURL) == s.TargetURL), true
	}
	return 0, false
}

// Standing implements Publisher: GET {base}/repos/{owner}/{repo}/commits/{sha}/status, the
// combined status, which holds the latest status of each context, read by its Link header to
// the page that holds the context. A listing whose total_count is past what its pages held is
// not taken for whole: a Transient error, never a standing of none over a status not read.
func (g *GitHub) Standing(ctx context.Context, s Status) (Standing, error) {
	repo, err := github.RepoPath(s.Repository)
	if err != nil {
		return 0, err
	}
	result, seen, total, page := StandingNone, 0, 0, 0
	err = g.Pages(ctx, s.Installation, providerapi.Request{Method: http.MethodGet,
		URL: fmt.Sprintf("%s/commits/%s/status?per_page=100", repo, url.PathEscape(s.SHA))}, readPages,
		func(a *providerapi.Answer) (bool, error) {
			page++
			var c combinedStatus
			if err := a.Decode(fmt.Sprintf("page %d of the combined status", page), &c); err != nil {
				return false, err
			}
			if st, found := c.find(s, githubDescription); found {
				result = st
				return false, nil
			}
			seen, total = seen+len(c.Statuses), c.TotalCount
			return true, nil
		})
	if err == nil && result == StandingNone && seen < total {
		err = &Error{Class: Transient, Err: fmt.Errorf("the combined status counts %d contexts and its pages listed %d without %q", total, seen, s.Context)}
	}
	return result, err
}
