package vfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/localfs/vfs"
)

// probes lists the journal probe files in dir with their sizes.
func probes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), vfs.JournalProbePrefix) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = info.Size()
		}
	}
	return out
}

// TestJournalProbe: the check keeps one probe file per folder and changes its size at every
// call (a change the journal must take); a probe taken away (as debris collection does) is
// made again.
func TestJournalProbe(t *testing.T) {
	dir := t.TempDir()
	check := func() {
		t.Helper()
		if err := vfs.CheckJournal(vfs.OSFS{}, dir); err != nil {
			t.Fatalf("check on a healthy file system: %v", err)
		}
	}
	check()
	first := probes(t, dir)
	if len(first) != 1 {
		t.Fatalf("probe files after one check: %v, want one", first)
	}
	var name string
	for n := range first {
		name = n
	}
	sizes := []int64{first[name]}
	for range 3 {
		check()
		now := probes(t, dir)
		if len(now) != 1 || now[name] == sizes[len(sizes)-1] {
			t.Fatalf("after another check: %v (was %s of size %d): the probe must stay and change size", now, name, sizes[len(sizes)-1])
		}
		sizes = append(sizes, now[name])
	}
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	check()
	if again := probes(t, dir); len(again) != 1 {
		t.Fatalf("after the probe was taken away: %v, want a new one", again)
	}
}

// TestCheckWritebackOnAHealthyFile: a file written and synced has no write-back error to
// report.
func TestCheckWritebackOnAHealthyFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.CheckWriteback(f); err != nil {
		t.Fatalf("write-back check of a synced file: %v", err)
	}
}
