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
// keys. Every history must be linearizable under the contract's model with the store's clock
// as the only clock, and end exactly counted (ledgertest.RunHistories).
func TestHistories(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	cfg := ledgertest.HistoryConfig{Histories: 2, Workers: 4, Steps: 150, Keys: 10, Skew: 3 * time.Minute, FaultRate: 0.02, Seed: 1}
	if os.Getenv("AMISS_SOAK") != "" {
		cfg.Histories, cfg.Workers, cfg.Steps = 20, 8, 600
	}
	// The test's transport lands a request at most a minute (of the store's clock) after it
	// was sent, held or copied: a request life of 2 minutes bounds it, so rows are forgotten
	// within a history's span of store time and removal is checked too (with the default 31
	// minutes no history ever removed a row).
	ledgertest.RunHistories(t, func(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
		h, err := newHarness(ctx, t)
		if err == nil {
			h.(*harness).requestLife = 2 * time.Minute
		}
		return h, err
	}, cfg)
}
