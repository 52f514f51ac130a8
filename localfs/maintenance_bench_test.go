package localfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// BenchmarkCleanupStartup times what the cleanup function does when it starts (Prepare: open,
// check the capacity shards, finish a batch, collect debris within its budget) on roots
// retaining 1,000, 100,000 and 1,000,000 rows, on the local disk and with the EFS latency
// model, and reports the folder entries it listed. Set AMISS_BENCH_MAX_ROWS to skip the
// larger roots (seeding a million rows takes minutes and about 4 GB of disk).
func BenchmarkCleanupStartup(b *testing.B) {
	maxRows := 1_000_000
	if v := os.Getenv("AMISS_BENCH_MAX_ROWS"); v != "" {
		fmt.Sscan(v, &maxRows)
	}
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		if n > maxRows {
			continue
		}
		b.Run(fmt.Sprintf("retained=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "root")
			limits := benchLimits(int64(n) + 1_000_000)
			seedRoot(b, dir, limits, "old", n, time.Time{})
			for _, model := range []string{"local", "efs"} {
				var durs []time.Duration
				var listed, listings int
				for range 5 {
					count := faultfs.NewCounter()
					var base vfs.FS = OSFS{}
					if model == "efs" {
						base = vfs.EFS(OSFS{})
					}
					fsys := &listCounter{FS: faultfs.New(base, count)}
					start := time.Now()
					l, err := Prepare(context.Background(), dir, Config{Limits: limits, FS: fsys})
					if err != nil {
						b.Fatal(err)
					}
					durs = append(durs, time.Since(start))
					l.Close()
					listed, listings = fsys.entries, count.Snapshot().Listings
				}
				slices.Sort(durs)
				b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, model+"-ms")
				b.ReportMetric(float64(listed), model+"-entries-listed")
				b.ReportMetric(float64(listings), model+"-listings")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// listCounter counts the entries listed.
type listCounter struct {
	vfs.FS
	entries int
}

func (c *listCounter) ReadDir(name string) ([]os.DirEntry, error) {
	out, err := c.FS.ReadDir(name)
	c.entries += len(out)
	return out, err
}
