// Package faultfs wraps the FileLedger's file system to count operations and inject failures,
// like Pebble's vfs/errorfs: small rules, composed, each deciding whether one operation passes,
// fails before or after its effect, or kills the "process" (every later operation fails).
package faultfs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"

	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Op names a file system operation.
type Op string

// Operations.
const (
	OpReadFile Op = "read"
	OpOpen     Op = "open"
	OpWrite    Op = "write"
	OpSync     Op = "fsync"
	OpClose    Op = "close"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpMkdir    Op = "mkdir"
	OpReadDir  Op = "readdir"
	OpStat     Op = "stat"
	OpSyncDir  Op = "syncdir"
	OpSyncFS   Op = "syncfs"
	// OpWriteback checks, after a syncfs, that a file's data was written back (failing it
	// models a write-back error the kernel recorded on the file).
	OpWriteback Op = "writeback"
	// OpWriteOut writes a file's bytes to the device without a flush (vfs.WriteBack).
	OpWriteOut Op = "writeout"
	// OpWriteStart starts a file's write-back without waiting (vfs.StartWriteBack): a hint.
	OpWriteStart Op = "writestart"
	// OpJournal checks, after a sync, that the journal still commits (vfs.CheckJournal).
	OpJournal Op = "journal"
)

// Mutating reports whether the operation can change what is stored.
func (o Op) Mutating() bool {
	switch o {
	case OpOpen, OpWrite, OpSync, OpClose, OpRename, OpRemove, OpMkdir, OpSyncDir, OpSyncFS, OpWriteOut:
		return true
	}
	return false
}

// Durability reports whether the operation is an fsync of some kind.
func (o Op) Durability() bool { return o == OpSync || o == OpSyncDir || o == OpSyncFS }

// Action is a rule's decision.
type Action int

// Actions.
const (
	Pass             Action = iota // the operation runs
	FailBefore                     // it fails without its effect
	FailAfter                      // it runs, then reports a failure
	Crash                          // it and every later one fail without effect: the process died
	CrashAfterEffect               // it runs, then fails, and every later one fails
)

// ErrInjected is the error injected failures wrap.
var ErrInjected = errors.New("faultfs: injected failure")

// Rule decides the fate of one operation.
type Rule func(op Op, path string) Action

// Counter counts operations across every FS that shares it. It is safe for concurrent use.
type Counter struct {
	mu   sync.Mutex
	byOp map[Op]int
}

// NewCounter returns a zeroed counter.
func NewCounter() *Counter { return &Counter{byOp: map[Op]int{}} }

func (c *Counter) add(op Op) {
	c.mu.Lock()
	c.byOp[op]++
	c.mu.Unlock()
}

// Counts is a snapshot of a counter.
type Counts struct {
	Total, Listings, Fsyncs, Mutating int
	ByOp                              map[Op]int
}

// String lists the counts by operation.
func (c Counts) String() string {
	s := fmt.Sprintf("%d ops", c.Total)
	for _, op := range slices.Sorted(maps.Keys(c.ByOp)) {
		s += fmt.Sprintf(" %s=%d", op, c.ByOp[op])
	}
	return s
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Counts{ByOp: map[Op]int{}}
	for op, n := range c.byOp {
		out.ByOp[op] = n
		out.Total += n
		if op == OpReadDir {
			out.Listings += n
		}
		if op.Durability() {
			out.Fsyncs += n
		}
		if op.Mutating() {
			out.Mutating += n
		}
	}
	return out
}

// Reset zeroes the counter.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.byOp = map[Op]int{}
	c.mu.Unlock()
}

// FS is a vfs.FS with counting and fault injection.
type FS struct {
	base  vfs.FS
	count *Counter

	mu    sync.Mutex
	rules map[string]Rule
	dead  bool
}

var _ vfs.FS = (*FS)(nil)

// New wraps base; count may be shared between several FS values (nil: a new one).
func New(base vfs.FS, count *Counter) *FS {
	if count == nil {
		count = NewCounter()
	}
	return &FS{base: base, count: count, rules: map[string]Rule{}}
}

// Counter returns the FS's counter.
func (f *FS) Counter() *Counter { return f.count }

// SetRule installs (or, with nil, removes) the named rule. Rules are consulted in name order;
// the first that does not answer Pass decides.
func (f *FS) SetRule(name string, r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r == nil {
		delete(f.rules, name)
		return
	}
	f.rules[name] = r
}

// Kill makes every later operation fail, as a process that died.
func (f *FS) Kill() {
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
}

func (f *FS) decide(op Op, path string) Action {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return Crash
	}
	for _, n := range slices.Sorted(maps.Keys(f.rules)) {
		if a := f.rules[n](op, path); a != Pass {
			if a == Crash || a == CrashAfterEffect {
				f.dead = true
			}
			return a
		}
	}
	return Pass
}

// do runs one operation under the rules.
func (f *FS) do(op Op, path string, run func() error) error {
	a := f.decide(op, path)
	if a == FailBefore || a == Crash {
		return &fs.PathError{Op: string(op), Path: path, Err: ErrInjected}
	}
	f.count.add(op)
	if err := run(); err != nil || a != FailAfter && a != CrashAfterEffect {
		return err
	}
	return &fs.PathError{Op: string(op), Path: path, Err: fmt.Errorf("%w (after the effect)", ErrInjected)}
}

func (f *FS) ReadFile(name string) (data []byte, err error) {
	err = f.do(OpReadFile, name, func() error { data, err = f.base.ReadFile(name); return err })
	return data, err
}

func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	var file vfs.File
	err := f.do(OpOpen, name, func() (err error) { file, err = f.base.OpenFile(name, flag, perm); return err })
	if err != nil {
		if file != nil {
			file.Close()
		}
		return nil, err
	}
	return &wrappedFile{f: f, base: file, name: name}, nil
}

func (f *FS) Rename(oldpath, newpath string) error {
	return f.do(OpRename, newpath, func() error { return f.base.Rename(oldpath, newpath) })
}

func (f *FS) Remove(name string) error { return f.on(OpRemove, name, f.base.Remove) }

func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	return f.do(OpMkdir, name, func() error { return f.base.Mkdir(name, perm) })
}

func (f *FS) ReadDir(name string) (out []fs.DirEntry, err error) {
	err = f.do(OpReadDir, name, func() error { out, err = f.base.ReadDir(name); return err })
	return out, err
}

func (f *FS) Stat(name string) (out fs.FileInfo, err error) {
	err = f.do(OpStat, name, func() error { out, err = f.base.Stat(name); return err })
	return out, err
}

func (f *FS) SyncDir(name string) error { return f.on(OpSyncDir, name, f.base.SyncDir) }
func (f *FS) SyncFS(name string) error  { return f.on(OpSyncFS, name, f.base.SyncFS) }

// on runs call(name) as operation op under the rules.
func (f *FS) on(op Op, name string, call func(string) error) error {
	return f.do(op, name, func() error { return call(name) })
}

// FlushCoversWriteBack answers for the wrapped file system (vfs.FlushCoversWriteBack).
func (f *FS) FlushCoversWriteBack(dir string) bool { return vfs.FlushCoversWriteBack(f.base, dir) }

// CheckJournal checks the wrapped file system's journal under the rules (OpJournal).
func (f *FS) CheckJournal(dir string) error {
	return f.do(OpJournal, dir, func() error { return vfs.CheckJournal(f.base, dir) })
}

type wrappedFile struct {
	f    *FS
	base vfs.File
	name string
}

func (w *wrappedFile) Write(p []byte) (n int, err error) {
	err = w.f.do(OpWrite, w.name, func() error { n, err = w.base.Write(p); return err })
	return n, err
}

func (w *wrappedFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = w.f.do(OpWrite, w.name, func() error { n, err = w.base.WriteAt(p, off); return err })
	return n, err
}

func (w *wrappedFile) Sync() error {
	return w.f.do(OpSync, w.name, func() error { return w.base.Sync() })
}

// Close always releases the descriptor, even when the rules fail it: a dead process's
// descriptors are closed by the kernel.
func (w *wrappedFile) Close() error {
	err := w.f.do(OpClose, w.name, func() error { return nil })
	cerr := w.base.Close()
	if err != nil {
		return err
	}
	return cerr
}

func (w *wrappedFile) Fd() uintptr { return w.base.Fd() }

// CheckWriteback checks the wrapped file's write-back under the rules (OpWriteback).
func (w *wrappedFile) CheckWriteback() error {
	return w.f.do(OpWriteback, w.name, func() error { return vfs.CheckWriteback(w.base) })
}

// WriteBack writes the wrapped file back under the rules (OpWriteOut).
func (w *wrappedFile) WriteBack() error {
	return w.f.do(OpWriteOut, w.name, func() error { return vfs.WriteBack(w.base) })
}

// StartWriteBack starts the wrapped file's write-back under the rules (OpWriteStart).
func (w *wrappedFile) StartWriteBack() error {
	return w.f.do(OpWriteStart, w.name, func() error { return vfs.StartWriteBack(w.base) })
}

// Flock passes advisory locks on to the wrapped file (which may model their cost).
func (w *wrappedFile) Flock(how int) error { return vfs.Flock(w.base, how) }

// CrashAfter returns a rule that lets n mutating operations pass and then crashes (with
// Crash, or CrashAfterEffect when afterEffect is set).
func CrashAfter(n int, afterEffect bool) Rule {
	if afterEffect {
		return after(n, Op.Mutating, CrashAfterEffect)
	}
	return after(n, Op.Mutating, Crash)
}

// FailNth returns a rule that fails the (n+1)th mutating operation once (before or after its
// effect) and lets everything else pass.
func FailNth(n int, after bool) Rule {
	var mu sync.Mutex
	seen, a := 0, FailBefore
	if after {
		a = FailAfter
	}
	return func(op Op, path string) Action {
		if !op.Mutating() {
			return Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == n+1 {
			return a
		}
		return Pass
	}
}

// FailListingsAfter returns a rule that lets n listings pass and fails every later one.
func FailListingsAfter(n int) Rule {
	return after(n, func(op Op) bool { return op == OpReadDir }, FailBefore)
}

// after returns a rule that lets n of the operations that match pass and answers a for every
// later one.
func after(n int, match func(Op) bool, a Action) Rule {
	var mu sync.Mutex
	left := n
	return func(op Op, path string) Action {
		if !match(op) {
			return Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if left > 0 {
			left--
			return Pass
		}
		return a
	}
}
