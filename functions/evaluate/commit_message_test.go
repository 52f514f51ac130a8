package evaluate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
)

// messageVerdict evaluates a push whose commits, held whole, have the messages given, under
// one commit_message pattern.
func messageVerdict(t *testing.T, pattern string, messages ...string) evaluate.Verdict {
	t.Helper()
	r, err := evaluate.NewRules(config.Rules{CommitMessage: pattern})
	if err != nil {
		t.Fatal(err)
	}
	s := change.Change{Event: change.Push, Whole: change.AllInputs}
	for i, m := range messages {
		s.Commits = append(s.Commits, change.Commit{ID: strings.Repeat(string(rune('a'+i)), 40), Message: m})
	}
	v, err := r.Evaluate(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// What "every commit must match" means: the pattern is searched in each whole message (its
// subject, and its body after a blank line), as Go's regexp MatchString does; ^ and $ are the
// message's start and end ((?m) makes them a line's); the line break git ends a message with
// (GitHub's API drops it, Gitea's and Bitbucket's webhooks keep it) is not part of it, so a
// verdict does not depend on the provider.
func TestEveryCommitMessageMustMatchThePattern(t *testing.T) {
	for _, c := range []struct {
		name, pattern, message string
		holds                  bool
	}{
		{"a line break kept by the provider does not end the subject in something else", `^[A-Z].*[^.]$`, "Fix it.\n", false},
		{"the same without it", `^[A-Z].*[^.]$`, "Fix it.", false},
		{"a CRLF line break", `^[A-Z].*[^.]$`, "Fix it.\r\n", false},
		{"a subject that holds, with its line break", `^[A-Z].*[^.]$`, "Fix it\n", true},
		{"a one-line pattern over a one-line message with its line break", `^fix: .*$`, "fix: the router\n", true},
		{"^ is the message's start, not the body's lines", `^JIRA-[0-9]+`, "Fix it\n\nJIRA-12", false},
		{"a pattern without ^ is found in the body too", `JIRA-[0-9]+`, "Fix it\n\nJIRA-12", true},
		{"(?m) makes ^ a line's start: a trailer", `(?m)^Signed-off-by: `, "Fix it\n\nSigned-off-by: A <a@example.com>\n", true},
		{"$ is the message's end: a body fails a one-line pattern", `^fix: .*$`, "fix: the router\n\nIt was slow.", false},
		{"an empty message", `^[A-Z]`, "", false},
		{"a message of a line break", `^[A-Z]`, "\n", false},
		{"a byte that is not UTF-8 is not printable ASCII", `^[ -~]*$`, "Fix caf\xe9", false},
		{"a byte that is not UTF-8 is one character", `^Fix caf.$`, "Fix caf\xe9", true},
	} {
		v := messageVerdict(t, c.pattern, c.message)
		if got := v.State == evaluate.Success; got != c.holds {
			t.Errorf("%s: %q under %q: %s %q", c.name, c.message, c.pattern, v.State, v.Description)
		}
	}
	// Every commit: one that does not match fails the rule, named, whatever the others.
	if v := messageVerdict(t, `^[A-Z]`, "Fix it", "wip", "Add it"); v.State != evaluate.Failure ||
		!strings.Contains(v.Description, "commit message of bbbbbbbbbbbb") {
		t.Errorf("a second commit that does not match: %s %q", v.State, v.Description)
	}
}

// A message longer than a change keeps is cut, and no longer held whole: the rule fails
// closed on it (the runner reads the commits whole from the provider first), never judging
// the cut message as if it were the whole one.
func TestACutMessageIsNotJudgedAsWhole(t *testing.T) {
	r, err := evaluate.NewRules(config.Rules{CommitMessage: `^[^!]*$`})
	if err != nil {
		t.Fatal(err)
	}
	s := change.Change{Event: change.Push, Whole: change.AllInputs,
		Commits: []change.Commit{{ID: strings.Repeat("a", 40), Message: "Fix " + strings.Repeat("x", change.MaxMessageBytes) + "!"}}}
	s.Bound()
	v, err := r.Evaluate(context.Background(), s)
	if err != nil || v.State != evaluate.Failure || !strings.Contains(v.Description, "commit messages (could not be read") {
		t.Fatalf("a message cut before the character the pattern refuses: %+v %v", v, err)
	}
}
