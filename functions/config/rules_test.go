package config_test

import (
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
)

// A glob that would silently match no path or branch is refused when the configuration is
// loaded, naming the field and saying why, and what to write where that is clear: otherwise
// the rule it belongs to is never broken and every change passes it.
func TestAGlobThatCanNeverMatchIsRefusedAtLoad(t *testing.T) {
	for _, c := range []struct{ rules, field, says string }{
		{`{forbidden_paths: ["secrets/"]}`, "rules.forbidden_paths[0]", `"secrets/**"`},
		{`{forbidden_paths: ["README.md", "/secrets/**"]}`, "rules.forbidden_paths[1]", `write "secrets/**"`},
		{`{forbidden_paths: ["./secrets/**"]}`, "rules.forbidden_paths[0]", `"." segment`},
		{`{forbidden_paths: ["deploy/../secrets/**"]}`, "rules.forbidden_paths[0]", `".." segment`},
		{`{forbidden_paths: ["secrets//key"]}`, "rules.forbidden_paths[0]", "empty segment"},
		{`{forbidden_paths: ["**.pem"]}`, "rules.forbidden_paths[0]", `"**" must be a whole segment`},
		{`{forbidden_paths: ["*.{pem,key}"]}`, "rules.forbidden_paths[0]", "braces"},
		{`{forbidden_paths: ["[z-a]*"]}`, "rules.forbidden_paths[0]", "empty"},
		{`{target_branches: ["{main,master}"]}`, "rules.target_branches[0]", "braces"},
		{`{target_branches: ["release/"]}`, "rules.target_branches[0]", `"release/**"`},
	} {
		_, err := config.Parse([]byte(base + "    rules: " + c.rules + "\n"))
		if err == nil || !strings.Contains(err.Error(), "routes.r."+c.field) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("rules %s: %v, want an error at routes.r.%s saying %s", c.rules, err, c.field, c.says)
		}
	}
}

// An evaluator replaces the rules: a route that sets both would never check its rules, and one
// whose evaluator names no URL would evaluate with the rules alone (with none, every change
// passes). Both are refused at load, as is a URL no request can be sent to.
func TestAnEvaluatorThatWouldLeaveRulesUncheckedIsRefused(t *testing.T) {
	for _, c := range []struct{ route, field, says string }{
		{"    rules: {forbidden_paths: ['secrets/**']}\n    evaluator: {url: 'https://eval.example', secret: {from: 'env:E'}}\n",
			"routes.r.evaluator", "rules"},
		{"    evaluator: {secret: {from: 'env:E'}, timeout: 30s}\n", "routes.r.evaluator.url", "no url"},
		{"    rules: {commit_message: '^[A-Z]'}\n    evaluator: {secret: {from: 'env:E'}}\n", "routes.r.evaluator.url", "no url"},
		{"    evaluator: {url: 'https://', secret: {from: 'env:E'}}\n", "routes.r.evaluator.url", "host"},
		{"    evaluator: {url: 'https://eval example/', secret: {from: 'env:E'}}\n", "routes.r.evaluator.url", "https://eval example/"},
	} {
		_, err := config.Parse([]byte(base + c.route))
		if err == nil || !strings.Contains(err.Error(), c.field+":") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error at %s saying %q", c.route, err, c.field, c.says)
		}
	}
	if _, err := config.Parse([]byte(base + "    evaluator: {url: 'https://eval.example/v1?route=r', secret: {from: 'env:E'}}\n")); err != nil {
		t.Errorf("an evaluator alone: %v", err)
	}
}

// A list item left empty (a template that rendered nothing, "- ~") is refused, naming it:
// the YAML decoder drops it, and a rule whose only glob it was would vanish, passing every
// change.
func TestAnEmptyListItemIsRefused(t *testing.T) {
	for _, c := range []struct{ rules, field string }{
		{"\n      forbidden_paths:\n        -\n", "routes.r.rules.forbidden_paths[0]"},
		{"\n      forbidden_paths: [~]\n", "routes.r.rules.forbidden_paths[0]"},
		{"\n      forbidden_paths: ['secrets/**', null]\n", "routes.r.rules.forbidden_paths[1]"},
		{"\n      target_branches:\n        - main\n        -\n", "routes.r.rules.target_branches[1]"},
	} {
		_, err := config.Parse([]byte(base + "    rules:" + c.rules))
		if err == nil || !strings.Contains(err.Error(), c.field+": ") || !strings.Contains(err.Error(), "empty") {
			t.Errorf("rules:%s: %v, want an error at %s saying the item is empty", c.rules, err, c.field)
		}
	}
}

// A glob written unquoted and starting with * reads as a YAML alias: the error says to quote
// it, not only that the YAML is invalid.
func TestAnUnquotedGlobStartingWithAStarIsExplained(t *testing.T) {
	for _, rules := range []string{"{forbidden_paths: [**/*.pem]}", "\n      forbidden_paths:\n        - *.key\n"} {
		_, err := config.Parse([]byte(base + "    rules: " + rules + "\n"))
		if err == nil || !strings.Contains(err.Error(), "quote") {
			t.Errorf("rules %s: %v, want an error saying to quote the glob", rules, err)
		}
	}
}

// A pattern Go's regexp cannot compile (a Perl lookahead, an unclosed group) is refused at
// load, naming the rule.
func TestAPatternThatDoesNotCompileIsRefused(t *testing.T) {
	for _, c := range []struct{ rules, field string }{
		{`{commit_message: '^(?!WIP)'}`, "routes.r.rules.commit_message: "},
		{`{pull_request_title: '^(feat'}`, "routes.r.rules.pull_request_title: "},
	} {
		_, err := config.Parse([]byte(base + "    rules: " + c.rules + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("rules %s: %v, want an error at %s", c.rules, err, c.field)
		}
	}
}

// A pull request rule on a route that takes no pull request (nor a Re-run, which may be one's)
// would never be checked: refused at load.
func TestAPullRequestRuleOnARouteThatTakesNoneIsRefused(t *testing.T) {
	for _, rules := range []string{`{pull_request_title: '^feat'}`, `{target_branches: [main]}`} {
		_, err := config.Parse([]byte(base + "    events: [push]\n    rules: " + rules + "\n"))
		if err == nil || !strings.Contains(err.Error(), "routes.r.rules.") || !strings.Contains(err.Error(), "pull_request") {
			t.Errorf("rules %s on a push route: %v, want an error naming the rule and the events", rules, err)
		}
	}
	for _, events := range []string{"[push, pull_request]", "[rerun]"} {
		if _, err := config.Parse([]byte(base + "    events: " + events + "\n    rules: {pull_request_title: '^feat', target_branches: [main]}\n")); err != nil {
			t.Errorf("events %s: %v", events, err)
		}
	}
}
