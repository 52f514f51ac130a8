package localfs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func testLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 100_000, SignedAgeCeiling: 5 * time.Minute, QueueCeiling: time.Hour,
		FutureSkew: time.Minute, MaxSubjectBytes: 4 << 10, MaxReportBytes: 8 << 10}
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
		Subject:  fmt.Appendf(nil, `{"sha":"%040d"}`, n),
		SignedAt: signedAt,
	}
}

func mustAdmit(t testing.TB, l ledger.Ledger, d ledger.Delivery) {
	t.Helper()
	a, err := l.Admit(context.Background(), d)
	if err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
}

func mustClaim(t testing.TB, l ledger.Ledger, d ledger.Delivery, want ledger.ClaimOutcome) ledger.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), d.Key(), d.Binding.Digest(), "w", 30*time.Second)
	if err != nil || c.Outcome != want {
		t.Fatalf("claim: %+v %v (want %v)", c, err, want)
	}
	return c
}

func mustSave(t testing.TB, l ledger.Ledger, lease ledger.Lease, report string) ledger.Staged {
	t.Helper()
	s, err := l.Save(context.Background(), lease, []byte(report))
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	return s
}

func mustComplete(t testing.TB, l ledger.Ledger, s ledger.Staged) {
	t.Helper()
	if err := l.Complete(context.Background(), s); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// finishRow drives a row, whatever its state, to a terminal state.
func finishRow(t testing.TB, l ledger.Ledger, clock *ledger.ManualClock, d ledger.Delivery) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "finisher", 30*time.Second)
		if err != nil {
			t.Fatalf("finish: claim: %v", err)
		}
		switch c.Outcome {
		case ledger.ClaimDuplicate:
			return
		case ledger.Busy:
			clock.Set(c.RetryAt)
		case ledger.Execute:
			mustComplete(t, l, mustSave(t, l, *c.Lease, "finished"))
		case ledger.Publish:
			mustComplete(t, l, *c.Staged)
		default:
			t.Fatalf("finish: claim answered %v", c.Outcome)
		}
	}
	t.Fatalf("finish: row never finished")
}
