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
	// Files are the files a rule refused (the forbidden paths among the changed ones), for a
	// publisher that shows them on the file (a check run's annotations). The built-in rules
	// fill it; an HTTP evaluator's answer cannot (the field is not part of its contract).
	Files []File `json:"-"`
}

// File is a file a rule refused: the path, the rule's name, and why.
type File struct {
	Path    string `json:"path"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// ForbiddenPathRule is the name of the forbidden-paths rule in File.Rule.
const ForbiddenPathRule = "forbidden path"

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

// Evaluate implements Evaluator. The description names every rule that failed. A re-run
// (subject.Rerun) is evaluated like the event it re-runs once its inputs were read from the
// provider (s.Filled); before that, each rule that needs what its webhook lacks (the pull
// request title, commit messages, changed paths) fails closed, naming why (s.NotFilled).
func (r *Rules) Evaluate(ctx context.Context, s subject.Subject) (Verdict, error) {
	var failed []string
	var files []File
	// A re-run whose inputs were not read from the provider lacks the title, the commits and
	// the changed paths: every rule that needs them fails closed, saying why.
	unfilled := s.Event == subject.Rerun && !s.Filled
	missing := func(what, push string) string {
		if s.NotFilled != "" {
			return what + " (a re-run's could not be read: " + s.NotFilled + ")"
		}
		return what + " (a re-run does not carry " + push + ")"
	}
	switch {
	case r.title != nil && s.Pull != nil && unfilled:
		failed = append(failed, missing("pull request title", "it; push again or edit the pull request"))
	case r.title != nil && s.Pull != nil && !r.title.MatchString(s.Pull.Title):
		failed = append(failed, "pull request title")
	}
	if r.message != nil && unfilled {
		failed = append(failed, missing("commit messages", "them; push again"))
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
		// The description names the first forbidden path; Files lists them all.
		for _, p := range s.Paths {
			if g := matchAny(r.forbidden, p); g != "" {
				if len(files) == 0 {
					failed = append(failed, "forbidden path "+p+" ("+g+")")
				}
				files = append(files, File{Path: p, Rule: ForbiddenPathRule, Message: "changes " + p + ", which " + g + " forbids"})
			}
		}
		switch {
		case unfilled:
			failed = append(failed, missing("changed paths", "them; push again"))
		case s.Truncated:
			failed = append(failed, "changed paths (the list was cut; cannot check every path)")
		}
	}
	if len(r.branches) > 0 && s.Pull != nil && matchAny(r.branches, s.Pull.TargetBranch) == "" {
		failed = append(failed, "target branch "+s.Pull.TargetBranch)
	}
	if len(failed) == 0 {
		return Verdict{State: Success, Description: "all rules hold"}, nil
	}
	return Verdict{State: Failure, Description: "failed: " + strings.Join(failed, "; "), Files: files}, nil
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
