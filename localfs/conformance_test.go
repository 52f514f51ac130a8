package localfs_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// harness runs the conformance suite on a root in a temporary folder, every handle opened
// through its own fault-injecting file system (one per "process").
type harness struct {
	dir   string
	count *faultfs.Counter
	// base is the file system under the faults: the real one, or the EFS model over it.
	base localfs.FS

	mu      sync.Mutex
	handles []*faultfs.FS
	listing faultfs.Rule
	faults  faultCounts
}

// faultCounts counts injected faults by kind.
type faultCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *faultCounts) add(kind string) {
	f.mu.Lock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[kind]++
	f.mu.Unlock()
}

func (f *faultCounts) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.n {
		out[k] = v
	}
	return out
}

// randomFaults is the rule of a handle opened with a fault plan: each mutating operation is
// hit with the plan's rate, failing before or after its effect, or killing the handle (as
// the process dying there) before or after the effect.
func randomFaults(plan ledgertest.FaultPlan, counts *faultCounts) faultfs.Rule {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(plan.Seed, 0x5eed))
	return func(op faultfs.Op, path string) faultfs.Action {
		if !op.Mutating() {
			return faultfs.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() >= plan.Rate {
			return faultfs.Pass
		}
		kinds := []struct {
			name string
			a    faultfs.Action
		}{{"fail-before", faultfs.FailBefore}, {"fail-after", faultfs.FailAfter}, {"crash", faultfs.Crash},
			{"crash-after-effect", faultfs.CrashAfterEffect}}
		k := kinds[rng.IntN(len(kinds))]
		counts.add(k.name)
		return k.a
	}
}

func newHarness(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
	return &harness{dir: filepath.Join(t.TempDir(), "root"), count: faultfs.NewCounter(), base: localfs.OSFS{}}, nil
}

// newEFSHarness is newHarness over the EFS model (vfs.Latency) with a twentieth of EFS's round
// trips: a root on it takes EFS's paths (no one-flush round, no journal probe) on this disk.
func newEFSHarness(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
	efs := &vfs.Latency{FS: localfs.OSFS{}, Lookup: 50 * time.Microsecond, Change: 135 * time.Microsecond, Sync: 135 * time.Microsecond}
	return &harness{dir: filepath.Join(t.TempDir(), "root"), count: faultfs.NewCounter(), base: efs}, nil
}

func (h *harness) Open(ctx context.Context, limits ledger.Limits, o ledgertest.Options) (ledger.Ledger, error) {
	fsys := faultfs.New(h.base, h.count)
	h.mu.Lock()
	h.handles = append(h.handles, fsys)
	if h.listing != nil {
		fsys.SetRule("list", h.listing)
	}
	h.mu.Unlock()
	if o.Faults != nil {
		fsys.SetRule("random", randomFaults(*o.Faults, &h.faults))
	}
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
	return damageFile(filepath.Join(h.dir, localfs.RowsDir, key.String()[:2], key.String()+".state"))
}

func (h *harness) DamageSubject(ctx context.Context, key ledger.SubjectKey) error {
	return damageFile(filepath.Join(h.dir, localfs.SubjectsDir, key.String()[:2], key.String()+".state"))
}

// damageFile flips a bit in the middle of the file at p, so that it no longer decodes.
func damageFile(p string) error {
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

// SubjectMargin: none. Every decision reads the root's high-water, which cleanup persists at
// its now before it forgets a subject record.
func (h *harness) SubjectMargin() time.Duration { return 0 }

// UsesStoreClock: the FileLedger decides on its host's clock (raised by the root's high-water).
func (h *harness) UsesStoreClock() bool { return false }

func (h *harness) Faults() map[string]int { return h.faults.snapshot() }

func (h *harness) Close() error { return nil }

func TestConformance(t *testing.T) {
	ledgertest.RunConformanceTests(t, newHarness)
}

// TestConformanceOnTheEFSModel runs the suite on the EFS model's code paths.
func TestConformanceOnTheEFSModel(t *testing.T) {
	ledgertest.RunConformanceTests(t, newEFSHarness)
}
