package localfs_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/faultfs"
)

// harness runs the conformance suite on a root in a temporary folder, every handle opened
// through its own fault-injecting file system (one per "process").
type harness struct {
	dir   string
	count *faultfs.Counter

	mu      sync.Mutex
	handles []*faultfs.FS
	listing faultfs.Rule
}

func newHarness(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
	return &harness{dir: filepath.Join(t.TempDir(), "root"), count: faultfs.NewCounter()}, nil
}

func (h *harness) Open(ctx context.Context, limits ledger.Limits, o ledgertest.Options) (ledger.Ledger, error) {
	fsys := faultfs.New(localfs.OSFS{}, h.count)
	h.mu.Lock()
	h.handles = append(h.handles, fsys)
	if h.listing != nil {
		fsys.SetRule("list", h.listing)
	}
	h.mu.Unlock()
	return localfs.Open(ctx, h.dir, localfs.Config{
		Limits: limits, Clock: o.Clock, FS: fsys, Create: true,
		StrandedAfter: o.StrandedAfter, CleanupBatch: o.CleanupBatch, LockWait: 300 * time.Millisecond,
	})
}

func (h *harness) Ops() ledgertest.OpCount {
	c := h.count.Snapshot()
	return ledgertest.OpCount{Ops: c.Total, Listings: c.Listings}
}

func (h *harness) ResetOps() { h.count.Reset() }

func (h *harness) CrashAfter(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.handles {
		if n < 0 {
			f.SetRule("crash", nil)
		} else {
			f.SetRule("crash", faultfs.CrashAfter(n, false))
		}
	}
}

func (h *harness) FailListings(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listing = nil
	if n >= 0 {
		h.listing = faultfs.FailListingsAfter(n)
	}
	for _, f := range h.handles {
		f.SetRule("list", h.listing)
	}
}

func (h *harness) DamageRow(ctx context.Context, key ledger.Key) error {
	p := filepath.Join(h.dir, localfs.RowsDir, key.String()[:2], key.String()+".state")
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	data[len(data)/2] ^= 0x40
	return os.WriteFile(p, data, 0o600)
}

func (h *harness) HoldMaintenance(ctx context.Context) (func(), error) {
	return localfs.HoldMaintenanceForTest(ctx, h.dir)
}

func (h *harness) Resolution() time.Duration { return 0 }

func (h *harness) Close() error { return nil }

func TestConformance(t *testing.T) {
	ledgertest.RunConformanceTests(t, newHarness)
}
