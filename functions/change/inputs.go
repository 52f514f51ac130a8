package change

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Inputs is a set of the parts of a change a rule may need and a webhook may not carry whole.
// A change says which it holds whole (Change.Whole); a rule that needs one the change does
// not hold whole, and that the provider's API could not give, fails closed.
type Inputs uint8

// The inputs.
const (
	// TitleInput is the pull request's title.
	TitleInput Inputs = 1 << iota
	// PullInput is the pull request itself: its number and branches. A push holds it trivially
	// (there is none); a re-run of a fork's pull request carries none.
	PullInput
	// CommitsInput is every commit of the push or the pull request, each with its whole message.
	CommitsInput
	// PathsInput is every path the push or the pull request changes.
	PathsInput

	// AllInputs is every input.
	AllInputs = TitleInput | PullInput | CommitsInput | PathsInput
)

var inputNames = []struct {
	in   Inputs
	name string
}{{TitleInput, "title"}, {PullInput, "pull_request"}, {CommitsInput, "commits"}, {PathsInput, "paths"}}

// Has reports whether every input of in is in the set.
func (s Inputs) Has(in Inputs) bool { return s&in == in }

// Each calls fn for each input of the set, in a fixed order.
func (s Inputs) Each(fn func(Inputs)) {
	for _, n := range inputNames {
		if s&n.in != 0 {
			fn(n.in)
		}
	}
}

// Names lists the set's inputs by name, in a fixed order.
func (s Inputs) Names() []string {
	out := []string{}
	for _, n := range inputNames {
		if s&n.in != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// String is the set's names joined by commas ("" for none).
func (s Inputs) String() string { return strings.Join(s.Names(), ", ") }

// Describe names one input as a user reads it in a verdict.
func (s Inputs) Describe() string {
	switch s {
	case TitleInput:
		return "pull request title"
	case PullInput:
		return "pull request"
	case CommitsInput:
		return "commit messages"
	case PathsInput:
		return "changed paths"
	}
	return s.String()
}

// MarshalJSON encodes the set as a list of names.
func (s Inputs) MarshalJSON() ([]byte, error) { return json.Marshal(s.Names()) }

// UnmarshalJSON decodes a list of names; an unknown name is an error.
func (s *Inputs) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	var out Inputs
next:
	for _, name := range names {
		for _, n := range inputNames {
			if n.name == name {
				out |= n.in
				continue next
			}
		}
		return fmt.Errorf("change: unknown input %q", name)
	}
	*s = out
	return nil
}

// Unread is an input the provider's API did not give whole, and why: a permission the
// credential lacks, a list the provider cuts, a pull request that cannot be identified. The
// rules that need it fail closed, naming the reason.
type Unread struct {
	Input  Inputs
	Reason string
}

// MarkUnread records that the inputs in could not be read, for reason, and drops them from
// Whole.
func (s *Change) MarkUnread(in Inputs, reason string) {
	in.Each(func(one Inputs) {
		s.Whole &^= one
		for i, u := range s.Unread {
			if u.Input == one {
				s.Unread[i].Reason = reason
				return
			}
		}
		s.Unread = append(s.Unread, Unread{Input: one, Reason: reason})
	})
}

// UnreadReason is why in could not be read, or "" when no read said so.
func (s *Change) UnreadReason(in Inputs) string {
	for _, u := range s.Unread {
		if u.Input == in {
			return u.Reason
		}
	}
	return ""
}

// ReadPull sets what a read of the provider's API gave of s's pull request, as far as need
// asks for it: its title (TitleInput) and its branches (PullInput). What s holds whole is its
// event's, and stays: the API's answer may be older than the event (a replica or cache behind
// it), and a verdict is evaluated on its own event's inputs.
func (s *Change) ReadPull(need Inputs, title, target, source string) {
	if s.Pull == nil {
		return
	}
	if need.Has(TitleInput) {
		s.Pull.Title = title
	}
	if need.Has(PullInput) {
		s.Pull.TargetBranch, s.Pull.SourceBranch = target, source
	}
}
