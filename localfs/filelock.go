package localfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
	"golang.org/x/sys/unix"
)

// A fileLock pairs an in-process semaphore with an advisory lock on a file. flock(2) and fcntl(2)
// do not separate one process's goroutines (and over NFS, where flock is carried by fcntl locks,
// closing any descriptor of the file drops the process's lock), so a process keeps one
// descriptor and one semaphore per lock file, however many handles it opens on the root.
type fileLock struct {
	path string
	sem  chan struct{}
	f    File
	refs int
}

var (
	lockTableMu sync.Mutex
	lockTable   = map[string]*fileLock{}
)

// acquireRef returns the process's lock for path, opening its file on first use.
func acquireRef(fsys FS, path string) (*fileLock, error) {
	lockTableMu.Lock()
	defer lockTableMu.Unlock()
	if l, ok := lockTable[path]; ok {
		l.refs++
		return l, nil
	}
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, unavailable(err, "open lock", path)
	}
	l := &fileLock{path: path, sem: make(chan struct{}, 1), f: f, refs: 1}
	lockTable[path] = l
	return l, nil
}

func (l *fileLock) unref() {
	lockTableMu.Lock()
	defer lockTableMu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(lockTable, l.path)
		l.f.Close()
	}
}

// lock takes the lock within wait; a wait that runs out answers ledger.ErrBusy, never hangs.
func (l *fileLock) lock(ctx context.Context, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	select {
	case l.sem <- struct{}{}:
	case <-deadline.C:
		return fmt.Errorf("%w: waited %s for %s in this process", ledger.ErrBusy, wait, l.path)
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for %s: %v", ledger.ErrBusy, l.path, ctx.Err())
	}
	backoff := 50 * time.Microsecond
	for {
		err := vfs.Flock(l.f, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			<-l.sem
			return unavailable(err, "flock", l.path)
		}
		select {
		case <-deadline.C:
			<-l.sem
			return fmt.Errorf("%w: waited %s for %s held by another process", ledger.ErrBusy, wait, l.path)
		case <-ctx.Done():
			<-l.sem
			return fmt.Errorf("%w: waiting for %s: %v", ledger.ErrBusy, l.path, ctx.Err())
		case <-time.After(backoff):
		}
		if backoff < 5*time.Millisecond {
			backoff *= 2
		}
	}
}

func (l *fileLock) unlock() {
	// Unlocking cannot fail in a way we could act on; a process that dies releases it anyway.
	_ = vfs.Flock(l.f, unix.LOCK_UN)
	<-l.sem
}

func lockFile(ctx context.Context, l *fileLock, wait time.Duration) (func(), error) {
	if err := l.lock(ctx, wait); err != nil {
		return nil, err
	}
	return l.unlock, nil
}
