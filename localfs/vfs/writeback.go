package vfs

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// An overwrite made durable by another file's flush.
//
// A sync costs a cache flush of the device; two files synced one after the other cost two.
// When one of them is only overwritten in place (its size and its blocks were made durable
// when it was created, and no write changes them), its new bytes need no metadata: written
// to the device and waited for, without a flush (WriteBack), they become durable with the
// flush of the next sync of any file on the same device, which must start after WriteBack
// returned. The FileLedger uses it for the capacity record an admission rewrites beside the
// row it creates: one flush instead of two (localfs, "syncer").
//
// It holds only where the file system writes an overwrite back in place and every fsync
// ends with a flush of the device cache: ext2, ext3 and ext4 (one driver), unless mounted
// with data=journal (data goes through the journal, whose commits this reasoning does not
// cover). Not on NFS (EFS): a write-back there is an unstable WRITE that only a COMMIT of
// that file makes durable. Not on XFS or Btrfs: an extent shared by a reflink copy (cp
// makes them by default on both) is copied on write, which is metadata. Everywhere else
// FlushCoversWriteBack answers false, and the ledger syncs each file itself.

// WriteBackFS is a file system that decides FlushCoversWriteBack itself (a wrapper, a model).
type WriteBackFS interface {
	FlushCoversWriteBack(dir string) bool
}

// WriteBacker is a file that writes back through something other than its descriptor.
type WriteBacker interface {
	WriteBack() error
}

// WriteStarter is a file that starts its write-back through something other than its
// descriptor (StartWriteBack).
type WriteStarter interface {
	StartWriteBack() error
}

// FlushCoversWriteBack reports whether, on the file system holding dir, bytes overwritten in
// place in a file whose size and blocks are durable, once WriteBack returns, are made
// durable by the flush of any later sync on that file system (see above).
func FlushCoversWriteBack(fsys FS, dir string) bool {
	if w, ok := fsys.(WriteBackFS); ok {
		return w.FlushCoversWriteBack(dir)
	}
	return false
}

// FlushCoversWriteBack implements WriteBackFS for the real file system: true on ext2, ext3
// and ext4 unless mounted with data=journal, as /proc/self/mountinfo shows the mount
// holding dir; false when that cannot be read.
func (OSFS) FlushCoversWriteBack(dir string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	return writeBackMount(bufio.NewScanner(f), unix.Major(st.Dev), unix.Minor(st.Dev))
}

// writeBackMount reads mountinfo lines (proc(5)) and answers for the device major:minor.
func writeBackMount(lines *bufio.Scanner, major, minor uint32) bool {
	dev := fmt.Sprintf("%d:%d", major, minor)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) < 7 || fields[2] != dev {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			return false
		}
		switch fields[sep+1] {
		case "ext2", "ext3", "ext4":
		default:
			return false
		}
		for _, opt := range strings.Split(fields[sep+3], ",") {
			if opt == "data=journal" {
				return false
			}
		}
		return true
	}
	return false
}

// WriteBack writes f's dirty pages to the device and waits for them, without flushing the
// device's cache: sync_file_range(2) with SYNC_FILE_RANGE_WAIT_BEFORE, _WRITE and
// _WAIT_AFTER, which also reports a failure to write f back since it was opened. Nothing is
// durable until a later sync flushes (FlushCoversWriteBack says when that suffices).
func WriteBack(f File) error {
	if w, ok := f.(WriteBacker); ok {
		return w.WriteBack()
	}
	flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	if err := unix.SyncFileRange(int(f.Fd()), 0, 0, flags); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: fileName(f), Err: err}
	}
	return nil
}

// StartWriteBack starts writing f's dirty pages to the device and returns without waiting:
// sync_file_range(2) with SYNC_FILE_RANGE_WRITE alone. It is a hint, so that f's write can
// overlap another's; it makes nothing durable, and the caller still syncs f. Without a WAIT
// flag the call does not look at f's record of write-back errors, so it cannot take from the
// sync that follows an error that sync must report; an error it answers itself (ENOSPC from
// allocating blocks, EIO) is answered as such. A wrapped file that is not a WriteStarter is
// left alone: a hint means nothing to a model.
func StartWriteBack(f File) error {
	if w, ok := f.(WriteStarter); ok {
		return w.StartWriteBack()
	}
	if _, ok := f.(WriteBacker); ok {
		return nil
	}
	if err := unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: fileName(f), Err: err}
	}
	return nil
}
