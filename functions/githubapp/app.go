package githubapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// App is what GitHub says of the authenticated App (apps/get-authenticated, schema
// integration).
type App struct {
	ID          int64             `json:"id"`
	Slug        string            `json:"slug"`
	Name        string            `json:"name"`
	Permissions map[string]string `json:"permissions"`
	Events      []string          `json:"events"`
}

// App asks GitHub which App the JWT authenticates as: GET {base}/app. It proves the App id
// and the key (a refusal is ErrKeyRefused).
func (t *Tokens) App(ctx context.Context) (App, error) {
	const op = "get the authenticated App"
	resp, body, err := t.appRequest(ctx, op, http.MethodGet, "/app")
	if err != nil {
		return App{}, err
	}
	if resp.StatusCode != http.StatusOK {
		e := classify(op, resp, body, t.now())
		if resp.StatusCode == http.StatusNotFound {
			e.Hint = "no App API at this base URL: check publish.base_url (https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise Server)"
		}
		return App{}, e
	}
	var a App
	if err := json.Unmarshal(body, &a); err != nil || a.ID == 0 {
		return App{}, &Error{Op: op, Status: resp.StatusCode, Hint: "the answer is not an App"}
	}
	return a, nil
}

// Installation is an installation of the App (schema installation).
type Installation struct {
	ID      int64 `json:"id"`
	Account struct {
		Login string `json:"login"`
	} `json:"account"`
	Permissions         map[string]string `json:"permissions"`
	RepositorySelection string            `json:"repository_selection"`
	SuspendedAt         *time.Time        `json:"suspended_at"`
}

// Installation finds the App's installation on a repository: GET
// {base}/repos/{owner}/{repo}/installation (apps/get-repo-installation). The App not being
// installed there is ErrInstallationRefused.
func (t *Tokens) Installation(ctx context.Context, owner, repo string) (Installation, error) {
	op := fmt.Sprintf("find the installation on %s/%s", owner, repo)
	resp, body, err := t.appRequest(ctx, op, http.MethodGet, fmt.Sprintf("/repos/%s/%s/installation", url.PathEscape(owner), url.PathEscape(repo)))
	if err != nil {
		return Installation{}, err
	}
	if resp.StatusCode != http.StatusOK {
		e := classify(op, resp, body, t.now())
		if e.Kind == nil && !e.Retryable && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden) {
			e.Kind = ErrInstallationRefused
			e.Hint = installationHint(resp.StatusCode, "installation on "+owner+"/"+repo)
		}
		return Installation{}, e
	}
	var in Installation
	if err := json.Unmarshal(body, &in); err != nil || in.ID == 0 {
		return Installation{}, &Error{Op: op, Status: resp.StatusCode, Hint: "the answer is not an installation"}
	}
	return in, nil
}
