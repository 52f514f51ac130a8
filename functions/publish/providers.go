package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// api is what every provider's publisher holds: its base URL, its token and a retrying client.
type api struct {
	BaseURL, Token string
	client
}

func newAPI(baseURL, token string, hc *http.Client) api {
	return api{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, client: client{HTTP: hc}}
}

// GitHub posts to POST {base}/repos/{owner}/{repo}/statuses/{sha} (GitHub Enterprise: base is
// https://HOST/api/v3).
type GitHub struct{ api }

// NewGitHub returns a GitHub publisher.
func NewGitHub(baseURL, token string, hc *http.Client) *GitHub {
	return &GitHub{newAPI(baseURL, token, hc)}
}

// Publish implements Publisher.
func (g *GitHub) Publish(ctx context.Context, s Status) error {
	owner, repo, err := splitRepo(s.Repository)
	if err != nil {
		return err
	}
	body := map[string]string{"state": s.State, "description": cutRunes(s.Description, githubDescription), "context": s.Context}
	if s.TargetURL != "" {
		body["target_url"] = s.TargetURL
	}
	_, _, err = g.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/repos/%s/%s/statuses/%s", g.BaseURL,
		url.PathEscape(owner), url.PathEscape(repo), s.SHA), body, map[string]string{
		"Authorization": "Bearer " + g.Token, "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}))
	return err
}

// Gitea posts to POST {base}/api/v1/repos/{owner}/{repo}/statuses/{sha} (Forgejo too).
type Gitea struct{ api }

// NewGitea returns a Gitea/Forgejo publisher.
func NewGitea(baseURL, token string, hc *http.Client) *Gitea {
	return &Gitea{newAPI(baseURL, token, hc)}
}

// Publish implements Publisher.
func (g *Gitea) Publish(ctx context.Context, s Status) error {
	owner, repo, err := splitRepo(s.Repository)
	if err != nil {
		return err
	}
	body := map[string]string{"state": s.State, "description": cutRunes(s.Description, otherDescription), "context": s.Context,
		"target_url": s.TargetURL}
	_, _, err = g.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/repos/%s/%s/statuses/%s", g.BaseURL,
		url.PathEscape(owner), url.PathEscape(repo), s.SHA), body, map[string]string{"Authorization": "token " + g.Token}))
	return err
}

// GitLab posts to POST {base}/api/v4/projects/{path}/statuses/{sha}. GitLab has no "error"
// state: error and failure are both "failed". Posting the state a status already has answers
// 400; the publisher then reads the commit's statuses back and counts a match as published.
type GitLab struct{ api }

// NewGitLab returns a GitLab publisher.
func NewGitLab(baseURL, token string, hc *http.Client) *GitLab {
	return &GitLab{newAPI(baseURL, token, hc)}
}

func gitlabState(s string) string {
	if s == "success" {
		return "success"
	}
	return "failed"
}

// Publish implements Publisher.
func (g *GitLab) Publish(ctx context.Context, s Status) error {
	project := url.PathEscape(s.Repository)
	state := gitlabState(s.State)
	body := map[string]string{"state": state, "name": s.Context, "description": cutRunes(s.Description, otherDescription)}
	if s.TargetURL != "" {
		body["target_url"] = s.TargetURL
	}
	hdr := map[string]string{"PRIVATE-TOKEN": g.Token}
	status, _, err := g.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/api/v4/projects/%s/statuses/%s", g.BaseURL, project, s.SHA), body, hdr))
	if err == nil || status != http.StatusBadRequest {
		return err
	}
	// 400: maybe the status already holds this state. Read it back.
	_, list, rerr := g.do(ctx, jsonRequest(http.MethodGet, fmt.Sprintf("%s/api/v4/projects/%s/repository/commits/%s/statuses?name=%s&all=true",
		g.BaseURL, project, s.SHA, url.QueryEscape(s.Context)), nil, hdr))
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	var statuses []struct {
		Name, Status string
	}
	if json.Unmarshal(list, &statuses) == nil {
		for _, st := range statuses {
			if st.Name == s.Context && st.Status == state {
				return nil
			}
		}
	}
	return err
}

// Bitbucket posts to POST {base}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build
// (base https://api.bitbucket.org). Its states are SUCCESSFUL and FAILED; a status needs a URL,
// so the commit's page is used when no target URL is configured.
type Bitbucket struct{ api }

// NewBitbucket returns a Bitbucket Cloud publisher.
func NewBitbucket(baseURL, token string, hc *http.Client) *Bitbucket {
	return &Bitbucket{newAPI(baseURL, token, hc)}
}

// Publish implements Publisher.
func (b *Bitbucket) Publish(ctx context.Context, s Status) error {
	ws, slug, err := splitRepo(s.Repository)
	if err != nil {
		return err
	}
	state := "FAILED"
	if s.State == "success" {
		state = "SUCCESSFUL"
	}
	target := s.TargetURL
	if target == "" {
		target = fmt.Sprintf("https://bitbucket.org/%s/%s/commits/%s", ws, slug, s.SHA)
	}
	key := s.Context
	if len(key) > 40 {
		key = key[:40]
	}
	body := map[string]string{"key": key, "state": state, "name": s.Context, "url": target,
		"description": cutRunes(s.Description, otherDescription)}
	_, _, err = b.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/2.0/repositories/%s/%s/commit/%s/statuses/build", b.BaseURL,
		url.PathEscape(ws), url.PathEscape(slug), s.SHA), body, map[string]string{"Authorization": "Bearer " + b.Token}))
	return err
}
