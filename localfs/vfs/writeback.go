package vfs

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// An overwrite made durable by another file's flush.
//
// A sync costs a device cache flush; two files synced one after the other cost two. When one is
// only overwritten in place (its size and blocks made durable when it was created), its new
// bytes need no metadata: written to the device and waited for without a flush (WriteBack),
// they become durable with the flush of the next sync of any file on the device, if it starts
// after WriteBack returned. The FileLedger uses it for the capacity record an admission
// rewrites beside the row it creates: one flush instead of two (localfs, "syncer").
//
// It holds only where an overwrite is written back in place and every fsync ends with a device
// cache flush: ext2, ext3 and ext4 (one driver), unless mounted with data=journal (data goes
// through the journal, whose commits this does not cover). Not on NFS (EFS): a write-back there
// is an unstable WRITE that only a COMMIT of that file makes durable. Not on XFS or Btrfs: an
// extent shared by a reflink copy (cp makes them by default) is copied on write, which is
// metadata. Everywhere else FlushCoversWriteBack answers false, and each file is synced itself.

// WriteBackFS is a file system that decides FlushCoversWriteBack itself (a wrapper, a model).
type WriteBackFS interface {
	FlushCoversWriteBack(dir string) bool
}

// WriteBacker is a file that writes back through something other than its descriptor.
type WriteBacker interface {
	WriteBack() error
}

// WriteStarter is a file that starts its write-back through something other than its descriptor.
type WriteStarter interface {
	StartWriteBack() error
}

// FlushCoversWriteBack reports whether, on the file system holding dir, bytes overwritten in
// place (size and blocks durable) and written back are made durable by any later sync's flush.
func FlushCoversWriteBack(fsys FS, dir string) bool {
	if w, ok := fsys.(WriteBackFS); ok {
		return w.FlushCoversWriteBack(dir)
	}
	return false
}

// FlushCoversWriteBack implements WriteBackFS: true on ext2, ext3 and ext4 unless mounted with
// data=journal, as /proc/self/mountinfo shows the mount holding dir; false when unreadable.
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
		sep := 6 + slices.Index(fields[6:], "-") // the optional fields end at "-"
		if sep < 6 || sep+3 >= len(fields) {
			return false
		}
		ext := slices.Contains([]string{"ext2", "ext3", "ext4"}, fields[sep+1])
		return ext && !slices.Contains(strings.Split(fields[sep+3], ","), "data=journal")
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

// StartWriteBack starts writing f's dirty pages to the device without waiting:
// sync_file_range(2) with SYNC_FILE_RANGE_WRITE alone, a hint so that f's write can overlap
// another's; it makes nothing durable, and the caller still syncs f. Without a WAIT flag it
// does not look at f's record of write-back errors, so it cannot take from the sync that
// follows an error that sync must report; its own errors (ENOSPC, EIO) are answered. A wrapped
// file that is not a WriteStarter is left alone: a hint means nothing to a model.
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
