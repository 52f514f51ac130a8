package main

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/secrets"
)

// appPermission is the installation permission each App publisher writes with.
var appPermission = map[string]string{provider.GitHub: "statuses", "github-checks": "checks"}

// checkApp checks a route that publishes as a GitHub App, posting no status and no check run:
// the private key parses, GitHub accepts the App's JWT (GET /app names the App), and for each
// repository the route names the App is installed there (GET
// /repos/{owner}/{repo}/installation; for owner/*, on the account, found among GET
// /app/installations) with the permission the publisher needs, and an installation token can
// be had (POST /app/installations/{id}/access_tokens, the one write:
// to GitHub's App API, not to the repository).
func (c *checker) checkApp(ctx context.Context, res secrets.Source, r *config.Route, hc *http.Client, timeout time.Duration) {
	p, field := r.Publish, "routes."+r.Name+".publish.app"
	pctx, cancel := context.WithTimeout(ctx, timeout)
	pemKey, err := res.Get(pctx, p.App.PrivateKey.From)
	cancel()
	if err != nil {
		return // the secret's own check has said why, and what to do
	}
	tk, err := github.NewApp(github.AppConfig{BaseURL: p.BaseURL, AppID: p.App.ID, PrivateKey: []byte(pemKey), Client: hc})
	if err != nil {
		c.fail("%s.private_key: %v: put the App's private key there, whole (the App's settings, Private keys, Generate a private key)", field, err)
		return
	}
	c.ok("%s.private_key: an RSA private key", field)
	pctx, cancel = context.WithTimeout(ctx, timeout)
	app, err := tk.Info(pctx)
	cancel()
	if err != nil {
		c.fail("%s: %v", field, err)
		return
	}
	c.ok("%s: GitHub accepts the App's JWT: App %s (%q, id %d)", field, app.Slug, app.Name, app.ID)
	// A route whose rules read has its reads checked with them (checkReads); one reading with
	// another credential (a read block) reads nothing with the App.
	perm, reruns := appPermission[p.Provider], slices.Contains(r.Events, "rerun") && r.Read == nil && len(readNeeds(r)) == 0
	seen := map[string]bool{}
	for _, repo := range r.Repositories {
		owner, name, ok := strings.Cut(repo, "/")
		if !ok || strings.Contains(name, "/") || seen[strings.ToLower(repo)] {
			continue
		}
		seen[strings.ToLower(repo)] = true
		c.checkInstallation(ctx, tk, field, owner, name, perm, reruns, timeout)
	}
}

// rerunReads are the permissions a re-run reads its inputs with: a pull request's title, files
// and commits, and a push's commits and files.
var rerunReads = []string{"pull_requests", "contents"}

// checkInstallation checks that the App is installed on owner/name (on the account owner, for
// owner/*) with perm write, that it may read what a re-run reads when the route takes
// re-runs, and that an installation token can be had.
func (c *checker) checkInstallation(ctx context.Context, tk *github.App, field, owner, name, perm string, reruns bool, timeout time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var in github.Installation
	var err error
	if name == "*" {
		in, err = tk.AccountInstallation(pctx, owner)
	} else {
		in, err = tk.Installation(pctx, owner, name)
	}
	if err != nil {
		c.fail("%s: %s/%s: %v", field, owner, name, err)
		return
	}
	if perm != "" && in.Permissions[perm] != "write" {
		c.fail("%s: %s/%s: installation %d may not write %s (it has %s): give the App the %s permission Read and write "+
			"(the App's settings, Permissions), then have the account's owner accept it (Settings, GitHub Apps)",
			field, owner, name, in.ID, perm, permissions(in.Permissions), perm)
		return
	}
	if reruns {
		var missing []string
		for _, read := range rerunReads {
			if l := in.Permissions[read]; l != "read" && l != "write" {
				missing = append(missing, read)
			}
		}
		if len(missing) > 0 {
			c.fail("%s: %s/%s: installation %d may not read %s (it has %s), which a Re-run reads its commit's files and "+
				"messages with: give the App those permissions Read-only, then have the account's owner accept them; or leave "+
				"rerun out of routes.%s.events (its re-runs would fail their path, message and title rules naming the permission)",
				field, owner, name, in.ID, strings.Join(missing, " and "), permissions(in.Permissions), strings.Split(field, ".")[1])
			return
		}
	}
	if _, err := tk.Token(pctx, in.ID); err != nil {
		c.fail("%s: %s/%s: %v", field, owner, name, err)
		return
	}
	c.ok("%s: %s/%s: installation %d (account %s) may write %s; an installation token can be had (nothing was posted)",
		field, owner, name, in.ID, in.Account.Login, perm)
}

// permissions lists an installation's permissions as name:level, or "none".
func permissions(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+":"+m[k])
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
