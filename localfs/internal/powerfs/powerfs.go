// Package powerfs is an in-memory file system (vfs.FS) that models what a power loss keeps.
//
// A crash test that stops a process keeps all it wrote (the page cache outlives the process); a
// power loss (or a kernel crash) also loses what no sync made durable. powerfs keeps, for every
// file, its data as written and as last synced, and for every folder, its entries as they are
// and as last synced, with the changes since in order. Cut stops the machine; Recover builds
// what a reboot finds, keeping of each unsynced change what the chosen Persistence says: none,
// all, or some at random.
//
// What a sync guarantees, and nothing more (POSIX, and what ext4, XFS and NFS promise):
//
//   - File.Sync (fsync) makes the file's data and size durable, not the folder entry naming it;
//   - SyncDir makes a folder's entries durable (creations, renames in and out, removals), not
//     the data of the files they name;
//   - SyncFS (syncfs) makes everything durable;
//   - File.WriteBack (sync_file_range, vfs.WriteBack) writes a file's bytes to the device
//     without a flush: those within its durable size become durable with the next sync of
//     anything (each ends with a device flush); a size change needs the file's own sync. Until
//     then a power loss keeps them or not, like any unsynced write.
//
// What a power loss may keep of the rest, by Persistence: any subset of a file's unsynced
// writes, each torn at 512-byte sectors (what a disk writes atomically); and of the unsynced
// folder changes either a prefix in the order they were made, across all folders (a journaling
// file system commits metadata in order, a rename whole), or any subset (no journal: each
// folder block is written back alone, a rename's new name and old name's removal independently).
//
// Locks (vfs.Flocker) always succeed: the FileLedger serializes one process's goroutines with
// semaphores of its own, and one FS models one machine whose processes share one kernel.
package powerfs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amiss-ci/amiss/localfs/vfs"
)

// ErrPowerCut is what every call answers once the power is cut.
var ErrPowerCut = errors.New("powerfs: the power is cut")

// Sector is the unit a disk writes atomically: an unsynced write is kept or lost by sectors.
const Sector = 512

// Persistence chooses what a power loss keeps of the changes no sync made durable.
type Persistence struct {
	Keep Keep   // Nothing, Everything or Random
	Seed uint64 // drives the choices of Random
	// Ordered keeps a prefix of the folder changes, in the order they were made (a journaling
	// file system); otherwise any subset of them (one without a journal).
	Ordered bool
	// LoseFolder, when set, is a folder whose unsynced changes are all lost, whatever Keep says:
	// without a journal each folder is written back on its own, so a later change in one folder
	// can survive an earlier one in another (see DirtyFolders).
	LoseFolder string
}

// Keep says how much of the unsynced changes a power loss keeps.
type Keep int

const (
	Nothing    Keep = iota // only what was synced
	Everything             // every change, as if the page cache were written back just in time
	Random                 // some of them, chosen by Seed
)

func (p Persistence) String() string {
	s := fmt.Sprintf("keep-random-any-subset-%d", p.Seed)
	switch {
	case p.Keep == Nothing:
		s = "keep-nothing"
	case p.Keep == Everything:
		s = "keep-everything"
	case p.Ordered:
		s = fmt.Sprintf("keep-random-ordered-%d", p.Seed)
	}
	if p.LoseFolder != "" {
		s += "-except-" + p.LoseFolder
	}
	return s
}

// write is an unsynced write to a file.
type write struct {
	off  int64
	data []byte
}

// dirOp is an unsynced change to a folder: name linked to ino, or (ino 0) unlinked.
type dirOp struct {
	seq  int64 // order of the change among all folders; the two halves of a rename share it
	name string
	ino  int64
}

type inode struct {
	dir bool
	// A file: its data now, as last synced, and the writes since. owned: data is this inode's
	// alone (no durable copy, clone or recovery shares it), so a write within it may change it
	// in place. writtenBack: how many of the first writes File.WriteBack wrote to the device.
	data, durable []byte
	owned         bool
	writes        []write
	writtenBack   int
	// A folder: its entries now, as last synced, and the changes since.
	entries, durableEntries map[string]int64
	ops                     []dirOp
}

func newDir() *inode {
	return &inode{dir: true, entries: map[string]int64{}, durableEntries: map[string]int64{}}
}

// FS is one machine's file system. The zero value is not usable: call New.
type FS struct {
	mu     sync.Mutex
	inodes map[int64]*inode
	next   int64
	seq    int64
	cut    bool
	// countdown, when armed (>= 0), is how many more changes and syncs succeed before the
	// power is cut. writtenBack holds the files with writes written back, not yet flushed.
	countdown   int
	calls       int
	syncs       []int
	writtenBack map[int64]bool
}

var (
	_ vfs.FS             = (*FS)(nil)
	_ vfs.JournalChecker = (*FS)(nil)
	_ vfs.WriteBackFS    = (*FS)(nil)
)

const rootIno = 1

// New returns an empty file system holding only the folder "/".
func New() *FS {
	return &FS{inodes: map[int64]*inode{rootIno: newDir()}, next: rootIno + 1, countdown: -1}
}

// Calls reports how many changes and syncs succeeded since New, Clone or Recover.
func (f *FS) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// ResetCalls starts the counts of Calls and Syncs again from zero.
func (f *FS) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.syncs = 0, nil
}

// Syncs reports the syncs made since New, Clone or Recover, each by the number of calls before
// it: CutAfter(n) with such an n cuts the power just before that sync. Between two syncs only
// what was written changes, not what is durable, so a cut before each sync (and after the
// last), recovered with Random in order, reaches every state a cut at any call leaves.
func (f *FS) Syncs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.syncs)
}

// CutAfter cuts the power after n more changes or syncs: the (n+1)th fails without effect,
// as does every call after it. A negative n disarms it.
func (f *FS) CutAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countdown = n
}

// Cut cuts the power now.
func (f *FS) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
}

// IsCut reports whether the power is cut.
func (f *FS) IsCut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut
}

// SyncAll makes everything durable, as a syncfs would, without counting as a call.
func (f *FS) SyncAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncAll()
}

func (f *FS) syncAll() {
	f.writtenBack = nil
	for _, in := range f.inodes {
		f.syncInode(in)
	}
}

func (f *FS) syncInode(in *inode) {
	if in.dir {
		in.durableEntries = maps.Clone(in.entries)
		in.ops = nil
		return
	}
	in.durable = in.data // shared from now on: the next write copies it
	in.owned = false
	in.writes = nil
	in.writtenBack = 0
}

// flush ends every sync: the bytes written back (File.WriteBack) become durable within each
// file's durable size (a write-back carries no size change); beyond it they stay unsynced.
func (f *FS) flush() {
	for id := range f.writtenBack {
		in := f.inodes[id]
		if in == nil || in.writtenBack == 0 {
			continue
		}
		durable := slices.Clone(in.durable)
		size := int64(len(durable))
		var rest []write
		for _, w := range in.writes[:in.writtenBack] {
			end := w.off + int64(len(w.data))
			if w.off < size {
				copy(durable[w.off:min(end, size)], w.data)
			}
			if end > size {
				from := max(w.off, size)
				rest = append(rest, write{off: from, data: w.data[from-w.off:]})
			}
		}
		in.durable = durable
		in.writes = append(rest, in.writes[in.writtenBack:]...)
		in.writtenBack = 0
	}
	f.writtenBack = nil
}

// FlushCoversWriteBack implements vfs.WriteBackFS: the model is a local disk whose syncs all
// end with a flush.
func (f *FS) FlushCoversWriteBack(dir string) bool { return true }

// Recover returns the file system a reboot after the power cut finds: what was synced, and of
// the rest what p keeps. Everything in it is durable. f must be cut.
func (f *FS) Recover(p Persistence) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cut {
		panic("powerfs: Recover before the power was cut")
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	// With Ordered, the folder changes kept are those up to a point drawn among the unsynced
	// ones (not among every change ever made: it would almost always fall before them).
	var horizon int64
	switch p.Keep {
	case Everything:
		horizon = f.seq
	case Random:
		var pending []int64
		for _, in := range f.inodes {
			for _, op := range in.ops {
				pending = append(pending, op.seq)
			}
		}
		slices.Sort(pending)
		pending = slices.Compact(pending)
		if k := rng.IntN(len(pending) + 1); k > 0 {
			horizon = pending[k-1]
		}
	}
	keepOp := func(op dirOp) bool { // the horizon is 0 for Nothing, the last change for Everything
		if p.Keep == Random && !p.Ordered {
			return rng.IntN(2) == 0
		}
		return op.seq <= horizon
	}
	var lost int64 // the inode of LoseFolder, as the cut left the tree
	if p.LoseFolder != "" {
		if _, _, ino, err := f.lookup("recover", p.LoseFolder); err == nil {
			lost = ino
		}
	}
	out := &FS{inodes: map[int64]*inode{}, next: f.next, countdown: -1}
	for _, id := range slices.Sorted(maps.Keys(f.inodes)) { // the random choices repeat for one seed
		in := f.inodes[id]
		if in.dir {
			n := newDir()
			n.entries = maps.Clone(in.durableEntries)
			for _, op := range in.ops {
				if id == lost || !keepOp(op) {
					continue
				}
				if op.ino == 0 {
					delete(n.entries, op.name)
				} else {
					n.entries[op.name] = op.ino
				}
			}
			n.durableEntries = maps.Clone(n.entries)
			out.inodes[id] = n
			continue
		}
		data := in.durable
		if len(in.writes) > 0 && p.Keep != Nothing {
			data = slices.Clone(data)
		}
		for _, w := range in.writes {
			for s := w.off - w.off%Sector; s < w.off+int64(len(w.data)); s += Sector {
				lo, hi := max(s, w.off), min(s+Sector, w.off+int64(len(w.data)))
				if p.Keep == Nothing || p.Keep == Random && rng.IntN(2) == 0 {
					continue
				}
				if int64(len(data)) < hi {
					data = append(data, make([]byte, hi-int64(len(data)))...)
				}
				copy(data[lo:hi], w.data[lo-w.off:hi-w.off])
			}
		}
		out.inodes[id] = &inode{data: data, durable: data}
	}
	// Only what the root reaches exists; a folder reached twice (both halves of a rename kept)
	// keeps its first name in sorted order.
	reached := map[int64]bool{}
	var walk func(id int64)
	walk = func(id int64) {
		reached[id] = true
		in := out.inodes[id]
		for _, name := range slices.Sorted(maps.Keys(in.entries)) {
			c := in.entries[name]
			child, ok := out.inodes[c]
			if !ok || child.dir && reached[c] {
				delete(in.entries, name)
				delete(in.durableEntries, name)
				continue
			}
			reached[c] = true
			if child.dir {
				walk(c)
			}
		}
	}
	walk(rootIno)
	maps.DeleteFunc(out.inodes, func(id int64, _ *inode) bool { return !reached[id] })
	return out
}

// DirtyFolders lists, sorted, the folders (by path now) holding changes no sync made durable:
// each is a LoseFolder worth trying.
func (f *FS) DirtyFolders() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	var walk func(id int64, p string)
	walk = func(id int64, p string) {
		in := f.inodes[id]
		if len(in.ops) > 0 {
			out = append(out, p)
		}
		for name, c := range in.entries {
			if child, ok := f.inodes[c]; ok && child.dir {
				walk(c, path.Join(p, name))
			}
		}
	}
	walk(rootIno, "/")
	slices.Sort(out)
	return out
}

// Clone returns a copy of f as it is (what is durable and what is not), powered.
func (f *FS) Clone() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &FS{inodes: make(map[int64]*inode, len(f.inodes)), next: f.next, seq: f.seq, countdown: -1,
		writtenBack: maps.Clone(f.writtenBack)}
	for id, in := range f.inodes {
		// Shared data is never changed in place (see WriteAt), so copies share it.
		in.owned = false
		c := *in
		c.writes, c.ops = slices.Clone(in.writes), slices.Clone(in.ops)
		c.entries, c.durableEntries = maps.Clone(in.entries), maps.Clone(in.durableEntries)
		out.inodes[id] = &c
	}
	return out
}

// change is called, under mu, before a change or a sync: it fails once the power is cut, and
// cuts it when the countdown runs out. read is the check of a call that changes nothing.
func (f *FS) change(op, name string) error {
	if f.countdown == 0 {
		f.cut = true
	}
	if err := f.read(op, name); err != nil {
		return err
	}
	if f.countdown > 0 {
		f.countdown--
	}
	f.calls++
	return nil
}

func (f *FS) read(op, name string) error {
	if f.cut {
		return &fs.PathError{Op: op, Path: name, Err: ErrPowerCut}
	}
	return nil
}

// lookup resolves an absolute path to its parent folder, last element and inode (0: none).
func (f *FS) lookup(op, name string) (parent *inode, base string, ino int64, err error) {
	clean := path.Clean(name)
	if !path.IsAbs(clean) {
		return nil, "", 0, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if clean == "/" {
		return nil, "", rootIno, nil
	}
	cur := f.inodes[rootIno]
	parts := strings.Split(clean[1:], "/")
	for _, p := range parts[:len(parts)-1] {
		id, ok := cur.entries[p]
		if !ok {
			return nil, "", 0, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		cur = f.inodes[id]
		if !cur.dir {
			return nil, "", 0, &fs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
	}
	base = parts[len(parts)-1]
	return cur, base, cur.entries[base], nil
}

// link and unlink change a folder's entries, recording the change.
func (f *FS) link(dir *inode, name string, ino, seq int64) {
	dir.entries[name] = ino
	dir.ops = append(dir.ops, dirOp{seq: seq, name: name, ino: ino})
}

func (f *FS) unlink(dir *inode, name string, seq int64) {
	delete(dir.entries, name)
	dir.ops = append(dir.ops, dirOp{seq: seq, name: name})
}

func (f *FS) nextSeq() int64 {
	f.seq++
	return f.seq
}

// ReadFile implements vfs.FS.
func (f *FS) ReadFile(name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.node("read", name)
	if err == nil && in.dir {
		err = &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	if err != nil {
		return nil, err
	}
	return slices.Clone(in.data), nil
}

// OpenFile implements vfs.FS: files only, opened for writing (O_WRONLY or O_RDWR), with
// O_CREATE and O_EXCL; the flags the FileLedger does not use are refused.
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if flag&^(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_EXCL) != 0 || flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("powerfs: flags %#x not modelled", flag)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.read("open", name); err != nil {
		return nil, err
	}
	parent, base, ino, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if ino != 0 {
		if flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
		}
		if f.inodes[ino].dir {
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
		}
		return &file{fs: f, ino: ino, name: name}, nil
	}
	if flag&os.O_CREATE == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if err := f.change("create", name); err != nil {
		return nil, err
	}
	ino = f.next
	f.next++
	f.inodes[ino] = &inode{}
	f.link(parent, base, ino, f.nextSeq())
	return &file{fs: f, ino: ino, name: name}, nil
}

// Rename implements vfs.FS, for files, within one folder or across folders.
func (f *FS) Rename(oldpath, newpath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.change("rename", oldpath); err != nil {
		return err
	}
	op, ob, oino, err := f.lookup("rename", oldpath)
	if err != nil {
		return err
	}
	if oino == 0 {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrNotExist}
	}
	np, nb, nino, err := f.lookup("rename", newpath)
	if err != nil {
		return err
	}
	if nino != 0 && f.inodes[nino].dir {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EISDIR}
	}
	if oino == nino {
		return nil
	}
	seq := f.nextSeq()
	f.link(np, nb, oino, seq)
	f.unlink(op, ob, seq)
	return nil
}

// Remove implements vfs.FS: a file, or an empty folder.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.change("remove", name); err != nil {
		return err
	}
	parent, base, ino, err := f.lookup("remove", name)
	if err != nil {
		return err
	}
	if ino == 0 || parent == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if in := f.inodes[ino]; in.dir && len(in.entries) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	f.unlink(parent, base, f.nextSeq())
	return nil
}

// Mkdir implements vfs.FS.
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.read("mkdir", name); err != nil {
		return err
	}
	parent, base, ino, err := f.lookup("mkdir", name)
	if err == nil && ino != 0 {
		err = &fs.PathError{Op: "mkdir", Path: name, Err: fs.ErrExist}
	}
	if err != nil {
		return err
	}
	if err := f.change("mkdir", name); err != nil {
		return err
	}
	ino = f.next
	f.next++
	f.inodes[ino] = newDir()
	f.link(parent, base, ino, f.nextSeq())
	return nil
}

// ReadDir implements vfs.FS.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.dir("readdir", name)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(in.entries))
	for _, n := range slices.Sorted(maps.Keys(in.entries)) {
		out = append(out, fs.FileInfoToDirEntry(info{n, f.inodes[in.entries[n]]}))
	}
	return out, nil
}

// node answers the inode named, once the power is checked; dir answers a folder's.
func (f *FS) node(op, name string) (*inode, error) {
	if err := f.read(op, name); err != nil {
		return nil, err
	}
	_, _, ino, err := f.lookup(op, name)
	if err != nil {
		return nil, err
	}
	if in, ok := f.inodes[ino]; ok && ino != 0 {
		return in, nil
	}
	return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

func (f *FS) dir(op, name string) (*inode, error) {
	in, err := f.node(op, name)
	if err == nil && !in.dir {
		err = &fs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return in, err
}

// Stat implements vfs.FS.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.node("stat", name)
	if err != nil {
		return nil, err
	}
	return info{path.Base(name), in}, nil
}

// SyncDir implements vfs.FS: the folder's entries become durable.
func (f *FS) SyncDir(name string) error {
	return f.sync("fsync", name, func() (*inode, error) { return f.dir("fsync", name) })
}

// SyncFS implements vfs.FS: everything becomes durable.
func (f *FS) SyncFS(name string) error { return f.sync("syncfs", name, nil) }

// sync is a call (op on name) that makes the inode target answers durable (nil: every inode)
// and ends with a flush.
func (f *FS) sync(op, name string, target func() (*inode, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.change(op, name); err != nil {
		return err
	}
	if target == nil {
		f.syncAll()
	} else if in, err := target(); err != nil {
		return err
	} else {
		f.syncInode(in)
	}
	f.flush()
	f.syncs = append(f.syncs, f.calls-1)
	return nil
}

// CheckJournal implements vfs.JournalChecker: the model's syncs never fail, nor its journal.
func (f *FS) CheckJournal(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.read("journal check", dir)
}

type info struct {
	name string
	in   *inode
}

func (i info) Name() string { return i.name }
func (i info) Size() int64  { return int64(len(i.in.data)) }
func (i info) Mode() fs.FileMode {
	if i.in.dir {
		return fs.ModeDir | 0o700
	}
	return 0o600
}
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.in.dir }
func (i info) Sys() any           { return nil }

// file is an open file of an FS: it writes to its inode even once its name is gone.
type file struct {
	fs     *FS
	ino    int64
	name   string
	pos    int64
	closed bool
}

var (
	_ vfs.File             = (*file)(nil)
	_ vfs.Flocker          = (*file)(nil)
	_ vfs.WritebackChecker = (*file)(nil)
	_ vfs.WriteBacker      = (*file)(nil)
)

func (w *file) Write(p []byte) (int, error) {
	n, err := w.WriteAt(p, w.pos)
	w.pos += int64(n)
	return n, err
}

func (w *file) WriteAt(p []byte, off int64) (int, error) {
	f := w.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.closed {
		return 0, &fs.PathError{Op: "write", Path: w.name, Err: fs.ErrClosed}
	}
	if err := f.change("write", w.name); err != nil {
		return 0, err
	}
	in := f.inodes[w.ino]
	if in.owned && off+int64(len(p)) <= int64(len(in.data)) {
		copy(in.data[off:], p)
	} else {
		// A new slice: clones and the durable copy share the old one.
		data := make([]byte, max(int64(len(in.data)), off+int64(len(p))))
		copy(data, in.data)
		copy(data[off:], p)
		in.data, in.owned = data, true
	}
	in.writes = append(in.writes, write{off: off, data: slices.Clone(p)})
	return len(p), nil
}

func (w *file) Sync() error {
	if w.closed {
		return &fs.PathError{Op: "fsync", Path: w.name, Err: fs.ErrClosed}
	}
	return w.fs.sync("fsync", w.name, func() (*inode, error) { return w.fs.inodes[w.ino], nil })
}

// WriteBack implements vfs.WriteBacker: the file's writes so far reach the device, durable
// with the next flush (see the package documentation); a call, not a sync.
func (w *file) WriteBack() error {
	f := w.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.closed {
		return &fs.PathError{Op: "sync_file_range", Path: w.name, Err: fs.ErrClosed}
	}
	if err := f.change("sync_file_range", w.name); err != nil {
		return err
	}
	in := f.inodes[w.ino]
	in.writtenBack = len(in.writes)
	if in.writtenBack > 0 {
		if f.writtenBack == nil {
			f.writtenBack = map[int64]bool{}
		}
		f.writtenBack[w.ino] = true
	}
	return nil
}

// Close answers success even once the power is cut (it writes nothing).
func (w *file) Close() error {
	if w.closed {
		return &fs.PathError{Op: "close", Path: w.name, Err: fs.ErrClosed}
	}
	w.closed = true
	return nil
}

// Fd has no descriptor to give: the value is invalid for every system call.
func (w *file) Fd() uintptr { return ^uintptr(0) }

// Flock implements vfs.Flocker: it always succeeds (see the package documentation).
func (w *file) Flock(how int) error { return nil }

// CheckWriteback implements vfs.WritebackChecker: the model's write-back never fails.
func (w *file) CheckWriteback() error {
	w.fs.mu.Lock()
	defer w.fs.mu.Unlock()
	return w.fs.read("sync_file_range", w.name)
}
