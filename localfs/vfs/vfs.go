// Package vfs is the file system interface the FileLedger uses, and its real implementation.
// It is its own package so that wrappers (localfs/faultfs) and the ledger can both depend on
// it.
package vfs

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// FS is the file system the FileLedger uses. Every call the ledger makes on its root goes
// through it, so tests can count operations and inject failures at any step (in the manner
// of Pebble's errorfs). Paths are joined by the ledger; FS does not resolve them.
type FS interface {
	// ReadFile reads a whole file.
	ReadFile(name string) ([]byte, error)
	// OpenFile opens a file (used for new temporary files and lock files).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// Remove removes a file.
	Remove(name string) error
	// Mkdir creates a directory.
	Mkdir(name string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat describes a file.
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

func (OSFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}
func (OSFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (OSFS) Remove(name string) error                   { return os.Remove(name) }
func (OSFS) Mkdir(name string, perm fs.FileMode) error  { return os.Mkdir(name, perm) }
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (OSFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }

// SyncDir fsyncs a directory, making renames and removals inside it durable.
func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// SyncFS flushes the whole file system holding name (syncfs(2)): one call makes a batch of
// removals durable, however many directories they touched.
func (OSFS) SyncFS(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
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
// since the last check through f), each failure once. A sync of the whole file system
// (syncfs) does not report it to f: the kernel records a write-back error on the file and on
// its file system, and syncfs reports the file system's record once to the descriptor it was
// called through, whatever files the error concerned, so an error recorded before that
// descriptor was opened, or already reported to another caller, is not seen again there.
// After a syncfs that succeeded, CheckWriteback on each file it carried tells whether that
// file's data reached storage, without another flush: sync_file_range(2) with
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
