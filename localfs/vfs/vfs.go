// Package vfs is the file system interface the FileLedger uses, and its real implementation,
// in a package of its own so that wrappers (localfs/internal/faultfs) and the ledger share it.
package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// FS is the file system the FileLedger uses: every call it makes on its root goes through it,
// so tests can count operations and inject failures at any step. Paths come joined.
type FS interface {
	ReadFile(name string) ([]byte, error)
	// OpenFile opens a file (new temporary files, records written in place, lock files).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	Remove(name string) error
	Mkdir(name string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	// SyncDir makes the entries of a directory durable.
	SyncDir(name string) error
	// SyncFS makes everything written to the file system holding name durable.
	SyncFS(name string) error
}

// File is an open file.
type File interface {
	Write(p []byte) (int, error)
	// WriteAt writes at an offset without moving the file's position (pwrite).
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Close() error
	Fd() uintptr
}

// OSFS is the real file system.
type OSFS struct{}

var _ FS = OSFS{}

func (OSFS) ReadFile(name string) ([]byte, error) { return readFile(name) }
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return openFile(name, flag, perm)
}
func (OSFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (OSFS) Remove(name string) error                   { return os.Remove(name) }
func (OSFS) Mkdir(name string, perm fs.FileMode) error  { return os.Mkdir(name, perm) }
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (OSFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }

// SyncDir fsyncs a directory, making renames and removals inside it durable.
func (OSFS) SyncDir(name string) error {
	fd, err := open(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	if err := ignoringEINTR(func() error { return unix.Fsync(fd) }); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "sync", Path: name, Err: err}
	}
	return closeFD(fd, name)
}

// SyncFS flushes the whole file system holding name (syncfs(2)): one call makes a batch of
// removals durable, however many directories they touched.
func (OSFS) SyncFS(name string) error {
	fd, err := open(name, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return &os.PathError{Op: "syncfs", Path: name, Err: err}
	}
	return nil
}

// WritebackChecker is a file whose write-back errors are checked through something other than
// its descriptor alone (a wrapper that counts or injects failures).
type WritebackChecker interface {
	CheckWriteback() error
}

// CheckWriteback reports a failure to write f's data back to storage since f was opened (or
// last checked through f), each failure once. syncfs does not: the kernel records the error on
// the file and on its file system, and syncfs reports the latter once, to the descriptor it is
// called through, so an error recorded before that descriptor was opened, or reported to
// another caller, is not seen there. After a syncfs that succeeded, CheckWriteback tells
// whether each file's data reached storage, without another flush: sync_file_range(2) with
// SYNC_FILE_RANGE_WAIT_AFTER waits for write-back in progress (none, after the syncfs) and
// reports the file's own record (Linux 4.14 and later, errseq_t based tracking).
func CheckWriteback(f File) error {
	if c, ok := f.(WritebackChecker); ok {
		return c.CheckWriteback()
	}
	if err := unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: fileName(f), Err: err}
	}
	return nil
}

func fileName(f File) string {
	if n, ok := f.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "?"
}

// JournalChecker is a file system whose journal is checked through something other than the
// operating system's calls alone (a wrapper, a model).
type JournalChecker interface {
	CheckJournal(dir string) error
}

// CheckJournal tells whether the file system holding dir still commits what it is given. Call
// it after a sync that answered success, before trusting it with folder entries (renames,
// removals): ext4 aborts its journal when a commit fails to be written and tells only the
// caller that waited on that commit (another process, or the periodic commit); until some
// operation opens a journal handle, every later fsync and syncfs finds nothing to commit and
// answers success for changes lost with the aborted transaction. A change that needs the
// journal answers EROFS once it has aborted, and a sync returns only after the commit holding
// the caller's changes ended, so a failure of it has aborted the journal by the time this runs.
func CheckJournal(fsys FS, dir string) error {
	if c, ok := fsys.(JournalChecker); ok {
		return c.CheckJournal(dir)
	}
	return nil
}

// JournalProbePrefix begins the name of the probe file CheckJournal makes in the folder it
// checks; it holds ".tmp-", so a probe a dead process left is collected as debris.
const JournalProbePrefix = ".amiss-journal-probe.tmp-"

// journalProbes holds, per folder checked, whether it is on NFS (EFS: no local journal, the
// server commits every change before answering it, errors included) and this process's probe.
var journalProbes sync.Map // dir -> *journalProbe

type journalProbe struct {
	mu   sync.Mutex
	nfs  bool
	path string // "" until made
	size int64
}

// CheckJournal changes the size of a probe file in dir (made on first use, and again if debris
// collection took it): that opens a journal handle, so an aborted journal answers EROFS. One
// inode changes per check, no folder entry once the probe exists. On NFS it does nothing.
func (OSFS) CheckJournal(dir string) error {
	v, ok := journalProbes.Load(dir)
	if !ok {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
		v, _ = journalProbes.LoadOrStore(dir, &journalProbe{nfs: st.Type == unix.NFS_SUPER_MAGIC})
	}
	p := v.(*journalProbe)
	if p.nfs {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.path != "" {
		f, err := openFile(p.path, os.O_WRONLY, 0)
		if err == nil {
			// The size changes every check (a truncate to the same size need not open a
			// journal handle); it is remembered once changed.
			next := 1 - p.size
			err = f.Truncate(next)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				p.size = next
			}
			return err
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	path := filepath.Join(dir, JournalProbePrefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	p.path, p.size = path, 0
	return f.Close()
}
