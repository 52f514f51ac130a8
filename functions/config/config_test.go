package config_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
)

const base = `
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/app"]
`

func TestExampleConfigurationLoads(t *testing.T) {
	c, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	demo := c.Route("demo")
	if demo == nil || demo.Scheme != webhook.SchemeStandardWebhooks || demo.MaxAge != 2*time.Minute || demo.Publish.Provider != "log" {
		t.Fatalf("demo route %+v", demo)
	}
	if c.Limits().QueueCeiling != 72*time.Hour || c.Limits().RecordCap != 100000 {
		t.Fatalf("limits %+v", c.Limits())
	}
	if err := c.Limits().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDefaults(t *testing.T) {
	c, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Route("r")
	if r.Scheme != webhook.SchemeGitHub || strings.Join(r.Events, ",") != "push,pull_request" || r.Publish.Provider != "log" {
		t.Fatalf("defaults: %+v", r)
	}
	c, err = config.Parse([]byte(strings.Replace(base, "provider: github", "provider: gitlab", 1)))
	if err != nil || c.Route("r").Scheme != webhook.SchemeGitLabSigning {
		t.Fatalf("gitlab defaults to its signing token: %v", err)
	}
}

// A route takes re-runs by default only when it publishes as a GitHub App, the only publisher
// whose check runs a user can press Re-run on; a provider other than GitHub sends none, and a
// route naming rerun for one is refused.
func TestReRunsAreADefaultEventOnlyForGitHubApps(t *testing.T) {
	app := base + "    publish: {provider: github-checks, base_url: 'https://api.github.com', app: {id: '1', private_key: {from: 'env:K'}}}\n"
	c, err := config.Parse([]byte(app))
	if err != nil || strings.Join(c.Route("r").Events, ",") != "push,pull_request,rerun" {
		t.Fatalf("an App route's events: %v", err)
	}
	token := base + "    publish: {provider: github, base_url: 'https://api.github.com', token: {from: 'env:T'}}\n"
	if c, err := config.Parse([]byte(token)); err != nil || strings.Join(c.Route("r").Events, ",") != "push,pull_request" {
		t.Fatalf("a token route's events: %v", err)
	}
	gitlab := strings.Replace(base, "provider: github", "provider: gitlab", 1) + "    events: [push, rerun]\n"
	if _, err := config.Parse([]byte(gitlab)); err == nil || !strings.Contains(err.Error(), "routes.r.events[1]") {
		t.Fatalf("a gitlab route taking re-runs: %v", err)
	}
}

// Every invalid configuration fails with a message naming the field.
func TestInvalidConfigurationNamesTheField(t *testing.T) {
	cases := map[string]struct{ yaml, field string }{
		"unknown field":          {base + "    colour: blue\n", "colour"},
		"unknown provider":       {strings.Replace(base, "github", "sourcehut", 1), "routes.r.provider"},
		"scheme of another":      {base + "    scheme: gitlab-token\n", "routes.r.scheme"},
		"no secrets":             {strings.Replace(base, `    secrets: [{id: a, from: "env:X"}]`+"\n", "", 1), "routes.r.secrets"},
		"secret without id":      {strings.Replace(base, "id: a, ", "", 1), "routes.r.secrets[0].id"},
		"secret source":          {strings.Replace(base, "env:X", "vault:X", 1), "routes.r.secrets[0].from"},
		"secret manager not arn": {strings.Replace(base, "env:X", "aws-secretsmanager:mysecret", 1), "routes.r.secrets[0].from"},
		"unknown event":          {base + "    events: [push, release]\n", "routes.r.events[1]"},
		"max age unsigned":       {base + "    max_age: 1m\n", "routes.r.max_age"},
		"max body age negative":  {base + "    max_body_age: -1m\n", "routes.r.max_body_age"},
		"max body age widens":    {base + "    max_body_age: 97h\n", "routes.r.max_body_age"},
		"max body age of a header-signed scheme": {strings.Replace(base, "provider: github", "provider: standard-webhooks", 1) +
			"    max_body_age: 1h\n", "routes.r.max_body_age"},
		"max body age with body times off": {"controller: {body_age_ceiling: 0s}\n" + base + "    max_body_age: 1h\n",
			"routes.r.max_body_age"},
		"body age ceiling over a month": {"controller: {body_age_ceiling: 800h}\n" + base, "controller"},
		"max age widens": {strings.Replace(base, "provider: github", "provider: standard-webhooks", 1) + "    max_age: 1h\n",
			"routes.r.max_age"},
		"no repositories": {strings.Replace(base, `    repositories: ["acme/app"]`+"\n", "", 1), "routes.r.repositories"},
		"gitlab token needs repositories": {strings.Replace(strings.Replace(base, "provider: github", "provider: gitlab\n    scheme: gitlab-token", 1),
			`    repositories: ["acme/app"]`+"\n", "", 1), "mandatory with gitlab-token"},
		"bad repository":   {strings.Replace(base, "acme/app", "acme", 1), "routes.r.repositories[0]"},
		"bad title regexp": {base + "    rules: {pull_request_title: '(('}\n", "routes.r.rules.pull_request_title"},
		"bad glob":         {base + "    rules: {forbidden_paths: ['[']}\n", "routes.r.rules.forbidden_paths[0]"},
		"bad publisher":    {base + "    publish: {provider: jira}\n", "routes.r.publish.provider"},
		"evaluator url":    {base + "    evaluator: {url: 'ftp://x', secret: {from: 'env:E'}}\n", "routes.r.evaluator.url"},
		"evaluator secret": {base + "    evaluator: {url: 'https://x'}\n", "routes.r.evaluator.secret.from"},
		"publisher no url": {base + "    publish: {provider: github, token: {from: 'env:T'}}\n", "routes.r.publish.base_url"},
		"publisher token":  {base + "    publish: {provider: github, base_url: 'https://api.github.com'}\n", "routes.r.publish.token.from"},
		"bad route name":   {strings.Replace(base, "  r:", "  Bad/Name:", 1), "routes.Bad/Name.name"},
		"no routes":        {"controller: {record_cap: 10}\n", "routes"},
		"bad body limit":   {base + "controller: {max_body_bytes: 0}\n", "controller.max_body_bytes"},
		"bad ceiling":      {base + "controller: {signed_age_ceiling: 0s}\n", "controller"},
		"empty":            {"", "empty configuration"},
		"negative budget":  {base + "controller: {publish_budget: -1h}\n", "controller.publish_budget"},
		"small report":     {base + "controller: {max_report_bytes: 1000}\n", "controller.max_report_bytes"},
		"long context":     {base + "    publish: {context: '" + strings.Repeat("c", 256) + "'}\n", "routes.r.publish.context"},
		"long target url":  {base + "    publish: {target_url: 'https://ci.example.com/" + strings.Repeat("x", 2048) + "'}\n", "routes.r.publish.target_url"},
		"base url port": {base + "    publish: {provider: gitea, base_url: 'https://gitea.example.com:30OO', token: {from: 'env:T'}}\n",
			"routes.r.publish.base_url"},
		"base url no host": {base + "    publish: {provider: gitea, base_url: 'https:///api', token: {from: 'env:T'}}\n", "routes.r.publish.base_url"},
		"base url query":   {base + "    publish: {provider: gitea, base_url: 'https://gitea.example.com/?token=x', token: {from: 'env:T'}}\n", "routes.r.publish.base_url"},
		"gitlab long target url": {base + "    publish: {provider: gitlab, base_url: 'https://gitlab.com', token: {from: 'env:T'}, target_url: 'https://ci.example.com/" +
			strings.Repeat("x", 240) + "'}\n", "routes.r.publish.target_url"},
		"bitbucket keys collide": {strings.Replace(base, "provider: github", "provider: bitbucket", 1) +
			"    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}, context: '" + strings.Repeat("é", 40) + "/lint'}\n" +
			"  s:\n    provider: bitbucket\n    secrets: [{id: a, from: 'env:X'}]\n    repositories: [acme/app]\n" +
			"    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}, context: '" + strings.Repeat("é", 40) + "/test'}\n",
			"routes.s.publish.context"},
	}
	for name, c := range cases {
		_, err := config.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v does not name %q", name, err, c.field)
		}
	}
}

func TestPublishBudget(t *testing.T) {
	c, err := config.Parse([]byte(base))
	if err != nil || c.PublishBudget() != 72*time.Hour {
		t.Fatalf("default budget %v (%v): want the queue ceiling, 72h", c.PublishBudget(), err)
	}
	c, _ = config.Parse([]byte(base + "controller: {queue_ceiling: 96h}\n"))
	if c.PublishBudget() != 96*time.Hour {
		t.Fatalf("budget %v: want the queue ceiling 96h", c.PublishBudget())
	}
	c, _ = config.Parse([]byte(base + "controller: {queue_ceiling: 0s}\n"))
	if c.PublishBudget() != config.DefaultPublishBudget {
		t.Fatalf("budget %v with no queue ceiling", c.PublishBudget())
	}
	c, _ = config.Parse([]byte(base + "controller: {publish_budget: 6h}\n"))
	if c.PublishBudget() != 6*time.Hour || c.Limits() != ledger.DefaultLimits() {
		t.Fatalf("budget %v, limits %+v: the budget is not a ledger limit", c.PublishBudget(), c.Limits())
	}
	// Two Bitbucket routes with the same context share a status on purpose.
	same := strings.Replace(base, "provider: github", "provider: bitbucket", 1) +
		"    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}, context: amiss}\n" +
		"  s:\n    provider: bitbucket\n    secrets: [{id: a, from: 'env:X'}]\n    repositories: [acme/app]\n" +
		"    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}, context: amiss}\n"
	if _, err := config.Parse([]byte(same)); err != nil {
		t.Fatalf("the same context on two routes: %v", err)
	}
}

func TestRepositoryAllowList(t *testing.T) {
	c, err := config.Parse([]byte(strings.Replace(base, `["acme/app"]`, `["acme/app", "tools/*"]`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Route("r")
	for repo, want := range map[string]bool{
		"acme/app": true, "ACME/App": true, "acme/app2": false, "acme/other": false,
		"tools/lint": true, "tools/": false, "tools/a/b": false, "toolsx/lint": false, "": false,
	} {
		if got := r.Allows(repo); got != want {
			t.Errorf("Allows(%q) = %v, want %v", repo, got, want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load("/nonexistent/amiss.yaml")
	if err == nil || !os.IsNotExist(errorsUnwrapAll(err)) {
		t.Fatalf("missing file: %v", err)
	}
}

func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// A user's mistake is reported by its YAML path, in YAML's words: never a Go type.
func TestErrorsNameTheYAMLPathAndNoGoType(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown field in a route": {base + "    secret: {id: b}\n", "routes.r.secret: unknown field"},
		"unknown field in a secret": {strings.Replace(base, `{id: a, from: "env:X"}`, `{id: a, form: "env:X"}`, 1),
			"routes.r.secrets[0].form: unknown field"},
		"unknown controller field": {base + "controller: {recordcap: 5}\n", "controller.recordcap: unknown field"},
		"duration":                 {strings.Replace(base, "provider: github", "provider: standard-webhooks", 1) + "    max_age: soon\n", `routes.r.max_age: "soon" is not a duration`},
		"number":                   {base + "controller: {record_cap: lots}\n", `controller.record_cap: "lots" is not a whole number`},
		"list":                     {strings.Replace(base, `["acme/app"]`, `acme/app`, 1), "routes.r.repositories: want a list"},
		"mapping":                  {base + "    publish: log\n", "routes.r.publish: want a mapping"},
		"route not a mapping":      {"routes:\n  r: [1, 2]\n", "routes.r: want a mapping"},
	}
	for name, c := range cases {
		_, err := config.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", name, err, c.want)
			continue
		}
		for _, goWord := range []string{"config.", "time.Duration", "int64", "not found in type", "unmarshal", "!!"} {
			if strings.Contains(err.Error(), goWord) {
				t.Errorf("%s: error %q speaks Go (%q)", name, err, goWord)
			}
		}
		if !strings.Contains(err.Error(), "(line ") {
			t.Errorf("%s: error %q gives no line", name, err)
		}
	}
}

func TestEnvironmentExpansion(t *testing.T) {
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hooks-AbCdEf"
	doc := `
routes:
  gh:
    provider: github
    secrets: [{id: current, from: "aws-secretsmanager:${HOOK_ARN}#github"}]
    repositories: ["${REPOS}", "extra/one"]
`
	env := map[string]string{"HOOK_ARN": arn, "REPOS": "acme/*, tools/lint ,"}
	c, err := config.ParseEnv([]byte(doc), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	r := c.Route("gh")
	if r.Secrets[0].From != "aws-secretsmanager:"+arn+"#github" {
		t.Fatalf("from = %q", r.Secrets[0].From)
	}
	if got := strings.Join(r.Repositories, " "); got != "acme/* tools/lint extra/one" {
		t.Fatalf("repositories = %q", got)
	}
	delete(env, "HOOK_ARN")
	_, err = config.ParseEnv([]byte(doc), func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "routes.gh.secrets[0].from: ${HOOK_ARN}: the environment variable HOOK_ARN is not set") {
		t.Fatalf("unset variable: %v", err)
	}

	uses, err := config.EnvUses([]byte(doc + "  local:\n    provider: github\n    secrets: [{id: a, from: 'env:LOCAL_SECRET'}]\n    repositories: [a/b]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range uses {
		got = append(got, fmt.Sprintf("%s@%s secret=%v", u.Name, u.Path, u.Secret))
	}
	want := []string{"HOOK_ARN@routes.gh.secrets[0].from secret=false", "REPOS@routes.gh.repositories[0] secret=false",
		"LOCAL_SECRET@routes.local.secrets[0].from secret=true"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("env uses:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The status context defaults to amiss for every publisher, the log one included.
func TestPublishContextDefault(t *testing.T) {
	c, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Route("r").Publish.Context; got != "amiss" {
		t.Fatalf("log publisher context %q, want amiss", got)
	}
}

func TestSecretUsesAndLimitsMismatch(t *testing.T) {
	c, err := config.Parse([]byte(base + "    evaluator: {url: 'https://e', secret: {from: 'env:E'}}\n" +
		"    publish: {provider: github, base_url: 'https://api.github.com', token: {from: 'file:/t'}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range c.SecretUses() {
		got = append(got, u.Path+" "+u.What+" "+u.From)
	}
	want := "routes.r.secrets[0].from webhook secret a env:X|routes.r.evaluator.secret.from evaluator secret env:E|routes.r.publish.token.from publish token file:/t"
	if strings.Join(got, "|") != want {
		t.Fatalf("secret uses %q", got)
	}
	stored := c.Limits()
	if m := c.LimitsMismatch(stored); m != nil {
		t.Fatalf("equal limits differ: %v", m)
	}
	stored.RecordCap, stored.QueueCeiling = 7, time.Hour
	m := strings.Join(c.LimitsMismatch(stored), "\n")
	if !strings.Contains(m, "controller.queue_ceiling: the root records 1h0m0s, the configuration asks for 72h0m0s") ||
		!strings.Contains(m, "controller.record_cap: the root records 7, the configuration asks for 1000000") || strings.Contains(m, "{") {
		t.Fatalf("mismatch:\n%s", m)
	}
}

// Every example loads once the variables it names are set.
func TestEveryExampleLoads(t *testing.T) {
	env := map[string]string{
		"AMISS_REPOSITORIES":       "acme/*",
		"AMISS_WEBHOOK_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:000000000000:secret:amiss-webhook",
		"AMISS_APP_ID":             "123456",
		"AMISS_APP_KEY_FILE":       "/run/amiss/app.pem",
	}
	for _, f := range []string{"amiss.yaml", "github.yaml", "aws.yaml", "github-app.yaml"} {
		if _, err := config.LoadEnv("../../examples/"+f, func(k string) string { return env[k] }); err != nil {
			t.Errorf("examples/%s: %v", f, err)
		}
	}
}

// The body-age ceiling is recorded like the other limits; a route narrows it, and a root that
// records none adopts it rather than mismatching.
func TestBodyAgeCeilingAndRouteNarrowing(t *testing.T) {
	c, err := config.Parse([]byte(base + "    max_body_age: 72h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Controller.BodyAgeCeiling != ledger.DefaultBodyAgeCeiling || c.Limits().BodyAgeCeiling != ledger.DefaultBodyAgeCeiling ||
		c.Route("r").MaxBodyAge != 72*time.Hour {
		t.Fatalf("body ages: controller %s, route %s", c.Controller.BodyAgeCeiling, c.Route("r").MaxBodyAge)
	}
	stored := c.Limits()
	stored.BodyAgeCeiling = 0 // a root created before body times
	if m := c.LimitsMismatch(stored); m != nil || !c.AdoptsBodyTimes(stored) {
		t.Fatalf("a root without a ceiling: mismatch %v, adopts %v", m, c.AdoptsBodyTimes(stored))
	}
	stored.BodyAgeCeiling = time.Hour
	if m := strings.Join(c.LimitsMismatch(stored), "\n"); !strings.Contains(m, "controller.body_age_ceiling: the root records 1h0m0s") ||
		!strings.Contains(m, "never changes") || c.AdoptsBodyTimes(stored) {
		t.Fatalf("another ceiling: %q", m)
	}
	off, err := config.Parse([]byte("controller: {body_age_ceiling: 0s}\n" + base))
	if err != nil {
		t.Fatal(err)
	}
	stored.BodyAgeCeiling = ledger.DefaultBodyAgeCeiling
	if m := strings.Join(off.LimitsMismatch(stored), "\n"); !strings.Contains(m, "switching body times off") {
		t.Fatalf("switching off: %q", m)
	}
}

// A route's publication is bounded in time and in concurrency: defaults that fit the
// providers' own limits, and settings outside sane bounds refused by name.
func TestPublishTimeoutSettleAndConcurrency(t *testing.T) {
	c, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Route("r").Publish
	if p.Timeout != config.DefaultPublishTimeout || p.Settle != config.DefaultPublishSettle || p.Concurrency != config.DefaultPublishConcurrency {
		t.Fatalf("defaults: timeout %v settle %v concurrency %d", p.Timeout, p.Settle, p.Concurrency)
	}
	c, err = config.Parse([]byte(base + "    publish: {timeout: 12s, settle: 20s, concurrency: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Route("r").Publish; p.Timeout != 12*time.Second || p.Settle != 20*time.Second || p.Concurrency != 2 {
		t.Fatalf("set: %+v", p)
	}
	for _, c := range [][2]string{{"timeout", "500ms"}, {"settle", "2h"}, {"settle", "-1s"}, {"concurrency", "65"}} {
		field, value := c[0], c[1]
		_, err := config.Parse([]byte(base + fmt.Sprintf("    publish: {%s: %s}\n", field, value)))
		if err == nil || !strings.Contains(err.Error(), "routes.r.publish."+field) {
			t.Errorf("publish.%s: %s: %v, want an error naming the field", field, value, err)
		}
	}
}

// The bound on the change a row keeps was called max_subject_bytes before "subject" came to mean
// only a commit status's target: a configuration that still says so is read, and one that says
// both is refused, naming the name to keep.
func TestTheFormerNameOfMaxChangeBytesIsStillRead(t *testing.T) {
	for _, tc := range []struct {
		controller string
		want       int
		err        string
	}{
		{"controller:\n  max_change_bytes: 4096\n", 4096, ""},
		{"controller:\n  max_subject_bytes: 8192\n", 8192, ""},
		{"controller:\n  max_subject_bytes: 8192\n  max_change_bytes: 4096\n", 0, "set only max_change_bytes"},
	} {
		c, err := config.Parse([]byte(tc.controller + base))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one saying %q", tc.controller, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.controller, err)
		case c.Limits().MaxChangeBytes != tc.want:
			t.Errorf("%q: the ledger's bound is %d, want %d", tc.controller, c.Limits().MaxChangeBytes, tc.want)
		}
	}
}
