package objstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// fastRetryer is the SDK's standard retryer with short back-offs and no retry quota, so a
// fault test spends its time on faults, not on sleeping.
func fastRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxBackoff = 5 * time.Millisecond
		o.RateLimiter = ratelimit.None
	})
}

// openOn opens a handle on prefix through tr.
func openOn(t testing.TB, prefix string, tr *transport, clock ledger.Clock, limits ledger.Limits, sweep int) *objstore.Ledger {
	t.Helper()
	ctx := context.Background()
	// A test clock is the store's clock: every answer's Date reports it. With the system
	// clock, the store's own Date is used.
	_, real := clock.(ledger.SystemClock)
	if !real {
		tr.setStoreClock(clock)
	}
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		Retryer: fastRetryer, DisableClockSkewCorrection: !real})
	if err != nil {
		t.Fatal(err)
	}
	l, err := objstore.Open(ctx, objstore.Config{Client: client, Bucket: testBucket, Prefix: prefix, Limits: limits,
		Clock: clock, Create: true, Shards: 4, Owner: "fault-test", SweepBatch: sweep})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// TestFaultsAtEveryRequest runs every ledger operation with each transport fault injected at
// each of its requests, once (the SDK's retries and the read-back of write tokens must absorb
// it) and from that request on (the operation fails). Afterwards the row must be legible, hold
// nothing of a failed operation or its whole effect, never have a lower fence, and finish;
// capacity must never understate.
func TestFaultsAtEveryRequest(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	clock := ledger.NewManualClock(ledgertest.Epoch)
	limits := ledgertest.Limits()
	limits.RecordCap = 100_000
	faults := []struct {
		name       string
		f          fault
		persistent bool
	}{
		{"error-before-send", failBefore, false},
		{"response-lost", loseResponse, false},
		{"503-slowdown", slowDown, false},
		{"connection-reset", reset, false},
		{"error-before-send-from-here", failBefore, true},
		{"response-lost-from-here", loseResponse, true},
	}
	points, failed := 0, 0
	// Each injection point is followed by the next continuation in turn, not only by the same
	// operation again.
	continuations := ledgertest.Continuations()
	rows, used := int64(0), int64(0)
	for _, op := range ledgertest.FaultOps() {
		for _, fl := range faults {
			// A prefix per operation and fault: the checks read every row, so rows left
			// behind by other operations would only make them slower.
			prefix := newPrefix(t)
			healthy := openOn(t, prefix, newTransport(&counter{}), clock, limits, 0)
			for n := 0; ; n++ {
				if n > 40 {
					t.Fatalf("%s/%s: still injecting after %d requests", op.Name, fl.name, n)
				}
				d, run := op.Prep(t, healthy, clock)
				_, before := ledgertest.RowState(t, healthy, d)
				tr := newTransport(&counter{})
				// A short sweep keeps cleanup's requests from growing with the rows left behind.
				faulty := openOn(t, prefix, tr, clock, limits, 2)
				var seen, fired atomic.Int64
				tr.setRule(func(r *http.Request) fault {
					i := seen.Add(1) - 1
					if i == int64(n) || (fl.persistent && i > int64(n)) {
						fired.Add(1)
						return fl.f
					}
					return pass
				})
				err := run(faulty)
				tr.setRule(nil)
				if fired.Load() == 0 {
					if err != nil {
						t.Fatalf("%s/%s request %d: failed with nothing injected: %v", op.Name, fl.name, n, err)
					}
					break
				}
				points++
				if err != nil {
					failed++
				}
				what := fmt.Sprintf("%s/%s at request %d", op.Name, fl.name, n)
				next := continuations[points%len(continuations)]
				ledgertest.CheckAfterFault(t, healthy, clock, op, what, d, before, err, next)
			}
			st, err := healthy.Stats(context.Background())
			if err != nil || st.CapacityUsed != st.Rows {
				t.Fatalf("%s/%s: after cleanup, stats %+v %v: capacity must count the rows exactly", op.Name, fl.name, st, err)
			}
			rows, used = rows+st.Rows, used+st.CapacityUsed
		}
	}
	t.Logf("%d injection points, %d of them failed the operation; capacity %d for %d rows", points, failed, used, rows)
	fmt.Printf("%d injection points\n", points)
}
