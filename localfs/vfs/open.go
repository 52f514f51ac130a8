package vfs

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The ledger opens several files per operation, regular files or folders, none of which the
// runtime's network poller can wait on. os.OpenFile still tries: it switches each descriptor to
// non-blocking mode, fails to register it with epoll, and switches it back (four fcntl calls
// and one epoll_ctl per open, measured with strace). The helpers below open with open(2) and
// wrap the descriptor with os.NewFile, which only asks whether it is non-blocking (it is not):
// the same blocking *os.File, five system calls fewer per open. Errors are *os.PathError values
// wrapping the errno, as os.OpenFile answers, so errors.Is(err, fs.ErrNotExist) and the like hold.

// open opens name with O_CLOEXEC added, retrying on EINTR.
func open(name string, flag int, perm fs.FileMode) (fd int, err error) {
	if err = ignoringEINTR(func() (err error) {
		fd, err = unix.Open(name, flag|unix.O_CLOEXEC, syscallMode(perm))
		return err
	}); err != nil {
		return -1, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return fd, nil
}

// syscallMode is perm as open(2) takes it: the permission bits, and the setuid, setgid and
// sticky bits mapped onto theirs (as os.OpenFile maps them).
func syscallMode(perm fs.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&fs.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if perm&fs.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if perm&fs.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

// openFile is os.OpenFile for regular files without the poller's round trips.
func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := open(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readFile is os.ReadFile on a raw descriptor: open, fstat for the size, read to the end, close.
func readFile(name string) ([]byte, error) {
	fd, err := open(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	// One byte more than the size, so a file that has not grown is read to its end in two
	// calls; and at least 512, as os.ReadFile reads: a file whose size shows as 0 may hold more
	// (a file under /proc/sys answers a read of one byte with one byte, then with its end).
	data := make([]byte, 0, max(st.Size+1, 512))
	for {
		n, err := unix.Read(fd, data[len(data):cap(data)])
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			unix.Close(fd)
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		data = data[:len(data)+n]
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
	if err := closeFD(fd, name); err != nil {
		return nil, err
	}
	return data, nil
}

// closeFD closes a raw descriptor and describes a failure. EINTR from close(2) on Linux means
// the descriptor is closed already: no error.
func closeFD(fd int, name string) error {
	if err := unix.Close(fd); err != nil && !errors.Is(err, unix.EINTR) {
		return &os.PathError{Op: "close", Path: name, Err: err}
	}
	return nil
}

// ignoringEINTR calls f until it answers something other than EINTR.
func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
