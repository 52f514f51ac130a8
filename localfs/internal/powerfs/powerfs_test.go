package powerfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"

	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

func mustWrite(t *testing.T, f *powerfs.FS, name string, data []byte, sync bool) {
	t.Helper()
	w, err := f.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func read(f *powerfs.FS, name string) (string, bool) {
	data, err := f.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		panic(err)
	}
	return string(data), true
}

var (
	nothing    = powerfs.Persistence{Keep: powerfs.Nothing}
	everything = powerfs.Persistence{Keep: powerfs.Everything}
)

// A file's fsync keeps its data, not its name; a folder's sync keeps names, not data.
func TestWhatEachSyncKeeps(t *testing.T) {
	f := powerfs.New()
	mustWrite(t, f, "/synced-data", []byte("a"), true)
	mustWrite(t, f, "/synced-name", []byte("b"), false)
	if err := f.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, "/late", []byte("c"), true)
	f.Cut()
	if _, err := f.ReadFile("/late"); !errors.Is(err, powerfs.ErrPowerCut) {
		t.Fatalf("read after the cut: %v", err)
	}
	r := f.Recover(nothing)
	if got, ok := read(r, "/synced-data"); !ok || got != "a" {
		t.Errorf("synced data and name: %q %v", got, ok)
	}
	if got, ok := read(r, "/synced-name"); !ok || got != "" {
		t.Errorf("synced name, unsynced data: %q %v, want an empty file", got, ok)
	}
	if _, ok := read(r, "/late"); ok {
		t.Errorf("a name made after the folder's sync was kept")
	}
	r = f.Recover(everything)
	if got, _ := read(r, "/late"); got != "c" {
		t.Errorf("keep everything: %q", got)
	}
}

// A rename not made durable comes back as the old name with the old data; after syncfs the
// new one stays.
func TestRenameNeedsTheFolderSync(t *testing.T) {
	f := powerfs.New()
	mustWrite(t, f, "/x", []byte("old"), true)
	f.SyncAll()
	mustWrite(t, f, "/x.tmp", []byte("new"), true)
	if err := f.Rename("/x.tmp", "/x"); err != nil {
		t.Fatal(err)
	}
	f.Cut()
	r := f.Recover(nothing)
	if got, _ := read(r, "/x"); got != "old" {
		t.Errorf("lost rename: /x is %q", got)
	}
	if _, ok := read(r, "/x.tmp"); ok {
		t.Errorf("the unsynced temporary name was kept")
	}
	// In order, a rename is whole (never the new data under both names), and the creation
	// of the temporary name comes before it: three outcomes, each met.
	seen := map[string]bool{}
	for seed := range uint64(50) {
		r := f.Recover(powerfs.Persistence{Keep: powerfs.Random, Seed: seed, Ordered: true})
		_, tmp := read(r, "/x.tmp")
		got, _ := read(r, "/x")
		if got == "new" && tmp {
			t.Fatalf("seed %d: ordered recovery kept half a rename", seed)
		}
		seen[fmt.Sprintf("%s/%v", got, tmp)] = true
	}
	if len(seen) != 3 {
		t.Errorf("ordered recoveries met %v, want all three of old/false, old/true, new/false", seen)
	}
}

// Unsynced writes are kept or lost by sectors; the count models the order of the changes.
func TestTornWrites(t *testing.T) {
	f := powerfs.New()
	w, err := f.OpenFile("/f", os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte{'o'}, 4*powerfs.Sector)
	if _, err := w.Write(old); err != nil {
		t.Fatal(err)
	}
	f.SyncAll()
	if _, err := w.WriteAt(bytes.Repeat([]byte{'n'}, 4*powerfs.Sector), 0); err != nil {
		t.Fatal(err)
	}
	f.Cut()
	torn := false
	for seed := range uint64(20) {
		got, _ := read(f.Recover(powerfs.Persistence{Keep: powerfs.Random, Seed: seed}), "/f")
		if len(got) != len(old) {
			t.Fatalf("size changed: %d", len(got))
		}
		for s := 0; s < len(got); s += powerfs.Sector {
			sec := got[s : s+powerfs.Sector]
			if sec != string(old[:powerfs.Sector]) && sec != string(bytes.Repeat([]byte{'n'}, powerfs.Sector)) {
				t.Fatalf("sector %d torn inside: %q", s/powerfs.Sector, sec)
			}
		}
		if bytes.Contains([]byte(got), []byte("on")) || bytes.Contains([]byte(got), []byte("no")) {
			torn = true
		}
	}
	if !torn {
		t.Errorf("no recovery out of 20 kept part of the write")
	}
}

func TestCutAfterCountsChangesAndSyncs(t *testing.T) {
	f := powerfs.New()
	f.CutAfter(2)
	mustWrite(t, f, "/a", []byte("1"), false) // create, write
	if _, err := f.OpenFile("/b", os.O_WRONLY|os.O_CREATE, 0o600); !errors.Is(err, powerfs.ErrPowerCut) {
		t.Fatalf("third change: %v", err)
	}
	if got := f.Calls(); got != 2 {
		t.Fatalf("calls %d", got)
	}
	if _, ok := read(f.Recover(everything), "/b"); ok {
		t.Fatalf("the change that met the cut was made")
	}
}

// A journaling file system's recovery, at random, keeps some prefix of the changes no sync made
// durable: not only none or all of them, however many changes were synced before. (A horizon
// drawn over every change ever made, synced ones included, almost always fell before the first
// unsynced one on a file system with a long synced past: "random in order" then kept nothing.)
func TestOrderedRandomKeepsPrefixesOfTheUnsynced(t *testing.T) {
	f := powerfs.New()
	for i := range 1000 {
		mustWrite(t, f, fmt.Sprintf("/old-%d", i), nil, false)
	}
	f.SyncAll()
	const n = 10
	for i := range n {
		mustWrite(t, f, fmt.Sprintf("/new-%d", i), nil, false)
	}
	f.Cut()
	kept := map[int]int{}
	for seed := range uint64(200) {
		r := f.Recover(powerfs.Persistence{Keep: powerfs.Random, Seed: seed, Ordered: true})
		k := 0
		for i := range n {
			if _, ok := read(r, fmt.Sprintf("/new-%d", i)); ok {
				if k != i {
					t.Fatalf("seed %d: kept /new-%d without /new-%d: not a prefix", seed, i, k)
				}
				k++
			}
		}
		kept[k]++
	}
	if kept[0]+kept[n] > 200/2 {
		t.Fatalf("200 random recoveries in order kept a strict part of the unsynced changes only %d times: %v", 200-kept[0]-kept[n], kept)
	}
}

// A folder lost on its own: every other folder's changes are kept, that one's none, so a later
// change survives an earlier one made in another folder.
func TestLoseOneFolder(t *testing.T) {
	f := powerfs.New()
	for _, d := range []string{"/a", "/b"} {
		if err := f.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.SyncAll()
	mustWrite(t, f, "/a/first", []byte("1"), true)
	mustWrite(t, f, "/b/second", []byte("2"), true)
	if got := f.DirtyFolders(); len(got) != 2 || got[0] != "/a" || got[1] != "/b" {
		t.Fatalf("dirty folders %v", got)
	}
	f.Cut()
	r := f.Recover(powerfs.Persistence{Keep: powerfs.Everything, LoseFolder: "/a"})
	if _, ok := read(r, "/a/first"); ok {
		t.Errorf("the lost folder's change was kept")
	}
	if got, ok := read(r, "/b/second"); !ok || got != "2" {
		t.Errorf("the other folder's later change: %q %v", got, ok)
	}
}

// Bytes written back (File.WriteBack) are durable only once a later sync of anything flushes,
// and only within the file's durable size: a write-back carries no size change.
func TestWriteBackIsDurableWithTheNextFlush(t *testing.T) {
	setup := func(t *testing.T) (*powerfs.FS, interface {
		WriteAt([]byte, int64) (int, error)
		WriteBack() error
	}) {
		t.Helper()
		f := powerfs.New()
		mustWrite(t, f, "/record", []byte("old-old-"), true)
		if err := f.SyncDir("/"); err != nil {
			t.Fatal(err)
		}
		w, err := f.OpenFile("/record", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		wb, ok := w.(interface {
			WriteAt([]byte, int64) (int, error)
			WriteBack() error
		})
		if !ok {
			t.Fatal("a powerfs file does not write back")
		}
		return f, wb
	}
	t.Run("no flush follows", func(t *testing.T) {
		f, w := setup(t)
		if _, err := w.WriteAt([]byte("new-new-"), 0); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteBack(); err != nil {
			t.Fatal(err)
		}
		f.Cut()
		if got, _ := read(f.Recover(nothing), "/record"); got != "old-old-" {
			t.Errorf("written back, never flushed, keep nothing: %q", got)
		}
		if got, _ := read(f.Recover(everything), "/record"); got != "new-new-" {
			t.Errorf("keep everything: %q", got)
		}
	})
	t.Run("another file's sync flushes", func(t *testing.T) {
		f, w := setup(t)
		if _, err := w.WriteAt([]byte("new-new-and-longer"), 0); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteBack(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte("late"), 0); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, f, "/other", []byte("x"), true)
		f.Cut()
		if got, _ := read(f.Recover(nothing), "/record"); got != "new-new-" {
			t.Errorf("after another file's fsync: %q, want the written-back bytes within the old size", got)
		}
		if got, _ := read(f.Recover(everything), "/record"); got != "latenew-and-longer" {
			t.Errorf("keep everything: %q", got)
		}
	})
	t.Run("written back after the flush", func(t *testing.T) {
		f, w := setup(t)
		if _, err := w.WriteAt([]byte("new-new-"), 0); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, f, "/other", []byte("x"), true)
		if err := w.WriteBack(); err != nil {
			t.Fatal(err)
		}
		f.Cut()
		if got, _ := read(f.Recover(nothing), "/record"); got != "old-old-" {
			t.Errorf("flushed before its write-back: %q", got)
		}
	})
	t.Run("a folder's sync and syncfs flush too", func(t *testing.T) {
		for _, sync := range []func(*powerfs.FS) error{
			func(f *powerfs.FS) error { return f.SyncDir("/") },
			func(f *powerfs.FS) error { return f.SyncFS("/") },
		} {
			f, w := setup(t)
			if _, err := w.WriteAt([]byte("new-new-"), 0); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteBack(); err != nil {
				t.Fatal(err)
			}
			if err := sync(f); err != nil {
				t.Fatal(err)
			}
			f.Cut()
			if got, _ := read(f.Recover(nothing), "/record"); got != "new-new-" {
				t.Errorf("after a sync: %q", got)
			}
		}
	})
}
