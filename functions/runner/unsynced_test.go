package runner_test

import (
	"io/fs"

	"github.com/amiss-ci/amiss/localfs/vfs"
)

// unsyncedFS is the real file system with every flush made a no-op, for the ledgers of the
// runner's tests. Those tests judge the runner by deadlines of real time (margins of 50 ms to
// 1 s, keepers renewing every 5 ms), and on a CI machine whose disk is busy with the
// FileLedger's own crash sweeps one fsync can outlast a margin: the test then fails on the
// machine's disk, not on the runner. Nothing here stands in for a power cut, so nothing is
// lost by not flushing; what a flush keeps is the FileLedger's tests' to try.
type unsyncedFS struct{ vfs.OSFS }

func (unsyncedFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := vfs.OSFS{}.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return unsyncedFile{f}, nil
}

func (unsyncedFS) SyncDir(string) error             { return nil }
func (unsyncedFS) SyncFS(string) error              { return nil }
func (unsyncedFS) CheckJournal(string) error        { return nil }
func (unsyncedFS) FlushCoversWriteBack(string) bool { return false }

type unsyncedFile struct{ vfs.File }

func (unsyncedFile) Sync() error           { return nil }
func (unsyncedFile) WriteBack() error      { return nil }
func (unsyncedFile) StartWriteBack() error { return nil }
func (unsyncedFile) CheckWriteback() error { return nil }
