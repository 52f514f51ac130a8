package vfs

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteBackMount(t *testing.T) {
	const info = `21 26 0:20 / /proc rw,relatime - proc proc rw
26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 26 254:16 / /journal rw,relatime shared:1 - ext4 /dev/vdb rw,data=journal
31 26 254:32 / /srv/xfs rw,relatime - xfs /dev/vdc rw,attr2
32 26 0:45 / /mnt/efs rw,relatime - nfs4 fs-1.efs.example:/ rw,vers=4.1
33 26 254:48 / /old rw - ext3 /dev/vdd rw,errors=remount-ro,data=ordered
34 26 254:64 / /broken rw - ext4
`
	for _, c := range []struct {
		major, minor uint32
		want         bool
		why          string
	}{
		{254, 0, true, "ext4, default data=ordered"},
		{254, 16, false, "data=journal"},
		{254, 32, false, "xfs: a reflinked extent is copied on write"},
		{0, 45, false, "nfs: a write-back is an unstable WRITE"},
		{254, 48, true, "ext3 with data=ordered"},
		{254, 64, false, "a line without its super options"},
		{9, 9, false, "a device not mounted"},
	} {
		got := writeBackMount(bufio.NewScanner(strings.NewReader(info)), c.major, c.minor)
		if got != c.want {
			t.Errorf("%d:%d (%s): %v, want %v", c.major, c.minor, c.why, got, c.want)
		}
	}
}

// On this machine: the answer for a temporary folder is whatever its mount says; an OS file
// written over in place writes back without error either way.
func TestWriteBackOfAnOSFile(t *testing.T) {
	dir := t.TempDir()
	t.Logf("the flush of a sync covers a write-back in %s: %v", dir, OSFS{}.FlushCoversWriteBack(dir))
	if (OSFS{}).FlushCoversWriteBack(filepath.Join(dir, "missing")) {
		t.Error("a missing folder is answered true")
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("record"), 0); err != nil {
		t.Fatal(err)
	}
	if err := WriteBack(f); err != nil {
		t.Fatal(err)
	}
}

// onlyWriteBack is a wrapped file with a write-back of its own and no start: StartWriteBack
// must leave it alone (a hint means nothing to a model), never reach for its descriptor.
type onlyWriteBack struct{ File }

func (onlyWriteBack) WriteBack() error { return nil }
func (onlyWriteBack) Fd() uintptr {
	panic("StartWriteBack reached for the descriptor of a wrapped file")
}

// startCounter is a wrapped file that starts its write-back itself.
type startCounter struct {
	onlyWriteBack
	started int
}

func (s *startCounter) StartWriteBack() error { s.started++; return nil }

// StartWriteBack starts an OS file's write-back, answers a failure (here a closed
// descriptor) as an error naming the file, goes through a wrapper's own start, and leaves a
// wrapper without one alone.
func TestStartWriteBack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 3*4096)); err != nil {
		t.Fatal(err)
	}
	if err := StartWriteBack(f); err != nil {
		t.Fatalf("start the write-back of an OS file: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the start: %v", err)
	}
	f.Close()
	if err := StartWriteBack(f); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("start the write-back of a closed file: %v, want an error naming %s", err, p)
	}
	if err := StartWriteBack(onlyWriteBack{}); err != nil {
		t.Fatalf("a wrapper without a start of its own: %v", err)
	}
	s := &startCounter{}
	if err := StartWriteBack(s); err != nil || s.started != 1 {
		t.Fatalf("a wrapper with a start of its own: started %d times, %v", s.started, err)
	}
}
