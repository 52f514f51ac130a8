package providerapitest

import "sync"

// Statuses is the commit statuses a fake holds, in the provider's own status type S, in the
// order they were written: each of a repository's commit, under a name on it (a context, a
// key). What a provider shows of them is read from that order: the latest status of a name
// is the one a user sees, a provider that keeps one status a name (Bitbucket) shows those,
// and GitHub's, Gitea's and GitLab's listings list every one. Its methods are safe for
// concurrent use and take no lock of the fake's.
type Statuses[S any] struct {
	of func(S) (repo, sha, name string)

	mu   sync.Mutex
	list []S
}

// NewStatuses returns an empty list of statuses whose repository, commit and name of reads.
func NewStatuses[S any](of func(S) (repo, sha, name string)) *Statuses[S] {
	return &Statuses[S]{of: of}
}

// Add keeps s as written last, stamped first by stamp (nil: as it is) with held, the number of
// statuses written before it, and same, those of its commit and name (an id from held+1, a
// count of updates from same), and returns it as kept.
func (ss *Statuses[S]) Add(s S, stamp func(s S, held, same int) S) S {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if stamp != nil {
		repo, sha, name := ss.of(s)
		s = stamp(s, len(ss.list), ss.count(repo, sha, name))
	}
	ss.list = append(ss.list, s)
	return s
}

// count is how many statuses of a commit and name are held. ss.mu is held.
func (ss *Statuses[S]) count(repo, sha, name string) int {
	n := 0
	for _, s := range ss.list {
		if r, c, m := ss.of(s); r == repo && c == sha && m == name {
			n++
		}
	}
	return n
}

// Count is how many statuses of a commit and name were written.
func (ss *Statuses[S]) Count(repo, sha, name string) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.count(repo, sha, name)
}

// Of is every status of a commit, oldest first.
func (ss *Statuses[S]) Of(repo, sha string) []S {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []S
	for _, s := range ss.list {
		if r, c, _ := ss.of(s); r == repo && c == sha {
			out = append(out, s)
		}
	}
	return out
}

// Latest is the status a user sees for a commit and name: the last written.
func (ss *Statuses[S]) Latest(repo, sha, name string) (S, bool) {
	all := ss.Of(repo, sha)
	for i := len(all) - 1; i >= 0; i-- {
		if _, _, m := ss.of(all[i]); m == name {
			return all[i], true
		}
	}
	var none S
	return none, false
}

// Current is the latest status of each name of a commit, in the order the names were first
// written.
func (ss *Statuses[S]) Current(repo, sha string) []S {
	latest := map[string]int{}
	var out []S
	for _, s := range ss.Of(repo, sha) {
		_, _, name := ss.of(s)
		if i, ok := latest[name]; ok {
			out[i] = s
			continue
		}
		latest[name] = len(out)
		out = append(out, s)
	}
	return out
}

// Nth is the n-th status written (from 1).
func (ss *Statuses[S]) Nth(n int64) (S, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if n < 1 || n > int64(len(ss.list)) {
		var none S
		return none, false
	}
	return ss.list[n-1], true
}
