package localfs_test

import (
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

// TestHistories checks whole histories of the FileLedger in one process: workers on handles
// of their own, with clocks minutes apart that step, crashes and failures before and after
// the effect of file operations, a cleaner running throughout, a sliding window of keys; every
// history must be linearizable under the contract's model and end in a legible, exactly
// counted root (ledgertest.RunHistories).
func TestHistories(t *testing.T) {
	t.Parallel()
	ledgertest.RunHistories(t, newHarness, ledgertest.HistoryConfig{
		Histories: 3, Workers: 4, Steps: 250, Keys: 12, Skew: 2 * time.Minute, FaultRate: 0.01, Seed: 1,
	})
}
