package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestReadFileOfAZeroSizeProcFile: OSFS.ReadFile must read what os.ReadFile reads. A file whose
// stat size is 0 (Linux /proc/sys, as the comment in os.readFileContents says) must not be read one
// byte at a time: proc_sys answers a 1-byte read with the first byte and the next read (at offset
// 1) with EOF, so the raw reader returns "3" for "32768\n".
func TestReadFileOfAZeroSizeProcFile(t *testing.T) {
	var o OSFS
	checked := 0
	for _, p := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/fs/file-max", "/proc/sys/kernel/ostype"} {
		want, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		checked++
		got, err := o.ReadFile(p)
		if err != nil || string(got) != string(want) {
			t.Errorf("OSFS.ReadFile(%s) = %q, %v; os.ReadFile = %q", p, got, err, want)
		}
	}
	if checked == 0 {
		t.Fatal("no /proc/sys file readable here (Linux always has them)")
	}
}

// TestOpenFileCreateKeepsSpecialModeBits: OSFS.OpenFile with O_CREATE must create the file with the
// mode os.OpenFile would: os maps fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky to S_ISUID,
// S_ISGID and S_ISVTX (syscallMode); the raw open passes perm.Perm() and drops them.
func TestOpenFileCreateKeepsSpecialModeBits(t *testing.T) {
	dir := t.TempDir()
	perm := fs.ModeSetgid | fs.ModeSticky | 0o640
	viaOS := filepath.Join(dir, "os")
	f, err := os.OpenFile(viaOS, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	raw := filepath.Join(dir, "raw")
	g, err := OSFS{}.OpenFile(raw, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	a, err := os.Stat(viaOS)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(raw)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode() != b.Mode() {
		t.Fatalf("created with %v: os.OpenFile made %v, OSFS.OpenFile made %v", perm, a.Mode(), b.Mode())
	}
}

// TestRawErrorsAndDescriptorsMatchOS: every error the raw helpers answer is the *os.PathError the
// os package answers for the same call: same Op, same Path, same errno (so errors.Is on
// fs.ErrNotExist, fs.ErrExist, ENOTDIR, EISDIR, ELOOP... holds), and no descriptor is left open on
// any path.
func TestRawErrorsAndDescriptorsMatchOS(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	linkToDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(dir, linkToDir); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("n", 300))
	var o OSFS
	type call struct {
		what     string
		raw, std func() error
	}
	open := func(p string, flag int) call {
		return call{"OpenFile " + p, func() error {
			f, err := o.OpenFile(p, flag, 0o600)
			if err == nil {
				f.Close()
			}
			return err
		}, func() error {
			f, err := os.OpenFile(p, flag, 0o600)
			if err == nil {
				f.Close()
			}
			return err
		}}
	}
	read := func(p string) call {
		return call{"ReadFile " + p, func() error { _, err := o.ReadFile(p); return err },
			func() error { _, err := os.ReadFile(p); return err }}
	}
	calls := []call{
		open(filepath.Join(dir, "missing"), os.O_WRONLY),
		open(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL),
		open(dir, os.O_WRONLY),
		open(filepath.Join(file, "x"), os.O_RDONLY),
		open(loop, os.O_RDONLY),
		open(long, os.O_RDONLY),
		open(dir+"/a\x00b", os.O_RDONLY),
		read(filepath.Join(dir, "missing")),
		read(dir),
		read(filepath.Join(file, "x")),
		read(loop),
		read(long),
		{"SyncDir missing", func() error { return o.SyncDir(filepath.Join(dir, "missing")) },
			func() error { d, err := os.Open(filepath.Join(dir, "missing")); d.Close(); return err }},
		{"SyncFS missing", func() error { return o.SyncFS(filepath.Join(dir, "missing")) },
			func() error { d, err := os.Open(filepath.Join(dir, "missing")); d.Close(); return err }},
	}
	before := openFDs(t)
	for _, c := range calls {
		rawErr, stdErr := c.raw(), c.std()
		var rp, sp *os.PathError
		if !errors.As(rawErr, &rp) || !errors.As(stdErr, &sp) {
			t.Errorf("%s: raw %v, os %v: want both *os.PathError", c.what, rawErr, stdErr)
			continue
		}
		var re, se unix.Errno
		errors.As(rp.Err, &re)
		errors.As(sp.Err, &se)
		if rp.Op != sp.Op || rp.Path != sp.Path || re != se || rawErr.Error() != stdErr.Error() {
			t.Errorf("%s: raw %q (%T), os %q (%T)", c.what, rawErr, rp.Err, stdErr, sp.Err)
		}
	}
	// The fsync error path of SyncDir (procfs folders have no fsync: EINVAL) answers what
	// os.Open and File.Sync answered, and closes its descriptor.
	if d, err := os.Open("/proc"); err == nil {
		stdErr := d.Sync()
		d.Close()
		rawErr := o.SyncDir("/proc")
		if stdErr == nil || rawErr == nil || rawErr.Error() != stdErr.Error() {
			t.Errorf("SyncDir(/proc): raw %v, os %v", rawErr, stdErr)
		}
	}
	if err := o.SyncDir(linkToDir); err != nil {
		t.Errorf("SyncDir of a symbolic link to a folder: %v", err)
	}
	if err := o.SyncFS(file); err != nil {
		t.Errorf("SyncFS of a file: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before the calls, %d after", before, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
