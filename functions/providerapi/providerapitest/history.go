package providerapitest

import (
	"sort"
	"strings"
	"sync"
)

// History is the commits a fake's repositories hold, in the provider's own commit type C:
// each by its id, with its parents (the first parent first), in the order they were added
// (later is newer), and each repository's branches (a name and the commit it is at) and
// default branch (main unless set). It is what every fake's reads answer from: a pull
// request's commits, a comparison, a push's range. Its methods are safe for concurrent use
// and take no lock of the fake's: a fake may call them holding its own. A read made of
// several calls may see a commit or a branch added between two of them, as a provider's may.
type History[C any] struct {
	id      func(C) string
	parents func(C) []string

	mu    sync.Mutex
	repos map[string]*historyRepo[C]
	seq   int
}

type historyRepo[C any] struct {
	commits       map[string]C
	order         map[string]int // a commit's place in the order it was added
	branches      map[string]string
	defaultBranch string
}

// NewHistory returns an empty history of commits whose id and parents (the first parent
// first; none for a root) id and parents read.
func NewHistory[C any](id func(C) string, parents func(C) []string) *History[C] {
	return &History[C]{id: id, parents: parents, repos: map[string]*historyRepo[C]{}}
}

// repo is repository name, made when absent. h.mu is held.
func (h *History[C]) repo(name string) *historyRepo[C] {
	r := h.repos[name]
	if r == nil {
		r = &historyRepo[C]{commits: map[string]C{}, order: map[string]int{}, branches: map[string]string{}}
		h.repos[name] = r
	}
	return r
}

// Add adds (or replaces) commit c of repo; it is newer than every commit added before.
func (h *History[C]) Add(repo string, c C) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repo(repo)
	h.seq++
	r.commits[h.id(c)] = c
	r.order[h.id(c)] = h.seq
}

// SetBranch points repo's branch name at the commit head.
func (h *History[C]) SetBranch(repo, name, head string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repo(repo).branches[name] = head
}

// SetDefaultBranch makes the branch name repo's default branch.
func (h *History[C]) SetDefaultBranch(repo, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repo(repo).defaultBranch = name
}

// DefaultBranch is the name of repo's default branch (main unless set to another).
func (h *History[C]) DefaultBranch(repo string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.repos[repo]; r != nil && r.defaultBranch != "" {
		return r.defaultBranch
	}
	return "main"
}

// Known says whether repo was named to the history (a commit or a branch added, its default
// branch set).
func (h *History[C]) Known(repo string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repos[repo] != nil
}

// Has says whether repo holds a commit or a branch.
func (h *History[C]) Has(repo string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	return r != nil && (len(r.commits) > 0 || len(r.branches) > 0)
}

// HasCommits says whether repo holds a commit.
func (h *History[C]) HasCommits(repo string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	return r != nil && len(r.commits) > 0
}

// Commit is the commit id of repo.
func (h *History[C]) Commit(repo, id string) (C, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.commit(repo, id)
}

// commit is Commit, h.mu held.
func (h *History[C]) commit(repo, id string) (C, bool) {
	var c C
	r := h.repos[repo]
	if r == nil {
		return c, false
	}
	c, ok := r.commits[id]
	return c, ok
}

// Branch is the commit repo's branch name is at.
func (h *History[C]) Branch(repo, name string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		return "", false
	}
	head, ok := r.branches[name]
	return head, ok
}

// Resolve is the commit a branch of repo named ref is at, or ref itself (a commit).
func (h *History[C]) Resolve(repo, ref string) string {
	if head, ok := h.Branch(repo, ref); ok {
		return head
	}
	return ref
}

// Expand is the id of repo's commit named by its id or by a prefix of it ("" when none).
func (h *History[C]) Expand(repo, prefix string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		return ""
	}
	if _, ok := r.commits[prefix]; ok {
		return prefix
	}
	for id := range r.commits {
		if strings.HasPrefix(id, prefix) {
			return id
		}
	}
	return ""
}

// Line is the commits from base (excluded) to head along first parents, oldest first; found
// is false when a commit on the way is not held (head unknown, or base never reached).
func (h *History[C]) Line(repo, base, head string) (commits []C, found bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := head; id != base; {
		c, ok := h.commit(repo, id)
		if !ok {
			return nil, false
		}
		commits = append(commits, c)
		id = h.first(c)
	}
	return Reversed(commits), true
}

// SinceMergeBase is the commits of head since its merge base with base (the first commit of
// head's first-parent line that base's has: base itself, or one of its ancestors), oldest
// first; found is false when head is not known or the two lines share no commit.
func (h *History[C]) SinceMergeBase(repo, base, head string) (commits []C, found bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ancestors := map[string]bool{}
	for id := base; id != "" && !ancestors[id]; {
		ancestors[id] = true
		c, ok := h.commit(repo, id)
		if !ok {
			break
		}
		id = h.first(c)
	}
	for id := head; !ancestors[id]; {
		c, ok := h.commit(repo, id)
		if !ok {
			return nil, false
		}
		commits = append(commits, c)
		id = h.first(c)
	}
	return Reversed(commits), true
}

// Between is the commits reachable from head and not from base ("": none excluded), through
// every parent, newest first (in the order they were added).
func (h *History[C]) Between(repo, head, base string) []C {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		return nil
	}
	excluded := h.reach(r, base)
	var out []C
	for id := range h.reach(r, head) {
		if !excluded[id] {
			out = append(out, r.commits[id])
		}
	}
	sort.Slice(out, func(i, j int) bool { return r.order[h.id(out[i])] > r.order[h.id(out[j])] })
	return out
}

// reach is every commit reachable from id, itself included ("": none). h.mu is held.
func (h *History[C]) reach(r *historyRepo[C], id string) map[string]bool {
	seen := map[string]bool{}
	for stack := []string{id}; len(stack) > 0; {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[c] {
			continue
		}
		commit, ok := r.commits[c]
		if !ok {
			continue
		}
		seen[c] = true
		stack = append(stack, h.parents(commit)...)
	}
	return seen
}

// first is c's first parent ("" for a root).
func (h *History[C]) first(c C) string {
	if p := h.parents(c); len(p) > 0 {
		return p[0]
	}
	return ""
}

// Changed is what commits (oldest first) change together, each a list of files whose path
// path reads: each path once, where it was first changed, with its last change.
func Changed[C, F any](commits []C, files func(C) []F, path func(F) string) []F {
	at := map[string]int{}
	var out []F
	for _, c := range commits {
		for _, f := range files(c) {
			if i, ok := at[path(f)]; ok {
				out[i] = f
				continue
			}
			at[path(f)] = len(out)
			out = append(out, f)
		}
	}
	return out
}

// Reversed is a copy of s, last first.
func Reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// Pulls is a fake's pull requests (merge requests), by repository and number. Its methods
// are safe for concurrent use and take no lock of the fake's.
type Pulls[P any] struct {
	mu    sync.Mutex
	pulls map[string]map[int]P
}

// Put adds (or replaces) pull request number of repo.
func (ps *Pulls[P]) Put(repo string, number int, p P) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.pulls == nil {
		ps.pulls = map[string]map[int]P{}
	}
	if ps.pulls[repo] == nil {
		ps.pulls[repo] = map[int]P{}
	}
	ps.pulls[repo][number] = p
}

// Get is pull request number of repo.
func (ps *Pulls[P]) Get(repo string, number int) (P, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.pulls[repo][number]
	return p, ok
}

// Has says whether repo holds a pull request.
func (ps *Pulls[P]) Has(repo string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.pulls[repo]) > 0
}

// MergeBase is the newest commit of repo that both a and b reach ("" when none).
func (h *History[C]) MergeBase(repo, a, b string) string {
	for _, c := range h.Between(repo, a, "") { // newest first
		if len(h.Between(repo, h.id(c), b)) == 0 {
			return h.id(c)
		}
	}
	return ""
}

// FileChange is one file a commit changes against its first parent, as Tree reads it: the
// path, the path a move took it from ("" for none), and whether the commit removes it.
type FileChange struct {
	Path, From string
	Removed    bool
}

// Tree is commit id's tree in repo: each path it holds, with the commit that last wrote it
// there, as each commit's changes (changes reads them, against its first parent) build it on
// its first parent's. A commit the history does not hold, and what is behind it, adds none.
func (h *History[C]) Tree(repo, id string, changes func(C) []FileChange) map[string]string {
	var line []C
	for next := id; next != ""; {
		c, ok := h.Commit(repo, next)
		if !ok {
			break
		}
		line = append(line, c)
		next = h.first(c)
	}
	t := map[string]string{}
	for i := len(line) - 1; i >= 0; i-- {
		for _, ch := range changes(line[i]) {
			if ch.From != "" {
				delete(t, ch.From)
			}
			if ch.Removed {
				delete(t, ch.Path)
				continue
			}
			t[ch.Path] = h.id(line[i])
		}
	}
	return t
}

// TreeDiff is the files whose content differs between the trees from and to, as a comparison
// of two commits lists them: first each of changed (what the commits between them change, in
// their order) whose path, or the path it was moved from (paths reads both), is such a file;
// then every other such file (a merge's side taken whole, a range whose head is behind its
// base), by path, made by other with whether to adds or removes it.
func TreeDiff[F any](from, to map[string]string, changed []F, paths func(F) (path, old string),
	other func(path string, added, removed bool) F) []F {
	differs := func(path string) bool { return path != "" && from[path] != to[path] }
	var out []F
	seen := map[string]bool{}
	for _, f := range changed {
		p, old := paths(f)
		if differs(p) || differs(old) {
			out = append(out, f)
			seen[p], seen[old] = true, true
		}
	}
	var rest []string
	for path := range from {
		if !seen[path] && differs(path) {
			rest = append(rest, path)
		}
	}
	for path := range to {
		if _, also := from[path]; !also && !seen[path] && differs(path) {
			rest = append(rest, path)
		}
	}
	sort.Strings(rest)
	for _, path := range rest {
		out = append(out, other(path, from[path] == "", to[path] == ""))
	}
	return out
}

// Status is the status a provider gives a file a comparison adds (added), removes (removed) or
// changes (modified otherwise), in its own words.
func Status(added, removed bool, add, remove, modify string) string {
	switch {
	case added:
		return add
	case removed:
		return remove
	}
	return modify
}
