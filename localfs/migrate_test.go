package localfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// v1Root copies the format 1 fixture and makes it look as a format 1 process left it after a
// crash: an admission interrupted after its count (one slot too many, its key pending, no row)
// and a cleanup batch interrupted before it removed anything.
func v1Root(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	copyTree(t, filepath.Join("testdata", "format-v1"), dir)
	lost := ledger.NewKey("fixture", "github-sha256", "never-written")
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(localfs.CapacityFile, localfs.EncodeCapacityV1ForTest(int64(len(fixtureStates))+1, &lost, 4))
	write(localfs.BatchFile, localfs.EncodeBatchV1ForTest(5, fixtureDelivery(3).Key()))
	return dir
}

func frameVersion(t *testing.T, p string) uint16 {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return localfs.FrameVersionForTest(data)
}

// TestMigrationFromFormat1 opens a format 1 root left by a crash: the open migrates it in
// place, counting each shard's rows exactly (the interrupted admission's slot is not carried
// over), removes the format 1 records, and the root then admits exactly up to its cap.
func TestMigrationFromFormat1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := v1Root(t)
	clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits(), Clock: clock})
	if err != nil {
		t.Fatalf("open of a format 1 root: %v", err)
	}
	defer l.Close()
	if v := frameVersion(t, filepath.Join(dir, localfs.RootFile)); v != localfs.FormatVersion {
		t.Fatalf("root state of format %d after the migration", v)
	}
	for _, gone := range []string{localfs.CapacityFile, localfs.BatchFile} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after the migration: %v", gone, err)
		}
	}
	st, err := l.Stats(ctx)
	if err != nil || st.Rows != int64(len(fixtureStates)) || st.CapacityUsed != st.Rows {
		t.Fatalf("after migration: %+v %v: want %d rows, each counted once", st, err, len(fixtureStates))
	}
	if v, err := l.Verify(ctx, nil); err != nil || !v.OK() {
		t.Fatalf("verify: %v %v", err, v.Problems)
	}
	// Exactly the rest of the cap is admitted, then Full.
	for i := st.Rows; i < fixtureLimits().RecordCap; i++ {
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
	}
	if a, err := l.Admit(ctx, newDelivery(time.Time{})); err != nil || a.Outcome != ledger.Full {
		t.Fatalf("admission past the cap: %+v %v", a, err)
	}
	// A format 1 saved row is published from its report file, and rewritten as format 2 with
	// the report inline (the file beside it goes).
	saved := fixtureDelivery(2)
	report := filepath.Join(dir, localfs.RowsDir, saved.Key().String()[:2], saved.Key().String()+".report")
	if _, err := os.Stat(report); err != nil {
		t.Fatalf("fixture report: %v", err)
	}
	c := ledgertest.MustClaim(t, l, saved, ledger.Publish)
	if !strings.Contains(string(c.Staged.Report), saved.Binding.Identity) {
		t.Fatalf("published %q", c.Staged.Report)
	}
	if _, err := os.Stat(report); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("format 1 report file kept after the row was rewritten: %v", err)
	}
	state := filepath.Join(dir, localfs.RowsDir, saved.Key().String()[:2], saved.Key().String()+".state")
	if v := frameVersion(t, state); v != localfs.FormatVersion {
		t.Fatalf("rewritten row of format %d", v)
	}
	if rep, err := l.Report(ctx, saved.Key()); err != nil || string(rep) != string(c.Staged.Report) {
		t.Fatalf("report after the rewrite: %q %v", rep, err)
	}
	// The fixture's abandoned row was abandoned by a version that did not keep its report:
	// it cannot be revived, and says so.
	abandoned := fixtureDelivery(5)
	if _, err := l.Revive(ctx, abandoned.Key(), ""); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("revive of a format 1 abandoned row without its report: %v", err)
	}
	if v, err := l.Verify(ctx, nil); err != nil || !v.OK() {
		t.Fatalf("verify: %v %v", err, v.Problems)
	}
}

// TestMigrationCrashAtEveryStep kills the migration at every mutating step (before and after
// the step's effect); the next open finishes it, with every shard counted exactly.
func TestMigrationCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A clean migration's mutating steps: its 256 capacity shards are written alike, so the
	// first and last steps are all taken, and the ones between sampled.
	count := faultfs.New(localfs.OSFS{}, nil)
	l, err := localfs.Open(ctx, v1Root(t), localfs.Config{Limits: fixtureLimits(), FS: count})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	total := count.Counter().Snapshot().Mutating
	var steps []int
	for s := 0; s <= total; s++ {
		if s < 4 || s > total-12 || s%512 < 2 {
			steps = append(steps, s)
		}
	}
	points := 0
	for _, mode := range crashModes[:2] {
		for _, step := range steps {
			dir := v1Root(t)
			fsys := faultfs.New(localfs.OSFS{}, nil)
			var fired atomic.Bool
			rule := mode.rule(step)
			fsys.SetRule("inject", func(o faultfs.Op, p string) faultfs.Action {
				a := rule(o, p)
				if a != faultfs.Pass {
					fired.Store(true)
				}
				return a
			})
			l, err := localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits(), FS: fsys})
			if err == nil {
				l.Close()
			}
			if !fired.Load() {
				if err != nil {
					t.Fatalf("%s step %d: failed with nothing injected: %v", mode.name, step, err)
				}
				continue
			}
			points++
			// Every point: the next open finishes the migration, every shard counted exactly.
			// Every eighth: prepare collects what the crash left and the root verifies clean.
			open := localfs.Open
			if points%8 == 0 {
				open = localfs.Prepare
			}
			p, err := open(ctx, dir, localfs.Config{Limits: fixtureLimits()})
			if err != nil {
				t.Fatalf("%s step %d: open after the crash: %v", mode.name, step, err)
			}
			st, err := p.Stats(ctx)
			if err != nil || st.Rows != int64(len(fixtureStates)) || st.CapacityUsed != st.Rows {
				t.Fatalf("%s step %d: %+v %v", mode.name, step, st, err)
			}
			if points%8 == 0 {
				if v, err := p.Verify(ctx, nil); err != nil || !v.OK() {
					t.Fatalf("%s step %d: verify: %v %v", mode.name, step, err, v.Problems)
				}
			}
			p.Close()
		}
	}
	if points < len(steps) {
		t.Fatalf("only %d of %d steps crashed the migration", points, 2*len(steps))
	}
	t.Logf("migration of %d mutating steps interrupted at %d points", total, points)
}

// TestNewerFormatFailsClosed: a file written by a newer format (a row, a capacity shard, the
// root state) is never read as if it were this one: the operation that meets it fails with
// ErrRootMismatch naming the file, and nothing is written.
func TestNewerFormatFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{})
	defer l.Close()
	d := deliveryInShard(0x21)
	ledgertest.MustAdmit(t, l, d)
	state := filepath.Join(dir, localfs.RowsDir, "21", d.Key().String()+".state")
	if err := bumpVersion(filepath.Join(localfs.RowsDir, "21", d.Key().String()+".state"))(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(state)
	if _, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Minute); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), state) {
		t.Fatalf("claim of a newer-format row: %v", err)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatalf("a newer-format row was rewritten")
	}
	shard := filepath.Join(dir, shardFile(0x21))
	data, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, localfs.ReframeShardForTest(data, localfs.FormatVersion+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, deliveryInShard(0x21)); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), shardFile(0x21)) {
		t.Fatalf("admission into a newer-format capacity shard: %v", err)
	}
}
