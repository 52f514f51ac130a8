package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// api is what every provider's publisher holds: its base URL, its token and a retrying client.
type api struct {
	BaseURL, Token string
	client
}

func newAPI(baseURL, token string, hc *http.Client, cls func(*http.Response, []byte) *Error) api {
	return api{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, client: client{HTTP: hc, classify: cls}}
}

// GitHub posts to POST {base}/repos/{owner}/{repo}/statuses/{sha} (GitHub Enterprise: base is
// https://HOST/api/v3), with a static token (NewGitHub) or as a GitHub App (NewGitHubApp).
type GitHub struct {
	api
	auth githubAuth
}

// NewGitHub returns a GitHub publisher that posts with token.
func NewGitHub(baseURL, token string, hc *http.Client) *GitHub {
	return &GitHub{api: newAPI(baseURL, token, hc, classifyGitHub), auth: githubAuth{token: token}}
}

// NewGitHubApp returns a GitHub publisher that posts each status with the installation token
// of its webhook's installation (Status.Installation), taken from tokens. A status whose
// webhook named no installation is refused as the operator's to fix (ErrNoInstallation).
func NewGitHubApp(baseURL string, tokens InstallationTokens, hc *http.Client) *GitHub {
	return &GitHub{api: newAPI(baseURL, "", hc, classifyGitHub), auth: githubAuth{tokens: tokens}}
}

// classifyGitHub: GitHub answers its rate limits with 403 or 429. The primary limit says
// x-ratelimit-remaining: 0 and resets at x-ratelimit-reset; a secondary limit sends
// Retry-After, or asks for at least a minute. Any other 403 is the token's scope.
func classifyGitHub(resp *http.Response, body []byte) *Error {
	e := classify(resp, body)
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return e
	}
	h := resp.Header
	if d, ok := retryAfter(h); ok {
		e.Class, e.RetryAfter = Transient, d
	} else if h.Get("X-Ratelimit-Remaining") == "0" {
		e.Class = Transient
		if d, ok := resetWait(h, "X-Ratelimit-Reset"); ok {
			e.RetryAfter = d
		} else {
			e.RetryAfter = time.Minute
		}
	} else if strings.Contains(strings.ToLower(string(body)), "rate limit") {
		e.Class, e.RetryAfter = Transient, time.Minute
	}
	return e
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
	_, _, err = g.auth.send(ctx, &g.client, s.Installation, http.MethodPost, fmt.Sprintf("%s/repos/%s/%s/statuses/%s", g.BaseURL,
		url.PathEscape(owner), url.PathEscape(repo), url.PathEscape(s.SHA)), body)
	return err
}

// Gitea posts to POST {base}/api/v1/repos/{owner}/{repo}/statuses/{sha} (Forgejo too).
type Gitea struct{ api }

// NewGitea returns a Gitea/Forgejo publisher.
func NewGitea(baseURL, token string, hc *http.Client) *Gitea {
	return &Gitea{newAPI(baseURL, token, hc, classify)}
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
		url.PathEscape(owner), url.PathEscape(repo), url.PathEscape(s.SHA)), body, map[string]string{"Authorization": "token " + g.Token}))
	return err
}

// GitLab posts to POST {base}/api/v4/projects/{path}/statuses/{sha}. GitLab has no "error"
// state: error and failure are both "failed". Current GitLab answers 201 for a repeated final
// state (it adds a job); older versions answered 400, so on a 400 the publisher reads the
// commit's statuses back and counts a match as published. 409 means GitLab's per-commit lock
// was busy: it is retried. target_url is limited to 255 characters: a longer one is left out
// rather than cut into a broken link (the configuration refuses one).
type GitLab struct{ api }

// NewGitLab returns a GitLab publisher.
func NewGitLab(baseURL, token string, hc *http.Client) *GitLab {
	return &GitLab{newAPI(baseURL, token, hc, classifyGitLab)}
}

// GitLabMaxField is GitLab's limit on a status's target_url, description and name.
const GitLabMaxField = 255

// gitlabBusyWait is the wait after a 409: GitLab's status service holds its per-commit lock
// for at most 5 s and retries it for about 2 s before answering 409.
const gitlabBusyWait = 3 * time.Second

// classifyGitLab: 409 is GitLab's per-commit lock being busy, a transient answer; 429 carries
// Retry-After and RateLimit-Reset.
func classifyGitLab(resp *http.Response, body []byte) *Error {
	e := classify(resp, body)
	switch resp.StatusCode {
	case http.StatusConflict:
		e.Class = Transient
		e.RetryAfter = max(e.RetryAfter, gitlabBusyWait)
	case http.StatusTooManyRequests:
		if e.RetryAfter == 0 {
			e.RetryAfter, _ = resetWait(resp.Header, "RateLimit-Reset")
		}
	}
	return e
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
	body := map[string]string{"state": state, "name": s.Context, "description": cutRunes(s.Description, GitLabMaxField)}
	if s.TargetURL != "" && utf8.RuneCountInString(s.TargetURL) <= GitLabMaxField {
		body["target_url"] = s.TargetURL
	}
	hdr := map[string]string{"PRIVATE-TOKEN": g.Token}
	_, _, err := g.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/api/v4/projects/%s/statuses/%s", g.BaseURL, project,
		url.PathEscape(s.SHA)), body, hdr))
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
		return rerr // the read-back failed for now: try the whole thing again later
	}
	return err
}

// Bitbucket posts to POST {base}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build
// (base https://api.bitbucket.org). Its states are SUCCESSFUL and FAILED; a status needs a URL,
// so the commit's page is used when no target URL is configured. The status key is the context
// cut to BitbucketKeyLength characters (the configuration refuses two contexts that would share
// a key). Bitbucket Cloud's pull request events carry abbreviated commit hashes: the publisher
// resolves one to the full hash (GET .../commit/{hash}) and posts against that.
type Bitbucket struct{ api }

// NewBitbucket returns a Bitbucket Cloud publisher.
func NewBitbucket(baseURL, token string, hc *http.Client) *Bitbucket {
	return &Bitbucket{newAPI(baseURL, token, hc, classify)}
}

// BitbucketKeyLength is the longest status key Bitbucket accepts, in characters.
const BitbucketKeyLength = 40

// BitbucketKey is the status key a context is published under: its first 40 characters.
func BitbucketKey(context string) string {
	if utf8.RuneCountInString(context) <= BitbucketKeyLength {
		return context
	}
	return string([]rune(context)[:BitbucketKeyLength])
}

// fullHashLength is the length of a full SHA-1 commit hash in hex.
const fullHashLength = 40

// resolve returns the full hash of an abbreviated one.
func (b *Bitbucket) resolve(ctx context.Context, ws, slug, sha string) (string, error) {
	// Only the hash is asked for: the whole resource repeats the commit's message (raw and
	// rendered), which for a long message is more than an answer is read.
	_, body, err := b.do(ctx, jsonRequest(http.MethodGet, fmt.Sprintf("%s/2.0/repositories/%s/%s/commit/%s?fields=hash", b.BaseURL,
		url.PathEscape(ws), url.PathEscape(slug), url.PathEscape(sha)), nil, b.header()))
	if err != nil {
		return "", err
	}
	var c struct {
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(body, &c); err != nil || len(c.Hash) != fullHashLength || !strings.HasPrefix(c.Hash, sha) {
		return "", &Error{Class: Transient, Err: errors.New("bitbucket answered the commit " + sha + " without its full hash")}
	}
	return c.Hash, nil
}

func (b *Bitbucket) header() map[string]string {
	return map[string]string{"Authorization": "Bearer " + b.Token}
}

// commit returns the workspace, the slug and the full commit hash s is posted to (an
// abbreviated hash is resolved).
func (b *Bitbucket) commit(ctx context.Context, s Status) (ws, slug, sha string, err error) {
	if ws, slug, err = splitRepo(s.Repository); err != nil {
		return "", "", "", err
	}
	sha = strings.ToLower(s.SHA)
	if len(sha) < fullHashLength {
		if sha, err = b.resolve(ctx, ws, slug, sha); err != nil {
			return "", "", "", err
		}
	}
	return ws, slug, sha, nil
}

// Resolve implements Resolver: an abbreviated hash is resolved to the full one.
func (b *Bitbucket) Resolve(ctx context.Context, s Status) (Status, error) {
	_, _, sha, err := b.commit(ctx, s)
	s.SHA = sha
	return s, err
}

// body is the build status Publish posts for s on the commit sha.
func (b *Bitbucket) body(ws, slug, sha string, s Status) map[string]string {
	state := "FAILED"
	if s.State == "success" {
		state = "SUCCESSFUL"
	}
	target := s.TargetURL
	if target == "" {
		target = fmt.Sprintf("https://bitbucket.org/%s/%s/commits/%s", ws, slug, sha)
	}
	return map[string]string{"key": BitbucketKey(s.Context), "state": state, "name": s.Context, "url": target,
		"description": cutRunes(s.Description, otherDescription)}
}

// Publish implements Publisher.
func (b *Bitbucket) Publish(ctx context.Context, s Status) error {
	ws, slug, sha, err := b.commit(ctx, s)
	if err != nil {
		return err
	}
	_, _, err = b.do(ctx, jsonRequest(http.MethodPost, fmt.Sprintf("%s/2.0/repositories/%s/%s/commit/%s/statuses/build", b.BaseURL,
		url.PathEscape(ws), url.PathEscape(slug), url.PathEscape(sha)), b.body(ws, slug, sha, s), b.header()))
	return err
}
