package publish

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
)

// Gitea posts commit statuses to Gitea and Forgejo: POST
// {base}/api/v1/repos/{owner}/{repo}/statuses/{sha}, through Gitea's client.
type Gitea struct {
	*gitea.Client
}

// NewGitea returns a Gitea/Forgejo publisher.
func NewGitea(baseURL, token string, hc *http.Client) *Gitea {
	return &Gitea{gitea.NewClient(baseURL, token, hc)}
}

// Publish implements Publisher.
func (g *Gitea) Publish(ctx context.Context, s Status) error {
	repo, err := gitea.RepoPath(s.Repository)
	if err != nil {
		return err
	}
	body := map[string]string{"state": s.State, "description": cutRunes(s.Description, otherDescription), "context": s.Context,
		"target_url": s.TargetURL}
	_, err = g.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: fmt.Sprintf("%s/statuses/%s", repo, url.PathEscape(s.SHA)), Body: body})
	return err
}

// giteaPerPage is the contexts asked for a page of the combined status: Gitea's default
// MAX_RESPONSE_ITEMS, the most it serves a page.
const giteaPerPage = 50

// Standing implements Publisher: GET {base}/api/v1/repos/{owner}/{repo}/commits/{sha}/status,
// the combined status, page by page (Gitea names the count of contexts in X-Total-Count) to
// the page that holds the context.
func (g *Gitea) Standing(ctx context.Context, s Status) (Standing, error) {
	repo, err := gitea.RepoPath(s.Repository)
	if err != nil {
		return 0, err
	}
	result, page := StandingNone, 0
	err = g.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: fmt.Sprintf("%s/commits/%s/status?limit=%d&page=1", repo,
		url.PathEscape(s.SHA), giteaPerPage)}, readPages, func(a *providerapi.Answer) (bool, error) {
		page++
		var c combinedStatus
		if err := a.Decode(fmt.Sprintf("page %d of the combined status", page), &c); err != nil {
			return false, err
		}
		if st, found := c.find(s, otherDescription); found {
			result = st
			return false, nil
		}
		return len(c.Statuses) > 0, nil
	})
	return result, err
}
