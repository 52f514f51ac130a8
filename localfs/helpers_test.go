package localfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func testLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 100_000, SignedAgeCeiling: 5 * time.Minute, QueueCeiling: time.Hour,
		FutureSkew: time.Minute, MaxChangeBytes: 4 << 10, MaxReportBytes: 8 << 10}
}

func openRoot(t testing.TB, dir string, cfg localfs.Config) *localfs.Ledger {
	t.Helper()
	if cfg.Limits == (ledger.Limits{}) {
		cfg.Limits = testLimits()
	}
	cfg.Create = true
	l, err := localfs.Open(context.Background(), dir, cfg)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return l
}

var seq atomic.Int64

func newDelivery(signedAt time.Time) ledger.Delivery {
	n := seq.Add(1)
	body := fmt.Appendf(nil, `{"n":%d}`, n)
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "r", Scheme: scheme, Identity: fmt.Sprintf("d-%d-%d", n, time.Now().UnixNano()),
			BodyDigest: ledger.SumBody(body)},
		Change:   fmt.Appendf(nil, `{"sha":"%040d"}`, n),
		SignedAt: signedAt,
	}
}

// shardFile is the capacity shard record of row folder s, relative to the root.
func shardFile(s byte) string {
	return filepath.Join(localfs.RowsDir, fmt.Sprintf("%02x", s), localfs.ShardCapacityFile)
}

// deliveryInShard makes a new permanent delivery whose key falls in row shard s.
func deliveryInShard(s byte) ledger.Delivery {
	for {
		d := newDelivery(time.Time{})
		if d.Key()[0] == s {
			return d
		}
	}
}

// cleanupLap runs cleanup passes until a lap is done.
func cleanupLap(t testing.TB, l *localfs.Ledger) []ledger.RemovedRow {
	t.Helper()
	var removed []ledger.RemovedRow
	for cur := ledger.Cursor(""); ; {
		rep, err := l.Cleanup(context.Background(), cur)
		if err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		removed = append(removed, rep.Removed...)
		if rep.Done {
			return removed
		}
		cur = rep.Next
	}
}
