// Package evaluate turns a subject into a verdict: the built-in rules evaluator configured per
// route, and an HTTP evaluator that asks an operator's endpoint.
package evaluate

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/subject"
)

// States of a verdict. Only final states exist: amiss never posts "pending".
const (
	Success = "success"
	Failure = "failure"
	Error   = "error"
)

// Verdict is an evaluation's result.
type Verdict struct {
	State       string `json:"state"`
	Description string `json:"description"`
}

// Evaluator evaluates a subject. An error means the evaluation could not be done (it is retried,
// and after the configured attempts becomes an error verdict); a failure is a Verdict.
type Evaluator interface {
	Evaluate(ctx context.Context, s subject.Subject) (Verdict, error)
}

// Rules is the built-in evaluator: every configured rule must hold.
type Rules struct {
	title, message *regexp.Regexp
	forbidden      []string
	branches       []string
}

// NewRules compiles a route's rules (config has already validated them).
func NewRules(r config.Rules) (*Rules, error) {
	out := &Rules{forbidden: r.ForbiddenPaths, branches: r.TargetBranches}
	var err error
	if r.PullRequestTitle != "" {
		if out.title, err = regexp.Compile(r.PullRequestTitle); err != nil {
			return nil, fmt.Errorf("rules.pull_request_title: %w", err)
		}
	}
	if r.CommitMessage != "" {
		if out.message, err = regexp.Compile(r.CommitMessage); err != nil {
			return nil, fmt.Errorf("rules.commit_message: %w", err)
		}
	}
	return out, nil
}

// Evaluate implements Evaluator. The description names every rule that failed.
func (r *Rules) Evaluate(ctx context.Context, s subject.Subject) (Verdict, error) {
	var failed []string
	if r.title != nil && s.Pull != nil && !r.title.MatchString(s.Pull.Title) {
		failed = append(failed, "pull request title")
	}
	if r.message != nil {
		for _, c := range s.Commits {
			if !r.message.MatchString(c.Message) {
				failed = append(failed, "commit message of "+short(c.ID))
				break
			}
		}
	}
	if len(r.forbidden) > 0 {
		for _, p := range s.Paths {
			if g := matchAny(r.forbidden, p); g != "" {
				failed = append(failed, "forbidden path "+p+" ("+g+")")
				break
			}
		}
		if s.Truncated {
			failed = append(failed, "changed paths (the list was cut; cannot check every path)")
		}
	}
	if len(r.branches) > 0 && s.Pull != nil && matchAny(r.branches, s.Pull.TargetBranch) == "" {
		failed = append(failed, "target branch "+s.Pull.TargetBranch)
	}
	if len(failed) == 0 {
		return Verdict{State: Success, Description: "all rules hold"}, nil
	}
	return Verdict{State: Failure, Description: "failed: " + strings.Join(failed, "; ")}, nil
}

// matchAny returns the first glob that matches name ("**" matches across slashes).
func matchAny(globs []string, name string) string {
	for _, g := range globs {
		if globMatch(g, name) {
			return g
		}
	}
	return ""
}

// globMatch matches path.Match globs, where "**" also matches any number of directories.
func globMatch(glob, name string) bool {
	if !strings.Contains(glob, "**") {
		ok, _ := path.Match(glob, name)
		return ok
	}
	prefix, rest, _ := strings.Cut(glob, "**")
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	rest = strings.TrimPrefix(rest, "/")
	tail := name[len(prefix):]
	if rest == "" {
		return true
	}
	for {
		if globMatch(rest, tail) {
			return true
		}
		i := strings.Index(tail, "/")
		if i < 0 {
			return false
		}
		tail = tail[i+1:]
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
