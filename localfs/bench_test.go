package localfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// The benchmarks measure; nothing here asserts a timing. `make bench` runs them and
// docs/benchmarks.md records the figures with the machine they ran on.

var benchSizes = []int{1_000, 10_000, 50_000, 100_000}

const benchSamples = 300

var benchEpoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func benchLimits(cap int64) ledger.Limits {
	l := ledger.DefaultLimits()
	l.RecordCap = cap
	return l
}

func benchDelivery(prefix string, i int, signedAt time.Time) ledger.Delivery {
	body := fmt.Appendf(nil, `{"after":"%040d"}`, i)
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "bench", Scheme: scheme, Identity: fmt.Sprintf("%s-%d", prefix, i),
			BodyDigest: ledger.SumBody(body)},
		Change:   fmt.Appendf(nil, `{"provider":"github","repository":"acme/app","sha":"%040d","ref":"refs/heads/main","event":"push"}`, i),
		SignedAt: signedAt,
	}
}

// seedRoot creates a root holding n retained rows: done rows, written directly in the row
// format without per-file fsync (one syncfs at the end), so a 100,000-row root takes seconds
// to build rather than the minutes of n durable lifecycles. signed rows get end-time index
// entries as Complete would write them.
func seedRoot(b *testing.B, dir string, limits ledger.Limits, prefix string, n int, signedAt time.Time) {
	b.Helper()
	ctx := context.Background()
	clock := ledger.NewManualClock(benchEpoch)
	l, err := Open(ctx, dir, Config{Limits: limits, Clock: clock, Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := l.r
	perShard := make([]int64, shardCount)
	used, quotas := make([]int64, shardCount), make([]int64, shardCount)
	for s := range shardCount {
		sh, err := r.readShard(s)
		if err != nil {
			b.Fatal(err)
		}
		used[s], quotas[s] = sh.Used, sh.Quota
	}
	for i := range n {
		d := benchDelivery(prefix, i, signedAt)
		row, _, err := ledger.NewRow(d, limits, benchEpoch, fmt.Sprintf("%032x", i))
		if err != nil {
			b.Fatal(err)
		}
		row.State = ledger.StateDone
		row.Fence = 1
		row.Attempts = 1
		row.Report = ledger.ReportRef{Digest: ledger.SumBody([]byte("r")), Size: 1, Fence: 1}
		// Charge the row as an admission would: its home shard while it has room, else the
		// first shard with room.
		charge := int(row.Key[0])
		if perShard[charge]+used[charge] >= quotas[charge] {
			charge = -1
			for s := range shardCount {
				if perShard[s]+used[s] < quotas[s] {
					charge = s
					break
				}
			}
			if charge < 0 {
				b.Fatalf("seeding %d rows: the record cap is full", n)
			}
		}
		rec := storedRow{Row: row, Shard: charge}
		data, err := encodeRow(&rec, limits)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(r.statePath(row.Key), data, 0o600); err != nil {
			b.Fatal(err)
		}
		perShard[charge]++
		if !row.Permanent {
			bucket, name := hourOf(row.RetainUntil), ledger.EndIndexName(&row)
			os.MkdirAll(filepath.Join(dir, EndedDir, bucket), 0o700)
			if err := os.WriteFile(filepath.Join(dir, EndedDir, bucket, name), nil, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	// A root in service has created its row-lock shards; so does the seeded one.
	for shard := range shardCount {
		if _, err := r.rowLock(byte(shard)); err != nil {
			b.Fatal(err)
		}
		sh, err := r.readShard(shard)
		if err != nil {
			b.Fatal(err)
		}
		sh.Used += perShard[shard]
		data, err := shardFile(sh)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(r.shardCapPath(shard), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.fs.SyncFS(dir); err != nil {
		b.Fatal(err)
	}
}

// bareReplace is the yardstick: one durable replacement of a file, as any careful program
// writes one (temporary file, write, fsync, rename, fsync of the folder).
func bareReplace(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return OSFS{}.SyncDir(filepath.Dir(path))
}

// floorWrite is the other yardstick, the floor of a durable write: 600 bytes written in place
// over a file made beforehand, and one fdatasync (no new name, no metadata).
func floorWrite(b *testing.B, path string) func() {
	b.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	data := make([]byte, 600)
	if _, err := f.WriteAt(data, 0); err != nil || f.Sync() != nil {
		b.Fatalf("floor file: %v", err)
	}
	return func() {
		if _, err := f.WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
}

// shuffled runs each of fs once, in a new random order, and appends each one's duration to
// the list of the same index: the contenders see the same disk, and none is always first.
func shuffled(durs [][]time.Duration, fs ...func()) {
	for _, i := range rand.Perm(len(fs)) {
		start := time.Now()
		fs[i]()
		durs[i] = append(durs[i], time.Since(start))
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// sample runs f and one bare durable replace (a row-sized file replaced in the root's own
// folder) benchSamples times, in a shuffled order each time, and reports both medians, their
// ratio, and f's 90th percentile. Interleaving keeps the yardstick honest on a disk whose fsync
// latency drifts.
func sample(b *testing.B, dir string, f func(i int)) {
	b.Helper()
	yard := make([]byte, 600)
	durs := make([][]time.Duration, 2)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range benchSamples {
			shuffled(durs, func() { f(n*benchSamples + i) }, func() {
				if err := bareReplace(filepath.Join(dir, "yardstick"), yard); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
	b.StopTimer()
	slices.Sort(durs[0])
	med, baseMed := median(durs[0]), median(durs[1])
	b.ReportMetric(float64(med.Microseconds()), "median-µs")
	b.ReportMetric(float64(durs[0][len(durs[0])*9/10].Microseconds()), "p90-µs")
	b.ReportMetric(float64(baseMed.Microseconds()), "replace-median-µs")
	b.ReportMetric(float64(med)/float64(baseMed), "x-replace")
	b.ReportMetric(0, "ns/op")
}

// openSeeded opens a root seeded with n retained rows under the given cap.
func openSeeded(b *testing.B, n int, recordCap int64) (*Ledger, string) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "root")
	limits := benchLimits(recordCap)
	seedRoot(b, dir, limits, "old", n, time.Time{})
	l, err := Open(context.Background(), dir, Config{Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l, dir
}

func admitAs(b *testing.B, l *Ledger, prefix string, i int, want ledger.AdmitOutcome) {
	a, err := l.Admit(context.Background(), benchDelivery(prefix, i, time.Time{}))
	if err != nil || a.Outcome != want {
		b.Fatalf("admit: %+v %v, want %v", a, err, want)
	}
}

// BenchmarkAdmit times the admission of a new row into a root retaining n rows.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("retained=%d", n), func(b *testing.B) {
			l, dir := openSeeded(b, n, int64(n)+10_000_000)
			sample(b, dir, func(i int) { admitAs(b, l, "new", i, ledger.Admitted) })
		})
	}
}

// BenchmarkRejectFull times the refusal of a new key by a root whose whole cap (n rows) is in
// use.
func BenchmarkRejectFull(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("retained=%d", n), func(b *testing.B) {
			l, dir := openSeeded(b, n, int64(n))
			sample(b, dir, func(i int) { admitAs(b, l, "new", i, ledger.Full) })
		})
	}
}

// BenchmarkAdmitScaling admits into a root retaining 1,000 rows and into one retaining
// 100,000 on the same disk, with the two yardsticks (a bare durable replace: two fsyncs; the
// floor: an in-place write and one fdatasync), in a shuffled order for every sample (a fixed
// order favoured whichever ran second), and reports the medians and their ratios.
func BenchmarkAdmitScaling(b *testing.B) {
	small, _ := openSeeded(b, 1_000, 10_000_000)
	large, _ := openSeeded(b, 100_000, 10_000_000)
	// The yardsticks write in a folder of their own: in a root's folder, their renames would
	// make that root's folder syncs (the journal probe's) carry theirs.
	dir := b.TempDir()
	floor := floorWrite(b, filepath.Join(dir, "floor"))
	yard := make([]byte, 600)
	durs := make([][]time.Duration, 4)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range benchSamples {
			shuffled(durs,
				func() { admitAs(b, small, "new", n*benchSamples+i, ledger.Admitted) },
				func() { admitAs(b, large, "new", n*benchSamples+i, ledger.Admitted) },
				func() {
					if err := bareReplace(filepath.Join(dir, "yardstick"), yard); err != nil {
						b.Fatal(err)
					}
				},
				floor)
		}
	}
	b.StopTimer()
	ds, dl, rp, fl := median(durs[0]), median(durs[1]), median(durs[2]), median(durs[3])
	b.Logf("admission p50 with 1,000 retained rows %v, with 100,000 %v: %.2fx the 1,000-row root; "+
		"against a bare replace (write, fsync, rename, folder fsync: two fsyncs, p50 %v) %.2fx and %.2fx; "+
		"against the floor (an in-place write and one fdatasync, p50 %v) %.2fx and %.2fx",
		ds, dl, float64(dl)/float64(ds), rp, float64(ds)/float64(rp), float64(dl)/float64(rp),
		fl, float64(ds)/float64(fl), float64(dl)/float64(fl))
	b.ReportMetric(float64(ds.Microseconds()), "median-1k-µs")
	b.ReportMetric(float64(dl.Microseconds()), "median-100k-µs")
	b.ReportMetric(float64(dl)/float64(ds), "x-100k/1k")
	b.ReportMetric(float64(rp.Microseconds()), "replace-median-µs")
	b.ReportMetric(float64(fl.Microseconds()), "floor-median-µs")
	b.ReportMetric(float64(ds)/float64(rp), "x-replace-1k")
	b.ReportMetric(float64(ds)/float64(fl), "x-floor-1k")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCleanup1000 times one cleanup pass removing 1,000 ended rows from a root that also
// retains n permanent rows, and reports the fsyncs the pass made (its bookkeeping: high-water,
// batch record, capacity, and one syncfs for the removals).
func BenchmarkCleanup1000(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("retained=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := filepath.Join(b.TempDir(), "root")
			limits := benchLimits(int64(n) + 10_000_000)
			seedRoot(b, dir, limits, "old", n, time.Time{})
			count := faultfs.NewCounter()
			clock := ledger.NewManualClock(benchEpoch)
			l, err := Open(ctx, dir, Config{Limits: limits, Clock: clock, FS: faultfs.New(OSFS{}, count), CleanupBatch: 1000})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var total time.Duration
			var fsyncs, removed int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				clock.Set(benchEpoch)
				seedRoot(b, dir, limits, fmt.Sprintf("ended%d", i), 1000, benchEpoch)
				clock.Set(benchEpoch.Add(limits.SignedAgeCeiling + limits.QueueCeiling + time.Hour))
				count.Reset()
				b.StartTimer()
				start := time.Now()
				rep, err := l.Cleanup(ctx, "")
				total += time.Since(start)
				b.StopTimer()
				if err != nil || len(rep.Removed) != 1000 {
					b.Fatalf("cleanup: removed %d, %v", len(rep.Removed), err)
				}
				removed += len(rep.Removed)
				fsyncs += count.Snapshot().Fsyncs
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/pass")
			b.ReportMetric(float64(fsyncs)/float64(b.N), "fsyncs/pass")
			b.ReportMetric(float64(removed)/float64(b.N), "removed/pass")
			b.ReportMetric(0, "ns/op")
		})
	}
}
