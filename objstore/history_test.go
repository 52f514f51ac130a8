package objstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

// TestHistories checks whole histories of the S3 ledger against MinIO: workers on handles of
// their own (each with its own HTTP transport, cache and a host clock minutes off), requests
// failed before they are sent, applied with their answer lost, answered 503, held in flight
// and landing late, handles killed mid-call, a cleaner running throughout, a sliding window of
// keys; the store is nodes whose clocks are up to two minutes apart, each handle reading the
// Dates of its own node, and a node's clock steps forward and back while requests are held.
// The clock jumps past the subject horizon four times in each history, so cleanup forgets subject
// records and rows while held and duplicated requests go on landing. Every history must be
// linearizable under the contract's model with the store's clocks as the only clocks, leave
// no older verdict posted after a newer one was called standing, and end exactly counted
// (ledgertest.RunHistories).
func TestHistories(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	cfg := ledgertest.HistoryConfig{Histories: 2, Workers: 4, Steps: 150, Keys: 10, Skew: 3 * time.Minute,
		StoreSkew: time.Minute, FaultRate: 0.02, Seed: 1, Forget: true}
	if os.Getenv("AMISS_SOAK") != "" {
		cfg.Histories, cfg.Workers, cfg.Steps = 20, 8, 600
	}
	// The test's transport lands a request at most a minute of its node's clock after it was
	// sent, held or copied; that node's clock may step back two minutes meanwhile, and the node
	// that removes a row may run two minutes ahead of the one that stamped its reservation. A
	// request life of 5m30s bounds all of it (the ledger's assumption: see Config.RequestLife),
	// and still lets rows be forgotten within a history's span of store time, so removal is
	// checked too (with the default 31 minutes no history ever removed a row).
	ledgertest.RunHistories(t, func(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
		h, err := newHarness(ctx, t)
		if err == nil {
			h.(*harness).requestLife = 5*time.Minute + 30*time.Second
			h.(*harness).gather = true // removals at whole hours, as deployed
		}
		return h, err
	}, cfg)
}
