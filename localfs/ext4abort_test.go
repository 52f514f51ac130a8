//go:build ext4attack

package localfs_test

// An attack on a real kernel: ext4 on a loop device whose backing file lives on a small tmpfs,
// so that a journal commit can be made to fail on demand (the journal blocks past the last
// commit record lose their backing, the tmpfs is full). `make attack-ext4` runs it as root:
// scripts/ext4-journal-abort.sh makes the file system, runs TestExt4JournalAbort, remounts,
// and runs TestExt4JournalAbortRecovered. It is built only with the ext4attack tag.

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

func ext4Env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run this test through `make attack-ext4`", name)
	}
	return v
}

// failNextJournalCommit makes the next journal commit fail and has another caller (a syncfs
// on its own descriptor) run it and hear the error: ext4 aborts the journal and tells no one
// else.
func failNextJournalCommit(t *testing.T) {
	const bs = 4096
	type extent struct{ logical, physical, n int64 }
	var exts []extent
	for _, e := range strings.Split(ext4Env(t, "AMISS_EXT4_JOURNAL"), ",") {
		p := strings.Split(e, ":")
		if len(p) != 3 {
			t.Fatalf("journal extent %q: want logical:physical:length", e)
		}
		var x [3]int64
		for i := range p {
			n, err := strconv.ParseInt(p[i], 10, 64)
			if err != nil {
				t.Fatalf("journal extent %q: %v", e, err)
			}
			x[i] = n
		}
		exts = append(exts, extent{x[0], x[1], x[2]})
	}
	phys := func(l int64) int64 {
		for _, e := range exts {
			if l >= e.logical && l < e.logical+e.n {
				return e.physical + l - e.logical
			}
		}
		return -1
	}
	b, err := os.OpenFile(ext4Env(t, "AMISS_EXT4_BACKING"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The last commit record (jbd2 magic, block type 2) and its sequence.
	last, lastSeq := int64(-1), uint32(0)
	buf := make([]byte, 12)
	for l := int64(1); l < 4096 && phys(l) >= 0; l++ {
		if _, err := b.ReadAt(buf, phys(l)*bs); err != nil {
			t.Fatal(err)
		}
		if binary.BigEndian.Uint32(buf) == 0xc03b3998 && binary.BigEndian.Uint32(buf[4:]) == 2 {
			if s := binary.BigEndian.Uint32(buf[8:]); s >= lastSeq {
				last, lastSeq = l, s
			}
		}
	}
	for l := last + 1; l < 4096 && phys(l) >= 0; l++ {
		if err := unix.Fallocate(int(b.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, phys(l)*bs, bs); err != nil {
			t.Fatal(err)
		}
	}
	filler, err := os.Create(ext4Env(t, "AMISS_EXT4_FILLER"))
	if err != nil {
		t.Fatal(err)
	}
	for big := make([]byte, 1<<20); ; {
		if _, err := filler.Write(big); err != nil {
			break
		}
	}
	filler.Close()
	err = localfs.OSFS{}.SyncFS(ext4Env(t, "AMISS_EXT4_MNT"))
	t.Logf("another caller's syncfs, which ran the failing commit: %v", err)
	if err == nil {
		t.Fatal("the journal commit did not fail: the attack proves nothing")
	}
}

// TestExt4JournalAbort: admissions whose rows are renamed into place, and whose renames'
// transaction another caller's commit fails before the round that makes them durable, must
// not be answered Admitted (the round's own sync finds nothing to commit and answers success).
// With AMISS_EXT4_MODE=single, one admission and the fsync of its folder; otherwise two
// admissions sharing their rounds and a syncfs.
func TestExt4JournalAbort(t *testing.T) {
	ctx := context.Background()
	mnt := ext4Env(t, "AMISS_EXT4_MNT")
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, filepath.Join(mnt, "root"), localfs.Config{FS: fsys})
	defer l.Close()
	if err := (localfs.OSFS{}).SyncFS(mnt); err != nil {
		t.Fatal(err)
	}
	single := os.Getenv("AMISS_EXT4_MODE") == "single"
	rounds := new(sync.Map)
	if !single {
		rounds = gatherPairs(l)
		defer localfs.SetSyncGatherForTest(l, 0, 0)
	}
	var n atomic.Int32
	fsys.SetRule("abort", func(op faultfs.Op, p string) faultfs.Action {
		// Before the sync that would make the renames durable.
		if single && op == faultfs.OpSyncDir && n.Add(1) == 1 || !single && op == faultfs.OpSyncFS && n.Add(1) == 2 {
			failNextJournalCommit(t)
		}
		return faultfs.Pass
	})
	ds := []ledger.Delivery{newDelivery(time.Time{}), newDelivery(time.Time{})}
	if single {
		ds = ds[:1]
	}
	errs := make([]error, len(ds))
	outs := make([]ledger.AdmitOutcome, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := l.Admit(ctx, d)
			outs[i], errs[i] = a.Outcome, err
		}()
	}
	wg.Wait()
	if _, two := rounds.Load(2); !single && !two {
		t.Fatal("no round carried both admissions")
	}
	var admitted []string
	for i, d := range ds {
		t.Logf("admission %d (%s): %v %v", i, d.Key().Short(), outs[i], errs[i])
		if errs[i] == nil && outs[i] == ledger.Admitted {
			admitted = append(admitted, d.Key().String())
		}
	}
	if err := os.WriteFile(ext4Env(t, "AMISS_EXT4_KEYS"), []byte(strings.Join(admitted, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(admitted) > 0 {
		t.Errorf("%d admissions answered Admitted after the journal holding their renames aborted", len(admitted))
	}
}

// TestExt4JournalAbortRecovered (after the remount): every admission answered Admitted has its
// row.
func TestExt4JournalAbortRecovered(t *testing.T) {
	data, err := os.ReadFile(ext4Env(t, "AMISS_EXT4_KEYS"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localfs.Open(context.Background(), filepath.Join(ext4Env(t, "AMISS_EXT4_MNT"), "root"), localfs.Config{Limits: testLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, s := range strings.Fields(string(data)) {
		k, err := ledger.ParseKey(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Inspect(context.Background(), k); errors.Is(err, ledger.ErrUnknownDelivery) {
			t.Errorf("admission %s was answered Admitted; after the remount its row is gone", s)
		} else if err != nil {
			t.Errorf("inspect %s: %v", s, err)
		}
	}
}
