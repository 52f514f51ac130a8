// Package config reads the amiss configuration: the controller's limits and the routes that
// map /hooks/{route} to a provider, a signature scheme, its secrets, the accepted events, the
// repositories the route may publish for, its evaluation rules and its publish target.
//
// Loading is strict: an unknown field, a missing field or a bad value fails with an error that
// names the field by its YAML path (for example "routes.acme.secrets[0].from: ..."), never by
// a Go type. Secrets are never in the file, only references to where they are read at run
// time. A value may name an environment variable as ${NAME}, replaced when the file is loaded
// (a list item that is exactly ${NAME} becomes one item per comma-separated value): that is
// how a deployment passes secret ARNs and repository lists to a packaged file.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/amiss-ci/amiss/functions/evaluate/glob"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
)

// Config is the whole configuration.
type Config struct {
	Controller Controller        `yaml:"controller"`
	Routes     map[string]*Route `yaml:"routes"`
}

// Controller holds the controller-wide limits. The ledger records the replay ceilings and the
// record cap in its root; a route can only narrow them.
type Controller struct {
	SignedAgeCeiling time.Duration `yaml:"signed_age_ceiling"`
	QueueCeiling     time.Duration `yaml:"queue_ceiling"`
	FutureSkew       time.Duration `yaml:"future_skew"`
	RecordCap        int64         `yaml:"record_cap"`
	MaxBodyBytes     int           `yaml:"max_body_bytes"`
	// MaxChangeBytes bounds the change a row keeps (what the runner evaluates).
	MaxChangeBytes int `yaml:"max_change_bytes"`
	// OldMaxSubjectBytes is max_change_bytes under its earlier name: still read, refused
	// alongside the new name.
	OldMaxSubjectBytes *int `yaml:"max_subject_bytes"`
	MaxReportBytes     int  `yaml:"max_report_bytes"`
	// BodyAgeCeiling is the longest accepted age of a provider-set time inside a signed body
	// (GitHub, Gitea, Forgejo, Bitbucket: the tables in docs/providers), recorded by the ledger
	// root; zero switches body times off (every body-only delivery keeps a permanent marker).
	BodyAgeCeiling time.Duration `yaml:"body_age_ceiling"`
	// PublishBudget is how long publication of a saved verdict is retried before it is
	// abandoned (zero: the queue ceiling). Not recorded in the ledger root.
	PublishBudget time.Duration `yaml:"publish_budget"`
}

// Route is one /hooks/{route}.
type Route struct {
	Name string `yaml:"-"`
	// Provider names a row of the provider table (functions/provider) whose webhooks a route
	// receives: github, gitea, forgejo, gitlab, bitbucket or standard-webhooks.
	Provider string `yaml:"provider"`
	// Scheme is the signature scheme; it defaults by provider (gitlab: gitlab-signing).
	Scheme  string      `yaml:"scheme"`
	Secrets []SecretRef `yaml:"secrets"`
	// Events lists the accepted event kinds: push, pull_request, rerun (a GitHub check run's or
	// check suite's Re-run; default: push and pull_request, and rerun on a route that publishes
	// as a GitHub App, the only one whose check runs a user can re-run). Others are ignored
	// (204).
	Events []string `yaml:"events"`
	// MaxAge narrows the accepted signed age (signed schemes only).
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBodyAge narrows the accepted age of a body's provider-set time (body-signed schemes
	// only: github-sha256, gitea-sha256, forgejo-sha256, bitbucket-sha256).
	MaxBodyAge time.Duration `yaml:"max_body_age"`
	// Repositories the route may publish for: "owner/name" or "owner/*".
	Repositories []string `yaml:"repositories"`
	Rules        Rules    `yaml:"rules"`
	// Evaluator, when its URL is set, evaluates instead of the rules: an operator's HTTP
	// endpoint. A route sets rules or an evaluator, never both.
	Evaluator HTTPEvaluator `yaml:"evaluator"`
	Publish   Publish       `yaml:"publish"`
	// Read, when set, is where the runner reads what the route's webhooks lack (read.go).
	Read *Read `yaml:"read"`
	// CatchUp, when set, asks the provider again for the route's failed deliveries
	// (catchup.go).
	CatchUp *CatchUp `yaml:"catchup"`
}

// HTTPEvaluator is an operator's evaluation endpoint; requests are signed with the secret.
type HTTPEvaluator struct {
	URL     string        `yaml:"url"`
	Secret  SecretRef     `yaml:"secret"`
	Timeout time.Duration `yaml:"timeout"`
}

// SecretRef says where a secret is read at run time: "env:NAME", "file:PATH" or
// "aws-secretsmanager:ARN" (with "#key" to pick a key of a JSON secret).
type SecretRef struct {
	ID   string `yaml:"id"`
	From string `yaml:"from"`
}

// Rules are the built-in evaluator's rules; every one is optional.
type Rules struct {
	PullRequestTitle string   `yaml:"pull_request_title"`
	CommitMessage    string   `yaml:"commit_message"`
	ForbiddenPaths   []string `yaml:"forbidden_paths"`
	TargetBranches   []string `yaml:"target_branches"`
}

// Publish is where verdicts go.
type Publish struct {
	// Provider names a row of the provider table (functions/provider) that publishes: github,
	// github-checks (check runs, as a GitHub App), gitea (Gitea and Forgejo), gitlab,
	// bitbucket (Bitbucket Cloud), bitbucket-datacenter (a Bitbucket Data Center server), or
	// log (print the verdict).
	Provider string    `yaml:"provider"`
	BaseURL  string    `yaml:"base_url"`
	Token    SecretRef `yaml:"token"`
	// App, instead of Token, publishes as a GitHub App with installation tokens (github:
	// statuses; github-checks, which requires it: check runs).
	App       *App   `yaml:"app"`
	Context   string `yaml:"context"`
	TargetURL string `yaml:"target_url"`
	// Timeout bounds one request to the provider's API (default DefaultPublishTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// Settle is how long after amiss gave up on a request the provider may still apply it
	// (default DefaultPublishSettle): until then, what stands on the commit is not known, and
	// a newer verdict posted meanwhile is read back once it is over.
	Settle time.Duration `yaml:"settle"`
	// Concurrency bounds the requests in flight at once to this API (base URL), per runner
	// process (default DefaultPublishConcurrency); a delivery that finds no room waits for it,
	// and the requests and waiting deliveries of one API together hold at most this many
	// workers.
	Concurrency int `yaml:"concurrency"`
}

// App is a GitHub App a route publishes as.
type App struct {
	// ID is the App's id (digits) or its client id (Iv1.…, Iv23…), from the App's settings
	// page; GitHub accepts either as the JWT's issuer.
	ID string `yaml:"id"`
	// PrivateKey is where the App's private key (the PEM GitHub downloads) is read at run
	// time, like every other secret.
	PrivateKey SecretRef `yaml:"private_key"`
}

// githubChecks is the provider table's row that publishes check runs (functions/provider).
const githubChecks = provider.GitHubChecks

// appID matches an App id or a client id.
var appID = regexp.MustCompile(`^([1-9][0-9]{0,18}|Iv[0-9A-Za-z.]{1,40})$`)

// validate checks the App against the publisher it authenticates to.
func (a *App) validate(p *Publish) error {
	if a == nil {
		if p.Provider == githubChecks {
			return fieldErr("publish.app", "publish.provider %s writes check runs, which only a GitHub App can: "+
				"set publish.app {id, private_key} (see docs/providers/github.md, GitHub App)", githubChecks)
		}
		return nil
	}
	if p.Provider != provider.GitHub && p.Provider != githubChecks {
		return fieldErr("publish.app", "a GitHub App authenticates to GitHub only: want publish.provider %s or %s, not %q",
			provider.GitHub, githubChecks, p.Provider)
	}
	if p.Token.From != "" || p.Token.ID != "" {
		return fieldErr("publish.token", "publish.app and publish.token are exclusive: the App's installation tokens replace the token; remove one")
	}
	if !appID.MatchString(a.ID) {
		return fieldErr("publish.app.id", "%q: want the App's id (digits) or client id (Iv…), from the App's settings page", a.ID)
	}
	if err := a.PrivateKey.check(); err != nil {
		return fieldErr("publish.app.private_key.from", "%v", err)
	}
	return nil
}

// Publication defaults and bounds. GitHub ends any request it takes more than 10 seconds to
// process; GitLab's default request timeout is 60 seconds. A timeout of 30 seconds lets a slow
// provider answer, and a minute's settle covers a request a provider was still processing
// when amiss gave up on it.
const (
	DefaultPublishTimeout     = 30 * time.Second
	DefaultPublishSettle      = time.Minute
	DefaultPublishConcurrency = 4
	MaxPublishTimeout         = 5 * time.Minute
	MaxPublishSettle          = time.Hour
	MaxPublishConcurrency     = 64
)

// defaultMaxBodyBytes is the largest webhook body the ingress reads when the file sets no
// max_body_bytes. It is not a ledger limit: the root never records it.
const defaultMaxBodyBytes = 1 << 20

// defaultController holds what a file that leaves a controller setting out gets. Every limit
// the ledger root records comes from ledger.DefaultLimits, the one source of those numbers, so
// a root created by one command (amiss serve, a Lambda, amiss ledger) opens under every other
// that runs on defaults.
var defaultController = controllerOf(ledger.DefaultLimits(), defaultMaxBodyBytes)

// controllerOf is the controller settings that ask for the ledger limits l, with the ingress's
// body limit maxBody. It is the inverse of Config.Limits.
func controllerOf(l ledger.Limits, maxBody int) Controller {
	return Controller{
		SignedAgeCeiling: l.SignedAgeCeiling,
		QueueCeiling:     l.QueueCeiling,
		FutureSkew:       l.FutureSkew,
		RecordCap:        l.RecordCap,
		MaxBodyBytes:     maxBody,
		MaxChangeBytes:   l.MaxChangeBytes,
		MaxReportBytes:   l.MaxReportBytes,
		BodyAgeCeiling:   l.BodyAgeCeiling,
	}
}

// bodySigned lists the schemes whose signature covers the body and nothing else: the ones a
// provider-set time inside the body can bound.
var bodySigned = map[string]bool{webhook.SchemeGitHub: true, webhook.SchemeGitea: true, webhook.SchemeForgejo: true,
	webhook.SchemeBitbucket: true}

var (
	routeName  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	repoName   = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$`)
	repoOwner  = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/\*$`)
	knownEvent = map[string]bool{"push": true, "pull_request": true, "rerun": true}
)

// Load reads and validates a configuration file, expanding ${NAME} from the process
// environment.
func Load(file string) (*Config, error) { return LoadEnv(file, os.Getenv) }

// LoadEnv is Load with the environment read through getenv.
func LoadEnv(file string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := ParseEnv(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return c, nil
}

// Parse decodes and validates a configuration, expanding ${NAME} from the process
// environment.
func Parse(data []byte) (*Config, error) { return ParseEnv(data, os.Getenv) }

// ParseEnv is Parse with the environment read through getenv.
func ParseEnv(data []byte, getenv func(string) string) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if strings.Contains(msg, "did not find expected alphabetic or numeric character") {
			// YAML reads a value starting with * as an alias: the usual glob **/*.pem.
			msg += " (a value starting with * is a YAML alias: quote it, as in '**/*.pem')"
		}
		return nil, fmt.Errorf("not valid YAML: %s", msg)
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("empty configuration")
	}
	if err := expand(&doc, "", getenv); err != nil {
		return nil, err
	}
	if err := checkShape(&doc, reflect.TypeOf(Config{}), ""); err != nil {
		return nil, err
	}
	c := &Config{Controller: defaultController}
	if err := doc.Decode(c); err != nil {
		// checkShape catches what Decode refuses; this is a backstop that still names no type.
		return nil, fmt.Errorf("cannot read the configuration: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if old := c.Controller.OldMaxSubjectBytes; old != nil {
		if hasKey(&doc, "controller", "max_change_bytes") {
			return nil, errors.New("controller: max_subject_bytes is the former name of max_change_bytes: set only max_change_bytes")
		}
		c.Controller.MaxChangeBytes, c.Controller.OldMaxSubjectBytes = *old, nil
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Limits returns the ledger limits the controller settings describe.
func (c *Config) Limits() ledger.Limits {
	return ledger.Limits{
		RecordCap:        c.Controller.RecordCap,
		SignedAgeCeiling: c.Controller.SignedAgeCeiling,
		QueueCeiling:     c.Controller.QueueCeiling,
		FutureSkew:       c.Controller.FutureSkew,
		MaxChangeBytes:   c.Controller.MaxChangeBytes,
		MaxReportBytes:   c.Controller.MaxReportBytes,
		BodyAgeCeiling:   c.Controller.BodyAgeCeiling,
	}
}

// MinReportBytes is the smallest report ceiling a configuration may set: room for a verdict
// whose description the runner has cut (runner.MaxDescription, 1,024 characters), with the
// route's context and link at their longest, every character escaped as JSON (6 bytes).
const MinReportBytes = 32 << 10

// The longest status context and target URL a route may publish with, in characters.
const (
	MaxContext   = 255
	MaxTargetURL = 2048
)

// DefaultPublishBudget is the publish budget when neither publish_budget nor queue_ceiling
// gives one.
const DefaultPublishBudget = 72 * time.Hour

// PublishBudget is how long the runner retries publishing a saved verdict before abandoning
// it: publish_budget, or else the queue ceiling (the time a delivery can still matter), or
// else 72 hours.
func (c *Config) PublishBudget() time.Duration {
	switch {
	case c.Controller.PublishBudget > 0:
		return c.Controller.PublishBudget
	case c.Controller.QueueCeiling > 0:
		return c.Controller.QueueCeiling
	}
	return DefaultPublishBudget
}

// Route returns the named route, or nil.
func (c *Config) Route(name string) *Route { return c.Routes[name] }

// RouteNames lists the routes in order.
func (c *Config) RouteNames() []string {
	names := make([]string, 0, len(c.Routes))
	for n := range c.Routes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (c *Config) validate() error {
	if err := c.Limits().Validate(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if c.Controller.MaxBodyBytes <= 0 || c.Controller.MaxBodyBytes > 6<<20 {
		return fmt.Errorf("controller.max_body_bytes: must be in (0, 6 MiB] (API Gateway's payload limit is 10 MB, Lambda's 6 MB), got %d", c.Controller.MaxBodyBytes)
	}
	if c.Controller.MaxReportBytes < MinReportBytes {
		return fmt.Errorf("controller.max_report_bytes: must be at least %d (a verdict with its description, context and link), got %d",
			MinReportBytes, c.Controller.MaxReportBytes)
	}
	if c.Controller.PublishBudget < 0 {
		return fmt.Errorf("controller.publish_budget: must not be negative, got %s", c.Controller.PublishBudget)
	}
	if len(c.Routes) == 0 {
		return errors.New("routes: at least one route is needed")
	}
	for _, name := range c.RouteNames() {
		r := c.Routes[name]
		if r == nil {
			return fmt.Errorf("routes.%s: empty route", name)
		}
		r.Name = name
		if err := r.validate(c.Controller); err != nil {
			return fmt.Errorf("routes.%s.%w", name, err)
		}
	}
	if err := c.checkDestinations(); err != nil {
		return err
	}
	return c.checkBitbucketKeys()
}

// checkBitbucketKeys refuses two different Bitbucket contexts that would be published under
// one status key (the first 40 characters): each would overwrite the other's status.
func (c *Config) checkBitbucketKeys() error {
	owner := map[string]*Route{}
	for _, name := range c.RouteNames() {
		r := c.Routes[name]
		if r.Publish.Provider != provider.Bitbucket {
			continue
		}
		key := publish.BitbucketKey(r.Publish.Context)
		if o, ok := owner[key]; ok && o.Publish.Context != r.Publish.Context {
			return fmt.Errorf("routes.%s.publish.context: %q and routes.%s's %q share their first %d characters, "+
				"Bitbucket's status key, so each would overwrite the other's status", name, r.Publish.Context, o.Name,
				o.Publish.Context, publish.BitbucketKeyLength)
		}
		owner[key] = r
	}
	return nil
}

// fieldErr prefixes an error with the field it concerns; validate adds the route's path.
func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

func (r *Route) validate(ctl Controller) error {
	if !routeName.MatchString(r.Name) {
		return fieldErr("name", "route names are 1-64 of [a-z0-9_-], starting with a letter or digit")
	}
	p, ok := provider.Sender(r.Provider)
	if !ok {
		return fieldErr("provider", "unknown provider %q (want one of %s)", r.Provider, strings.Join(provider.Senders(), ", "))
	}
	if r.Scheme == "" {
		r.Scheme = p.Schemes[0]
	}
	if !contains(p.Schemes, r.Scheme) {
		return fieldErr("scheme", "%q is not a scheme of %s (want one of %s)", r.Scheme, r.Provider, strings.Join(p.Schemes, ", "))
	}
	if len(r.Secrets) == 0 {
		return fieldErr("secrets", "at least one secret is needed")
	}
	seen := map[string]bool{}
	for i, s := range r.Secrets {
		if s.ID == "" || seen[s.ID] {
			return fieldErr(fmt.Sprintf("secrets[%d].id", i), "each secret needs a unique id (used in logs instead of its value)")
		}
		seen[s.ID] = true
		if err := s.check(); err != nil {
			return fieldErr(fmt.Sprintf("secrets[%d].from", i), "%v", err)
		}
	}
	if len(r.Events) == 0 {
		r.Events = []string{"push", "pull_request"}
		if r.Publish.App != nil {
			// Only a GitHub App owns check runs a user can press Re-run on.
			r.Events = append(r.Events, "rerun")
		}
	}
	for i, e := range r.Events {
		if !knownEvent[e] {
			return fieldErr(fmt.Sprintf("events[%d]", i), "unknown event %q (want push, pull_request or rerun)", e)
		}
		if e == "rerun" && r.Provider != provider.GitHub {
			return fieldErr(fmt.Sprintf("events[%d]", i), "rerun is a GitHub check run's or check suite's Re-run: provider %s sends none", r.Provider)
		}
	}
	signed := r.Scheme == webhook.SchemeStandardWebhooks || r.Scheme == webhook.SchemeGitLabSigning
	switch {
	case r.MaxAge < 0:
		return fieldErr("max_age", "must not be negative")
	case r.MaxAge > 0 && !signed:
		return fieldErr("max_age", "scheme %s signs no time, so there is no age to narrow", r.Scheme)
	case r.MaxAge > ctl.SignedAgeCeiling:
		return fieldErr("max_age", "%s is over the controller's signed_age_ceiling %s: a route can only narrow", r.MaxAge, ctl.SignedAgeCeiling)
	}
	switch {
	case r.MaxBodyAge < 0:
		return fieldErr("max_body_age", "must not be negative")
	case r.MaxBodyAge > 0 && !bodySigned[r.Scheme]:
		return fieldErr("max_body_age", "scheme %s does not sign the body alone, so no body time bounds it", r.Scheme)
	case r.MaxBodyAge > 0 && ctl.BodyAgeCeiling == 0:
		return fieldErr("max_body_age", "the controller's body_age_ceiling is 0: body times are off")
	case r.MaxBodyAge > ctl.BodyAgeCeiling:
		return fieldErr("max_body_age", "%s is over the controller's body_age_ceiling %s: a route can only narrow", r.MaxBodyAge, ctl.BodyAgeCeiling)
	}
	if len(r.Repositories) == 0 {
		if r.Scheme == webhook.SchemeGitLabToken {
			return fieldErr("repositories", "mandatory with gitlab-token: the shared token proves nothing about the body, so a leaked token must not open every repository")
		}
		return fieldErr("repositories", "list the repositories this route may publish for (owner/name or owner/*)")
	}
	for i, p := range r.Repositories {
		if !repoName.MatchString(p) && !repoOwner.MatchString(p) {
			return fieldErr(fmt.Sprintf("repositories[%d]", i), "%q is neither owner/name nor owner/*", p)
		}
	}
	if err := r.Rules.validate(); err != nil {
		return err
	}
	if !r.Accepts("pull_request") && !r.Accepts("rerun") {
		// Rules that judge pull requests (a Re-run may be one's) would never be checked.
		for _, f := range []struct {
			field string
			set   bool
		}{{"rules.pull_request_title", r.Rules.PullRequestTitle != ""}, {"rules.target_branches", len(r.Rules.TargetBranches) > 0}} {
			if f.set {
				return fieldErr(f.field, "judges pull requests, and the route takes none (events: %s): add pull_request to events, or remove the rule",
					strings.Join(r.Events, ", "))
			}
		}
	}
	if err := r.Evaluator.validate(r.Rules); err != nil {
		return err
	}
	if err := r.Publish.validate(); err != nil {
		return err
	}
	if err := r.Read.validate(r); err != nil {
		return err
	}
	return r.CatchUp.validate(r)
}

// set reports whether the rules set any rule.
func (r Rules) set() bool {
	return r.PullRequestTitle != "" || r.CommitMessage != "" || len(r.ForbiddenPaths) > 0 || len(r.TargetBranches) > 0
}

// validate checks an evaluator block against the route's rules: an evaluator replaces them, so
// a route may set one or the other, and a block that sets anything sets the URL.
func (e HTTPEvaluator) validate(rules Rules) error {
	if e.URL == "" {
		if e.Secret != (SecretRef{}) || e.Timeout != 0 {
			return fieldErr("evaluator.url", "no url: without one the block is unused and the route is evaluated by its rules alone "+
				"(with none, every change passes); set the url, or remove the block")
		}
		return nil
	}
	if rules.set() {
		return fieldErr("evaluator", "the route sets rules too, which the evaluator replaces: they would never be checked; "+
			"remove them (the endpoint can check what they say), or the evaluator")
	}
	u, err := url.Parse(e.URL)
	switch {
	case err != nil:
		return fieldErr("evaluator.url", "%q is not a URL: %v", e.URL, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return fieldErr("evaluator.url", "%q is not an http(s) URL", e.URL)
	case u.Hostname() == "":
		return fieldErr("evaluator.url", "%q names no host", e.URL)
	}
	if err := e.Secret.check(); err != nil {
		return fieldErr("evaluator.secret.from", "%v", err)
	}
	if e.Timeout < 0 || e.Timeout > 5*time.Minute {
		return fieldErr("evaluator.timeout", "must be in [0, 5m], got %s", e.Timeout)
	}
	return nil
}

func (s SecretRef) check() error {
	kind, rest, ok := strings.Cut(s.From, ":")
	if !ok || rest == "" {
		return fmt.Errorf("%q: want env:NAME, file:PATH or aws-secretsmanager:ARN", s.From)
	}
	switch kind {
	case "env", "file":
	case "aws-secretsmanager":
		if !strings.HasPrefix(rest, "arn:") {
			return fmt.Errorf("%q: aws-secretsmanager needs a secret ARN", s.From)
		}
	default:
		return fmt.Errorf("unknown source %q (want env, file or aws-secretsmanager)", kind)
	}
	return nil
}

func (r Rules) validate() error {
	for field, pat := range map[string]string{"rules.pull_request_title": r.PullRequestTitle, "rules.commit_message": r.CommitMessage} {
		if pat == "" {
			continue
		}
		if _, err := regexp.Compile(pat); err != nil {
			return fieldErr(field, "%v", err)
		}
	}
	for _, f := range []struct {
		field string
		globs []string
	}{{"rules.forbidden_paths", r.ForbiddenPaths}, {"rules.target_branches", r.TargetBranches}} {
		for i, g := range f.globs {
			// The evaluator's own parser: a glob it would match nothing with is refused here.
			if _, err := glob.Compile(g); err != nil {
				return fieldErr(fmt.Sprintf("%s[%d]", f.field, i), "%q: %v", g, err)
			}
		}
	}
	return nil
}

func (p *Publish) validate() error {
	if p.Context == "" {
		p.Context = "amiss"
	}
	if p.Provider == "" {
		p.Provider = provider.Log
	}
	switch {
	case p.Timeout == 0:
		p.Timeout = DefaultPublishTimeout
	case p.Timeout < time.Second || p.Timeout > MaxPublishTimeout:
		return fieldErr("publish.timeout", "%s: want between 1s and %s", p.Timeout, MaxPublishTimeout)
	}
	switch {
	case p.Settle == 0:
		p.Settle = DefaultPublishSettle
	case p.Settle < time.Second || p.Settle > MaxPublishSettle:
		return fieldErr("publish.settle", "%s: want between 1s and %s", p.Settle, MaxPublishSettle)
	}
	switch {
	case p.Concurrency == 0:
		p.Concurrency = DefaultPublishConcurrency
	case p.Concurrency < 1 || p.Concurrency > MaxPublishConcurrency:
		return fieldErr("publish.concurrency", "%d: want between 1 and %d", p.Concurrency, MaxPublishConcurrency)
	}
	// Both are frozen into every verdict: bounded, so that a verdict always fits the report
	// ceiling (MinReportBytes).
	if n := utf8.RuneCountInString(p.Context); n > MaxContext {
		return fieldErr("publish.context", "at most %d characters, this one has %d", MaxContext, n)
	}
	if n := utf8.RuneCountInString(p.TargetURL); n > MaxTargetURL {
		return fieldErr("publish.target_url", "at most %d characters, this one has %d", MaxTargetURL, n)
	}
	if err := p.App.validate(p); err != nil {
		return err
	}
	target, ok := provider.Publishing(p.Provider)
	if !ok {
		names := provider.Publishers()
		return fieldErr("publish.provider", "unknown publisher %q (want %s or %s)", p.Provider,
			strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	if !target.Remote {
		return nil
	}
	if err := checkBaseURL(p.BaseURL); err != nil {
		return fieldErr("publish.base_url", "%q: %v", p.BaseURL, err)
	}
	if p.App != nil {
		return nil
	}
	if err := p.Token.check(); err != nil {
		return fieldErr("publish.token.from", "%v", err)
	}
	if p.Provider == provider.BitbucketDataCenter {
		if n := utf8.RuneCountInString(p.TargetURL); n > publish.BitbucketDataCenterMaxURL {
			return fieldErr("publish.target_url", "Bitbucket Data Center accepts a build status URL of at most %d characters, this one has %d",
				publish.BitbucketDataCenterMaxURL, n)
		}
	}
	if p.Provider == provider.GitLab {
		if n := utf8.RuneCountInString(p.TargetURL); n > publish.GitLabMaxField {
			return fieldErr("publish.target_url", "GitLab accepts at most %d characters, this one has %d", publish.GitLabMaxField, n)
		}
		if n := utf8.RuneCountInString(p.Context); n > publish.GitLabMaxField {
			return fieldErr("publish.context", "GitLab accepts a status name of at most %d characters, this one has %d", publish.GitLabMaxField, n)
		}
	}
	return nil
}

// Allows reports whether the route may publish for the repository (owner/name, compared
// without regard to case, as the providers treat names).
func (r *Route) Allows(repo string) bool {
	repo = strings.ToLower(repo)
	for _, p := range r.Repositories {
		p = strings.ToLower(p)
		if owner, ok := strings.CutSuffix(p, "/*"); ok {
			if rest, ok := strings.CutPrefix(repo, owner+"/"); ok && rest != "" && !strings.Contains(rest, "/") {
				return true
			}
			continue
		}
		if p == repo {
			return true
		}
	}
	return false
}

// Accepts reports whether the route accepts the event kind.
func (r *Route) Accepts(event string) bool { return contains(r.Events, event) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkBaseURL accepts a provider's API base URL that every request can be built from: http
// or https, a host, a numeric port if any, no query, fragment or user.
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("want the provider's API base URL: %v", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("want the provider's API base URL, starting https:// (or http://)")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("names no host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return errors.New("want a plain base URL: no user, query or fragment (the token goes in publish.token)")
	}
	return nil
}

// hasKey reports whether the document doc maps section to a mapping holding key.
func hasKey(doc *yaml.Node, section, key string) bool {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	for _, m := range []string{section, key} {
		if root.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == m {
				next = root.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		root = next
	}
	return true
}
