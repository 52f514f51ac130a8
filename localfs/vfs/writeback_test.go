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
