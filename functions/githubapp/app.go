package githubapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
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

// maxInstallationPages bounds AccountInstallation's listing: 10 pages of 100 installations.
const maxInstallationPages = 10

// AccountInstallation finds the App's installation on an account (a user or an organization,
// for a route that names owner/*) by listing the App's installations: GET
// {base}/app/installations (apps/list-installations), 100 a page, at most
// maxInstallationPages pages. No installation on the account is ErrInstallationRefused.
func (t *Tokens) AccountInstallation(ctx context.Context, account string) (Installation, error) {
	op := "find the installation on the account " + account
	for page := 1; page <= maxInstallationPages; page++ {
		resp, body, err := t.appRequest(ctx, op, http.MethodGet, fmt.Sprintf("/app/installations?per_page=100&page=%d", page))
		if err != nil {
			return Installation{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return Installation{}, classify(op, resp, body, t.now())
		}
		var ins []Installation
		if err := json.Unmarshal(body, &ins); err != nil {
			return Installation{}, &Error{Op: op, Status: resp.StatusCode, Hint: "the answer is not a list of installations"}
		}
		for _, in := range ins {
			if strings.EqualFold(in.Account.Login, account) && in.ID != 0 {
				return in, nil
			}
		}
		if len(ins) < 100 {
			return Installation{}, &Error{Op: op, Kind: ErrInstallationRefused,
				Hint: "the App is not installed on the account " + account + ": install it there (the App's page, Install App)"}
		}
	}
	return Installation{}, &Error{Op: op, Kind: ErrInstallationRefused,
		Hint: fmt.Sprintf("not among the App's first %d installations: name one of the account's repositories instead of %s/*",
			maxInstallationPages*100, account)}
}
