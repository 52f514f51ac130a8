package providerapi

import (
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
//     answer past its bound): s is answered with the inputs in need marked unread, naming
//     reason(err), so that a rule needing them fails closed. That is no error.
func ReadInputs(s change.Change, need change.Inputs, name string, fill func(f *change.Change) (requests int, err error),
	reason func(error) string) (change.Change, error) {
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
	s.MarkUnread(need, reason(err))
	return s, nil
}
