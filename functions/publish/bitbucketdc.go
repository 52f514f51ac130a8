package publish

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
)

// BitbucketDataCenter posts build statuses to a Bitbucket Data Center server (7.14 and later),
// through Data Center's client: POST
// {base}/rest/api/latest/projects/{key}/repos/{slug}/commits/{sha}/builds, and reads the key's
// status back with GET .../builds?key={key} (Data Center keeps one status per key and commit).
// Its states are SUCCESSFUL and FAILED; the key and the name are the context (Data Center keys
// are at most 255 characters, as contexts are); a status needs a URL (at most
// BitbucketDataCenterMaxURL characters), so the commit's page on the server is used when no
// target URL is configured, or the verdict's is longer.
type BitbucketDataCenter struct {
	*bitbucketdc.Client
}

// NewBitbucketDataCenter returns a Bitbucket Data Center publisher for the server at baseURL
// (its root, or its context path).
func NewBitbucketDataCenter(baseURL, token string, hc *http.Client) *BitbucketDataCenter {
	return &BitbucketDataCenter{bitbucketdc.NewClient(baseURL, token, hc)}
}

// BitbucketDataCenterMaxURL is the longest build status URL Data Center accepts, in
// characters.
const BitbucketDataCenterMaxURL = 450

// body is the build status Publish posts for s.
func (b *BitbucketDataCenter) body(s Status) map[string]string {
	target := s.TargetURL
	if target == "" || utf8.RuneCountInString(target) > BitbucketDataCenterMaxURL {
		// The configuration refuses a longer one; one frozen under an earlier configuration
		// would have the status refused (400), so the commit's page stands in for it.
		project, slug, _ := strings.Cut(s.Repository, "/")
		target = fmt.Sprintf("%s/projects/%s/repos/%s/commits/%s", b.BaseURL, url.PathEscape(project), url.PathEscape(slug), url.PathEscape(s.SHA))
	}
	return buildStatus(s, s.Context, target)
}

// builds is the path of s's commit's build statuses.
func (b *BitbucketDataCenter) builds(s Status) (string, error) {
	repo, err := bitbucketdc.RepoPath(s.Repository)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/commits/%s/builds", repo, url.PathEscape(s.SHA)), nil
}

// Publish implements Publisher. Data Center answers a stored status 204.
func (b *BitbucketDataCenter) Publish(ctx context.Context, s Status) error {
	path, err := b.builds(s)
	if err != nil {
		return err
	}
	_, err = b.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: path, Body: b.body(s)})
	return err
}

// Standing implements Publisher: GET
// {base}/rest/api/latest/projects/{key}/repos/{slug}/commits/{sha}/builds?key={key}, the key's
// status (404: none).
func (b *BitbucketDataCenter) Standing(ctx context.Context, s Status) (Standing, error) {
	path, err := b.builds(s)
	if err != nil {
		return 0, err
	}
	return buildStanding(ctx, b.Do, path+"?key="+url.QueryEscape(s.Context), b.body(s))
}
