package objstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

func TestVerifyAndReadLimits(t *testing.T) {
	requireMinIO(t)
	ctx := context.Background()
	prefix := newPrefix(t)
	limits := ledgertest.Limits()
	l := openOn(t, prefix, newTransport(&counter{}), ledger.NewManualClock(ledgertest.Epoch), limits, 0)
	var last ledger.Delivery
	for i := range 3 {
		last = benchDelivery("verify", i, time.Time{})
		ledgertest.MustAdmit(t, l, last)
	}
	calls := 0
	v, err := l.Verify(ctx, func(done int, total int64) { calls++ })
	if err != nil || !v.OK() || v.Rows != 3 || v.CapacityUsed != 3 || calls != 3 {
		t.Fatalf("verify: %+v %v (%d progress calls)", v, err, calls)
	}
	h := &harness{prefix: prefix, count: &counter{}}
	if err := h.DamageRow(ctx, last.Key()); err != nil {
		t.Fatal(err)
	}
	v, err = l.Verify(ctx, nil)
	if err != nil || v.OK() || !strings.Contains(strings.Join(v.Problems, "\n"), last.Key().String()) {
		t.Fatalf("a damaged row is not named: %+v %v", v, err)
	}
}
