// Package evaluate turns a change into a verdict: the built-in rules evaluator configured per
// route, and an HTTP evaluator that asks an operator's endpoint.
package evaluate

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate/glob"
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
	// Read says what was read from the provider's API for the evaluation (the runner fills
	// it; the verdict's record keeps it).
	Read []string `json:"-"`
}

// File is a file a rule refused: the path, the rule's name, and why.
type File struct {
	Path    string `json:"path"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// ForbiddenPathRule is the name of the forbidden-paths rule in File.Rule.
const ForbiddenPathRule = "forbidden path"

// Evaluator evaluates a change. An error means the evaluation could not be done (it is retried,
// and after the configured attempts becomes an error verdict); a failure is a Verdict.
type Evaluator interface {
	Evaluate(ctx context.Context, s change.Change) (Verdict, error)
}

// Needer is an evaluator that says which of a change's inputs it needs: the runner reads
// from the provider those the change does not hold whole before evaluating. An evaluator that
// is no Needer is given the change as its webhook carried it (Change.Whole says what that
// holds whole).
type Needer interface {
	Needs(s change.Change) change.Inputs
}

// Rules is the built-in evaluator: every configured rule must hold. The title and message
// patterns are Go regexps searched in the title and in each commit's whole message (subject and
// body, without the line breaks that end it): ^ and $ are its start and end, a pattern without
// ^ may match in the body. The globs are package glob's.
type Rules struct {
	title, message *regexp.Regexp
	forbidden      []*glob.Glob
	branches       []*glob.Glob
}

// NewRules compiles a route's rules (config has already validated them).
func NewRules(r config.Rules) (*Rules, error) {
	out := &Rules{}
	var err error
	if out.forbidden, err = globs("rules.forbidden_paths", r.ForbiddenPaths); err != nil {
		return nil, err
	}
	if out.branches, err = globs("rules.target_branches", r.TargetBranches); err != nil {
		return nil, err
	}
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

// Needs says which inputs the rules need to evaluate s: the pull request title and the pull
// request itself (a title or target-branch rule, on a pull request or a re-run, which may be
// one), the commits (a commit-message rule) and the changed paths (forbidden paths); and for a
// re-run whose commits or paths are needed, the pull request too, which says whether they are
// a pull request's or a push's. The runner reads from the provider those s does not hold
// whole, and only those.
func (r *Rules) Needs(s change.Change) change.Inputs {
	var need change.Inputs
	pullish := s.Event == change.PullRequest || s.Event == change.Rerun
	if pullish && r.title != nil {
		need |= change.TitleInput | change.PullInput
	}
	if pullish && len(r.branches) > 0 {
		need |= change.PullInput
	}
	if r.message != nil {
		need |= change.CommitsInput
	}
	if len(r.forbidden) > 0 {
		need |= change.PathsInput
	}
	if s.Event == change.Rerun && need&(change.CommitsInput|change.PathsInput) != 0 {
		// A re-run's commits and changed paths are its pull request's, or its push's: which
		// one it is decides what they are (a fork's re-run names no pull request).
		need |= change.PullInput
	}
	return need
}

// Evaluate implements Evaluator. The description names every rule that failed. A rule whose
// input s does not hold whole (the webhook did not carry it, and the provider's API could not
// give it: s.Unread says why) fails closed, naming what could not be read: a verdict never
// passes what it could not see.
func (r *Rules) Evaluate(ctx context.Context, s change.Change) (Verdict, error) {
	var failed []string
	var files []File
	// unread groups the rules that failed closed by why (a refused read is often the reason
	// of several): each reason is said once, after the rules it failed, where the first of
	// them failed.
	type unreadRules struct {
		at    int // failed[at] holds the group
		rules []string
	}
	unread := map[string]*unreadRules{}
	// missing fails the rule named what when in is not held whole, saying why.
	missing := func(in change.Inputs, what string) bool {
		if s.Whole.Has(in) {
			return false
		}
		why := s.UnreadReason(in)
		if why == "" {
			why = "the webhook does not carry them whole and no read of the provider's API gave them"
		}
		g := unread[why]
		if g == nil {
			g = &unreadRules{at: len(failed)}
			unread[why] = g
			failed = append(failed, "")
		}
		g.rules = append(g.rules, what)
		failed[g.at] = strings.Join(g.rules, ", ") + " (could not be read: " + why + ")"
		return true
	}
	pullish := s.Event == change.PullRequest || s.Event == change.Rerun
	switch {
	case r.title == nil || !pullish:
	case missing(change.PullInput, "pull request title"):
	case s.Pull == nil: // known to be no pull request: a re-run of a push
	case missing(change.TitleInput, "pull request title"):
	case !r.title.MatchString(s.Pull.Title):
		failed = append(failed, "pull request title")
	}
	if r.message != nil && !missing(change.CommitsInput, "commit messages") {
		for _, c := range s.Commits {
			// The line break git ends a message with is not part of it: GitHub's API drops
			// it, Gitea's and Bitbucket's webhooks keep it, and a pattern's $ (or a class
			// that takes a line break) must not judge a commit by its provider.
			if !r.message.MatchString(strings.TrimRight(c.Message, "\r\n")) {
				failed = append(failed, "commit message of "+short(c.ID))
				break
			}
		}
	}
	if len(r.forbidden) > 0 {
		// The description names the first forbidden path; Files lists them all. Paths read
		// in part are still checked (a forbidden one among them fails the rule), and the
		// rule then fails closed for the rest. A path that is no repository path fails the
		// rule too, named: no glob can say whether it names a forbidden file.
		unclear := ""
		for _, p := range s.Paths {
			if !repositoryPath(p) {
				if unclear == "" {
					unclear = p
					failed = append(failed, fmt.Sprintf("changed path %q (not a repository path as git writes it)", p))
				}
				continue
			}
			if g := matchAny(r.forbidden, p); g != "" {
				if len(files) == 0 {
					failed = append(failed, "forbidden path "+p+" ("+g+")")
				}
				files = append(files, File{Path: p, Rule: ForbiddenPathRule, Message: "changes " + p + ", which " + g + " forbids"})
			}
		}
		if len(files) == 0 && unclear == "" {
			missing(change.PathsInput, "changed paths")
		}
	}
	if len(r.branches) > 0 && pullish {
		switch {
		case r.title == nil && missing(change.PullInput, "target branch"):
		case r.title != nil && !s.Whole.Has(change.PullInput): // named once, by the title rule
		case s.Pull != nil && matchAny(r.branches, s.Pull.TargetBranch) == "":
			failed = append(failed, "target branch "+s.Pull.TargetBranch)
		}
	}
	if len(failed) == 0 {
		return Verdict{State: Success, Description: "all rules hold"}, nil
	}
	return Verdict{State: Failure, Description: "failed: " + strings.Join(failed, "; "), Files: files}, nil
}

// globs compiles the globs of the rule named field.
func globs(field string, texts []string) ([]*glob.Glob, error) {
	out := make([]*glob.Glob, len(texts))
	for i, t := range texts {
		g, err := glob.Compile(t)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q: %w", field, i, t, err)
		}
		out[i] = g
	}
	return out, nil
}

// repositoryPath reports whether p is a path as git writes one: from the repository's root,
// "/"-separated, without a leading or trailing "/", an empty, "." or ".." segment, or a NUL
// byte. Any other byte is a path's (a backslash, a line break, bytes that are not UTF-8).
func repositoryPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") ||
		strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// matchAny returns the first glob that matches name, as written ("" for none).
func matchAny(globs []*glob.Glob, name string) string {
	for _, g := range globs {
		if g.Match(name) {
			return g.String()
		}
	}
	return ""
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
