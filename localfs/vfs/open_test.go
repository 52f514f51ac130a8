package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The raw opens answer what os.OpenFile and os.ReadFile answer: the same errors (matched with
// errors.Is), the same bytes, and descriptors that are blocking and closed on exec.
func TestRawOpensAnswerAsTheOSPackageDoes(t *testing.T) {
	dir := t.TempDir()
	var o OSFS
	missing := filepath.Join(dir, "missing")
	if _, err := o.ReadFile(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
	}
	var pe *os.PathError
	if _, err := o.OpenFile(missing, os.O_WRONLY, 0); !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
		t.Fatalf("OpenFile of a missing file: %v, want an *os.PathError naming it, matching fs.ErrNotExist", err)
	}
	p := filepath.Join(dir, "f")
	f, err := o.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Fatalf("descriptor status flags %#x (%v), want blocking", fl, err)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor flags %#x (%v), want FD_CLOEXEC", fl, err)
	}
	for _, size := range []int{0, 1, 4095, 4096, 70_000} {
		want := bytes.Repeat([]byte{byte(size)}, size)
		if _, err := f.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			t.Fatal(err)
		}
		got, err := o.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadFile of %d bytes: %d bytes, %v", size, len(got), err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", info.Mode(), err)
	}
	if _, err := o.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive create of an existing file: %v, want fs.ErrExist", err)
	}
	if _, err := o.ReadFile(dir); err == nil {
		t.Fatal("ReadFile of a folder answered no error")
	}
	if err := o.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := o.SyncDir(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir of a missing folder: %v, want fs.ErrNotExist", err)
	}
	if err := o.SyncDir(p); !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("SyncDir of a file: %v, want ENOTDIR", err)
	}
	if err := o.SyncFS(dir); err != nil {
		t.Fatal(err)
	}
}
