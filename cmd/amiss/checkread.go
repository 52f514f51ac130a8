package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/secrets"
)

// readNeeds names the rules of r that read from its provider's API what its webhooks lack:
// commit_message and forbidden_paths (no pull request webhook carries commits or files, and
// pushes list a bounded number), and, on a route taking GitHub's Re-runs, pull_request_title
// and target_branches (a Re-run carries no title, and no branch for a fork). None: the route
// reads nothing (an HTTP evaluator is given the webhook's change as it is).
func readNeeds(r *config.Route) []string {
	if r.Evaluator.URL != "" {
		return nil
	}
	var needs []string
	if r.Rules.CommitMessage != "" {
		needs = append(needs, "commit_message")
	}
	if len(r.Rules.ForbiddenPaths) > 0 {
		needs = append(needs, "forbidden_paths")
	}
	if slices.Contains(r.Events, "rerun") {
		if r.Rules.PullRequestTitle != "" {
			needs = append(needs, "pull_request_title")
		}
		if len(r.Rules.TargetBranches) > 0 {
			needs = append(needs, "target_branches")
		}
	}
	return needs
}

// readGrant is what a read credential needs on each provider API, as a refused read says.
var readGrant = map[string]string{
	provider.GitHub: "grant it the Contents: read and Pull requests: read permissions (a classic token: the repo scope)",
	provider.Gitea:  "grant the token the " + gitea.ReadScope + " scope, as a user who can read the repository",
	provider.GitLab: "grant the token the " + gitlab.ReadScope + " scope, as a member who can read the project's code (Reporter)",
}

// appReads are the installation permissions a GitHub App reads what webhooks lack with.
var appReads = []string{"pull_requests", "contents"}

// checkReads checks, for a route whose rules read from its provider's API, that the route has a
// credential to read with and that a read succeeds on each repository it names, posting
// nothing: GitHub, the comparison of the default branch with itself (as a token, or as the
// App's installation, whose read permissions are checked); Gitea and Forgejo, the repository;
// GitLab, the project and its code. A repository named owner/* is not read (no repository is
// named), but a GitHub App's installation on the account is still checked.
func (c *checker) checkReads(ctx context.Context, res secrets.Source, r *config.Route, hc *http.Client, timeout time.Duration) {
	needs := readNeeds(r)
	if len(needs) == 0 {
		return
	}
	field := "routes." + r.Name
	p, ok := provider.Sender(r.Provider)
	if !ok || p.API == "" {
		return // its webhooks carry every input (Standard Webhooks)
	}
	rules := strings.Join(needs, ", ")
	if p.Reader == nil {
		c.fail("%s.rules: %s read from %s's API what its webhooks lack, which amiss cannot read yet: those rules fail closed on "+
			"every delivery that lacks it", field, rules, r.Provider)
		return
	}
	rd, ok := r.ReadFrom()
	if !ok {
		c.fail("%s.rules: %s read from %s's API what its webhooks lack, and the route has no credential to read it: publish to %s, "+
			"or add a read block (docs/configuration.md, reading what a webhook lacks); until then those rules fail closed",
			field, rules, r.Provider, r.Provider)
		return
	}
	field += ".publish"
	if r.Read != nil {
		field = "routes." + r.Name + ".read"
	}
	if rd.App != nil {
		c.checkAppReads(ctx, res, r, field, rd, hc, timeout)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	token, err := res.Get(pctx, rd.Token.From)
	cancel()
	if err != nil {
		return // the secret's own check has said why, and what to do
	}
	for _, repo := range readRepositories(r) {
		if strings.HasSuffix(repo, "/*") {
			c.ok("%s: %s names no repository to read: the first delivery shows whether its reads succeed", field, repo)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		switch p.API {
		case provider.GitHub:
			_, err = github.NewTokenClient(rd.BaseURL, token, hc).Compare(pctx, 0, repo, "HEAD", "HEAD", 1)
		default:
			target := provider.Target{BaseURL: rd.BaseURL, Token: token, Client: hc}
			if api, ok := provider.Lookup(rd.Provider); ok {
				target.API = api.API // Bitbucket's reader reads Cloud's or Data Center's API, as the route says
			}
			reader, ok := p.Reader(target).(interface {
				CheckRead(ctx context.Context, repo string) error
			})
			if !ok {
				cancel()
				c.ok("%s: %s: amiss has no read probe for %s: the first delivery shows whether its reads succeed", field, repo, r.Provider)
				continue
			}
			err = reader.CheckRead(pctx, repo)
		}
		cancel()
		c.readResult(field, r.Provider, p.API, repo, rules, err)
	}
}

// readResult prints the outcome of a read of repo.
func (c *checker) readResult(field, name, api, repo, rules string, err error) {
	switch status := providerapi.StatusOf(err); {
	case err == nil:
		c.ok("%s: %s: the credential reads %s's API, as %s need (nothing was posted)", field, repo, name, rules)
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound:
		c.fail("%s: %s: %v: %s; until then %s fail closed", field, repo, err, readGrant[api], rules)
	default:
		c.fail("%s: %s: reading %s's API: %v", field, repo, name, err)
	}
}

// checkAppReads checks a GitHub App's reads: on each repository the route names, its
// installation may read pull requests and contents, and a read with its token succeeds.
func (c *checker) checkAppReads(ctx context.Context, res secrets.Source, r *config.Route, field string, rd config.Read, hc *http.Client, timeout time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	pemKey, err := res.Get(pctx, rd.App.PrivateKey.From)
	cancel()
	if err != nil {
		return // the secret's own check has said why
	}
	app, err := github.NewApp(github.AppConfig{BaseURL: rd.BaseURL, AppID: rd.App.ID, PrivateKey: []byte(pemKey), Client: hc})
	if err != nil {
		if r.Read != nil { // the publisher's key is checked with the publisher
			c.fail("%s.app.private_key: %v", field, err)
		}
		return
	}
	for _, repo := range readRepositories(r) {
		owner, name, _ := strings.Cut(repo, "/")
		pctx, cancel := context.WithTimeout(ctx, timeout)
		var in github.Installation
		if name == "*" {
			in, err = app.AccountInstallation(pctx, owner)
		} else {
			in, err = app.Installation(pctx, owner, name)
		}
		if err != nil {
			cancel()
			if r.Read != nil { // the publisher's installations are checked with the publisher
				c.fail("%s.app: %s: %v", field, repo, err)
			}
			continue
		}
		var missing []string
		for _, perm := range appReads {
			if l := in.Permissions[perm]; l != "read" && l != "write" {
				missing = append(missing, perm)
			}
		}
		switch {
		case len(missing) > 0:
			c.fail("%s.app: %s: installation %d may not read %s (it has %s), which %s read what webhooks lack with: give the App "+
				"those permissions Read-only (the App's settings, Permissions), then have the account's owner accept them; until then "+
				"those rules fail closed", field, repo, in.ID, strings.Join(missing, " and "), permissions(in.Permissions), strings.Join(readNeeds(r), ", "))
		case name == "*":
			c.ok("%s.app: %s: installation %d may read pull requests and contents (no repository named to read)", field, repo, in.ID)
		default:
			_, err = github.NewInstallationClient(rd.BaseURL, app, hc).Compare(pctx, in.ID, repo, "HEAD", "HEAD", 1)
			c.readResult(field+".app", r.Provider, provider.GitHub, repo, strings.Join(readNeeds(r), ", "), err)
		}
		cancel()
	}
}

// readRepositories is each repository r names, once.
func readRepositories(r *config.Route) []string {
	var out []string
	seen := map[string]bool{}
	for _, repo := range r.Repositories {
		owner, name, ok := strings.Cut(repo, "/")
		if !ok || owner == "" || name == "" || seen[strings.ToLower(repo)] {
			continue
		}
		seen[strings.ToLower(repo)] = true
		out = append(out, repo)
	}
	return out
}
