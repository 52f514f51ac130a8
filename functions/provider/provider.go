// Package provider is the table of the providers amiss knows. Each row says, for one name a
// route's provider or publish.provider field may hold: the signature schemes its webhooks
// carry, how the change is read from its payloads, and how a verdict is posted back to it as
// a commit status. Configuration, the ingress and the runner's wiring read providers only
// through this table, so a new provider, or a new way to authenticate to one (a GitHub App),
// is one row here.
package provider

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/webhook"
)

// Provider names, as a configuration spells them.
const (
	GitHub = "github"
	// GitHubChecks publishes check runs to GitHub as a GitHub App (publish-only: its webhooks
	// are GitHub's, received under github).
	GitHubChecks = "github-checks"
	Gitea        = "gitea"
	Forgejo      = "forgejo"
	GitLab       = "gitlab"
	Bitbucket    = "bitbucket"
	// BitbucketDataCenter publishes build statuses to a Bitbucket Data Center server
	// (publish-only: its webhooks are received under bitbucket, told apart from Bitbucket
	// Cloud's by their event keys).
	BitbucketDataCenter = "bitbucket-datacenter"
	StandardWebhooks    = "standard-webhooks"
	// Log is no provider: a publisher that prints each verdict in amiss's log.
	Log = "log"
)

// Provider is one row of the table.
type Provider struct {
	// Name is how a route names the provider.
	Name string
	// Schemes are the signature schemes its webhooks may carry, the default first. None: it
	// sends no webhooks amiss receives (a route's provider cannot name it).
	Schemes []string
	// Format is how the change is read from its webhooks.
	Format change.Format
	// Publisher builds its commit-status publisher; nil: a route cannot publish to it.
	Publisher func(Target) publish.Publisher
	// Remote says the publisher posts to the provider's API, at the route's publish.base_url
	// with the token publish.token names; otherwise it needs neither.
	Remote bool
	// API names the provider's API, shared by the rows that speak it (github and
	// github-checks; gitea and forgejo): a route whose webhooks and publisher share an API
	// reads what its webhooks lack with the publisher's credential. Empty: no API.
	API string
	// SenderAPIs, for a provider whose webhooks come from more than one API, lists them all
	// (bitbucket: Bitbucket Cloud's and Data Center's, told apart by their event keys; the
	// change names which: change.Change.API). Empty: its webhooks come from API alone.
	SenderAPIs []string
	// Reader builds the reader of what the provider's webhooks lack (a pull request's files and
	// commits, a push's beyond what its webhook lists) from its API (the target's, for a
	// provider of SenderAPIs); nil: none yet, and the rules that need such a read fail closed.
	Reader func(Target) Reader
}

// Receives reports whether the provider's webhooks may come from api.
func (p *Provider) Receives(api string) bool {
	if len(p.SenderAPIs) == 0 {
		return api != "" && api == p.API
	}
	return slices.Contains(p.SenderAPIs, api)
}

// Reader reads a change's inputs from a provider's API (the runner's InputReader).
type Reader interface {
	Read(ctx context.Context, s change.Change, need change.Inputs) (change.Change, error)
}

// Target is where and as whom a publisher posts.
type Target struct {
	// API is the API the target speaks (the API of the provider row it was built for): a
	// reader of a provider whose webhooks come from more than one API reads this one.
	API     string
	BaseURL string
	Token   string
	// Tokens, when set, gives GitHub App installation tokens: the GitHub publisher posts with
	// them instead of Token, and the check-run publisher needs them.
	Tokens github.InstallationTokens
	Client *http.Client
	// Log receives the verdicts of the log publisher.
	Log *slog.Logger
}

// table lists the providers, in the order messages list them.
var table = []Provider{
	{Name: GitHub, Schemes: []string{webhook.SchemeGitHub}, Format: change.GitHubFormat, Remote: true, API: GitHub,
		Publisher: func(t Target) publish.Publisher {
			if t.Tokens != nil {
				return publish.NewGitHubApp(t.BaseURL, t.Tokens, t.Client)
			}
			return publish.NewGitHub(t.BaseURL, t.Token, t.Client)
		},
		Reader: func(t Target) Reader {
			if t.Tokens != nil {
				return github.NewInstallationClient(t.BaseURL, t.Tokens, t.Client)
			}
			return github.NewTokenClient(t.BaseURL, t.Token, t.Client)
		}},
	{Name: GitHubChecks, Remote: true, API: GitHub,
		Publisher: func(t Target) publish.Publisher { return publish.NewGitHubChecks(t.BaseURL, t.Tokens, t.Client) }},
	{Name: Gitea, Schemes: []string{webhook.SchemeGitea}, Format: change.GiteaFormat, Remote: true, API: Gitea,
		Publisher: func(t Target) publish.Publisher { return publish.NewGitea(t.BaseURL, t.Token, t.Client) },
		Reader:    giteaReader},
	// Forgejo's webhooks are received under their own name; its API is Gitea's, so a route
	// publishes to a Forgejo server with publish.provider gitea, and reads it as Gitea.
	{Name: Forgejo, Schemes: []string{webhook.SchemeForgejo, webhook.SchemeGitea}, Format: change.ForgejoFormat, API: Gitea,
		Reader: giteaReader},
	{Name: GitLab, Schemes: []string{webhook.SchemeGitLabSigning, webhook.SchemeGitLabToken}, Format: change.GitLabFormat, Remote: true, API: GitLab,
		Publisher: func(t Target) publish.Publisher { return publish.NewGitLab(t.BaseURL, t.Token, t.Client) },
		Reader:    func(t Target) Reader { return gitlab.NewClient(t.BaseURL, t.Token, t.Client) }},
	// Bitbucket's webhooks come from Bitbucket Cloud and from Data Center servers; its own
	// publisher posts to Bitbucket Cloud, and bitbucket-datacenter's to a Data Center server.
	// Its reader reads the API its target speaks, and refuses a change of the other.
	{Name: Bitbucket, Schemes: []string{webhook.SchemeBitbucket}, Format: change.BitbucketFormat, Remote: true, API: Bitbucket,
		SenderAPIs: []string{Bitbucket, BitbucketDataCenter},
		Publisher:  func(t Target) publish.Publisher { return publish.NewBitbucket(t.BaseURL, t.Token, t.Client) },
		Reader: func(t Target) Reader {
			if t.API == BitbucketDataCenter {
				return bitbucketdc.NewClient(t.BaseURL, t.Token, t.Client)
			}
			return bitbucket.NewClient(t.BaseURL, t.Token, t.Client)
		}},
	{Name: BitbucketDataCenter, Remote: true, API: BitbucketDataCenter,
		Publisher: func(t Target) publish.Publisher { return publish.NewBitbucketDataCenter(t.BaseURL, t.Token, t.Client) }},
	{Name: StandardWebhooks, Schemes: []string{webhook.SchemeStandardWebhooks}, Format: change.StandardWebhooksFormat},
	{Name: Log, Publisher: func(t Target) publish.Publisher { return publish.Log{Logger: t.Log} }},
}

// giteaReader reads a Gitea or Forgejo server's API with a token.
func giteaReader(t Target) Reader { return gitea.NewClient(t.BaseURL, t.Token, t.Client) }

// Lookup returns the provider called name.
func Lookup(name string) (*Provider, bool) {
	for i := range table {
		if table[i].Name == name {
			return &table[i], true
		}
	}
	return nil, false
}

// Sender returns the provider whose webhooks a route called name receives: one with schemes.
func Sender(name string) (*Provider, bool) {
	p, ok := Lookup(name)
	if !ok || len(p.Schemes) == 0 {
		return nil, false
	}
	return p, true
}

// Publishing returns the provider a route's publish.provider called name posts to: one with
// a publisher.
func Publishing(name string) (*Provider, bool) {
	p, ok := Lookup(name)
	if !ok || p.Publisher == nil {
		return nil, false
	}
	return p, true
}

// Senders lists the names a route's provider may hold, in table order.
func Senders() []string { return names(func(p *Provider) bool { return len(p.Schemes) > 0 }) }

// Publishers lists the names a route's publish.provider may hold, in table order.
func Publishers() []string { return names(func(p *Provider) bool { return p.Publisher != nil }) }

func names(keep func(*Provider) bool) []string {
	var out []string
	for i := range table {
		if keep(&table[i]) {
			out = append(out, table[i].Name)
		}
	}
	return out
}

// Extract reads the changes of a webhook the provider called name sent: one, or a Bitbucket
// push's one per branch (see change.Extract).
func Extract(name string, h http.Header, body []byte) ([]change.Change, error) {
	p, ok := Sender(name)
	if !ok {
		return nil, fmt.Errorf("change: unknown provider %q", name)
	}
	return change.Extract(p.Name, p.Format, h, body)
}
