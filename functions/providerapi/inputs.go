package providerapi

import (
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/functions/change"
)

// ReadInputs is the procedure every provider's reader of what a webhook lacks follows, with the
// provider's own requests in fill. fill is given a copy of s whose inputs in need are emptied
// and marked whole, and adds what it reads (or marks an input unread, naming why); it answers
// how many requests it made. name is the provider as a verdict names it.
//
//   - fill succeeds: the copy is answered, noting in Read what was read and its cost.
//   - fill fails in a way asking again may mend (ReadAgain: an outage, a timeout, a rate
//     limit): s is answered unchanged with a Transient error, and the attempt is retried.
//   - fill fails for good (a credential without the scope, a repository it cannot see, an
//     answer past its bound): s is answered with the inputs in need marked unread, so that a
//     rule needing them fails closed. That is no error. The reason names refusal(err) when the
//     provider words the failure itself (a refusal, naming what to grant); otherwise the bound
//     an answer went past (DecodeWithin), or what failed.
func ReadInputs(s change.Change, need change.Inputs, name string, fill func(f *change.Change) (requests int, err error),
	refusal func(error) string) (change.Change, error) {
	if need == 0 {
		return s, nil
	}
	f := s
	f.Unread = append([]change.Unread(nil), s.Unread...)
	if need.Has(change.CommitsInput) {
		f.Commits = nil
	}
	if need.Has(change.PathsInput) {
		f.Paths = nil
	}
	if f.Pull != nil {
		p := *f.Pull
		f.Pull = &p
	}
	f.Whole |= need
	requests, err := fill(&f)
	if err == nil {
		f.Read = append(f.Read, fmt.Sprintf("%s: %s (%d requests)", name, need, requests))
		return f, nil
	}
	if ReadAgain(err) {
		return s, Wrap(err, Transient, "reading from "+name)
	}
	reason := refusal(err)
	if reason == "" {
		reason = unreadReason(err)
	}
	s.MarkUnread(need, reason)
	return s, nil
}

// unreadReason words a read that failed for good as the reason its inputs are unread: the
// bound an answer went past (DecodeWithin), or else what failed, without the class an *Error's
// text ends with.
func unreadReason(err error) string {
	var long *tooLong
	if errors.As(err, &long) {
		return long.bound
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// tooLong is the error of an answer, or a page of a listing, longer than the bound a reader
// reads of one: ReadInputs marks the input it was for unread, naming the bound. It is
// ErrAnswerTooLong: asking again gets the same answer.
type tooLong struct{ bound string }

func (e *tooLong) Error() string { return e.bound }
func (e *tooLong) Unwrap() error { return ErrAnswerTooLong }

// DecodeWithin reads the answer's JSON into v for a reader of what a webhook lacks: an answer
// cut at the bound its request named is an error naming what and the bound, which ReadInputs
// gives as the reason the input it was for is unread (it is ErrAnswerTooLong: never read again).
func (a *Answer) DecodeWithin(what string, v any) error {
	if a.Cut {
		return &tooLong{fmt.Sprintf("%s is longer than the %d MiB amiss reads of an answer", what, len(a.Body)>>20)}
	}
	return a.Decode(what, v)
}

// ReadRange reads into s what s's commit brings since base (the commit its branch was at
// before a push, or the target a pull request's commit is compared with), as far as need asks
// for commits or paths: compare is the provider's comparison of a base with s's commit, which
// adds what need asks to s. A new branch names no base (""): its range begins at the
// repository's default branch, which defaultBranch reads, as a ref (refs/heads/...) and as the
// base compare takes. The push that created the default branch itself (s.Ref is that ref, or
// the repository names no default branch) has nothing to compare with: the commits and paths in
// need are marked unread, naming created. An error of defaultBranch or compare is returned as
// it is; each counts its own requests.
func ReadRange(s *change.Change, need change.Inputs, base string, defaultBranch func() (ref, base string, err error),
	created string, compare func(base string) error) error {
	if !need.Has(change.CommitsInput) && !need.Has(change.PathsInput) {
		return nil
	}
	if base == "" {
		ref, branch, err := defaultBranch()
		if err != nil {
			return err
		}
		if branch == "" || ref == s.Ref {
			s.MarkUnread(need&(change.CommitsInput|change.PathsInput), created)
			return nil
		}
		base = branch
	}
	return compare(base)
}

// AddPaths adds to s's paths each of ps it does not hold yet, in order ("" names no path).
func AddPaths(s *change.Change, ps ...string) {
	seen := make(map[string]bool, len(s.Paths))
	for _, p := range s.Paths {
		seen[p] = true
	}
	for _, p := range ps {
		if p != "" && !seen[p] {
			seen[p] = true
			s.Paths = append(s.Paths, p)
		}
	}
}
