package objstore_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// harness runs the conformance suite against MinIO: one prefix per harness, every handle with
// its own transport (one per "process") sharing one request counter.
type harness struct {
	prefix string
	count  *counter

	mu         sync.Mutex
	transports []*transport
	listings   int
	faults     faultCounts
	// requestLife, when set, is the ledger's RequestLife (see TestHistories); gather keeps
	// cleanup's default gathering of removals at whole hours (HighWaterEvery), which the
	// conformance cases, checking removal at the end of a retention, run without.
	requestLife time.Duration
	gather      bool
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

// randomFaults is the rule of a handle opened with a fault plan: each request is hit with the
// plan's rate: failed before it is sent, applied with its answer lost, answered 503, held in
// flight while the others go on (landing late), or the handle dies (every later request
// fails, as a Lambda killed mid-call).
func randomFaults(plan ledgertest.FaultPlan, counts *faultCounts) func(*http.Request) fault {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(plan.Seed, 0x5eed))
	return func(r *http.Request) fault {
		mu.Lock()
		defer mu.Unlock()
		// A DELETE is where a late landing hurts most: hold one in ten.
		if (r.Method == http.MethodDelete || isBatchDelete(r)) && rng.Float64() < 0.1 {
			counts.add("held-delete")
			return holdInFlight
		}
		if rng.Float64() >= plan.Rate {
			return pass
		}
		kinds := []struct {
			name string
			f    fault
		}{{"fail-before", failBefore}, {"lost-answer", loseResponse}, {"slow-down", slowDown}, {"reset-after", reset},
			{"held", holdInFlight}, {"held", holdInFlight}, {"duplicated", duplicate}, {"duplicated", duplicate}, {"crash", crash}}
		k := kinds[rng.IntN(len(kinds))]
		counts.add(k.name)
		return k.f
	}
}

func newHarness(ctx context.Context, t ledgertest.TB) (ledgertest.Harness, error) {
	requireMinIO(t.(testing.TB))
	return &harness{prefix: newPrefix(t.(testing.TB)), count: &counter{}, listings: -1}, nil
}

func (h *harness) Open(ctx context.Context, limits ledger.Limits, o ledgertest.Options) (ledger.Ledger, error) {
	tr := newTransport(h.count)
	h.mu.Lock()
	h.transports = append(h.transports, tr)
	tr.failListings(h.listings)
	h.mu.Unlock()
	// The store's clock is the suite's: every answer's Date reports it.
	store := o.StoreClock
	if store == nil {
		store = o.Clock
	}
	tr.setStoreClock(store)
	if o.Faults != nil {
		tr.setRule(randomFaults(*o.Faults, &h.faults))
		tr.setSpanned(func() { h.faults.add(ledgertest.HeldAcrossStep) })
	}
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		DisableClockSkewCorrection: true, Retryer: fastRetryer})
	if err != nil {
		return nil, err
	}
	// One owner name for every handle: the handles model one scheduled cleanup function,
	// reopened after a crash, which takes over its own lease.
	highWaterEvery := time.Duration(-1)
	if h.gather {
		highWaterEvery = 0
	}
	return objstore.Open(ctx, objstore.Config{Client: client, Bucket: testBucket, Prefix: h.prefix, Limits: limits,
		Clock: o.Clock, Create: true, StrandedAfter: o.StrandedAfter, CleanupBatch: o.CleanupBatch, Shards: 4,
		Owner: "conformance-cleanup", RequestLife: h.requestLife, HighWaterEvery: highWaterEvery})
}

func (h *harness) Ops() ledgertest.OpCount {
	ops, listings := h.count.snapshot()
	return ledgertest.OpCount{Ops: ops, Listings: listings}
}

func (h *harness) ResetOps() { h.count.reset() }

func (h *harness) CrashAfter(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tr := range h.transports {
		tr.crash(n)
	}
}

func (h *harness) FailListings(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listings = n
	for _, tr := range h.transports {
		tr.failListings(n)
	}
}

func (h *harness) DamageRow(ctx context.Context, key ledger.Key) error {
	return h.damage(ctx, h.prefix+objstore.RowName(key))
}

func (h *harness) DamageSubject(ctx context.Context, key ledger.SubjectKey) error {
	return h.damage(ctx, h.prefix+objstore.SubjectName(key))
}

// damage flips a bit in the middle of the object, so that it no longer decodes.
func (h *harness) damage(ctx context.Context, name string) error {
	obj, err := minioRaw.GetObject(ctx, testBucket, name, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	data, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		return err
	}
	data[len(data)/2] ^= 0x01
	_, err = minioRaw.PutObject(ctx, testBucket, name, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	return err
}

func (h *harness) HoldMaintenance(ctx context.Context) (func(), error) {
	body, err := objstore.EncodeMaintenanceForTest("another-cleanup", 1_000_000, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	if err != nil {
		return nil, err
	}
	name := h.prefix + objstore.MaintenanceName
	if _, err := minioRaw.PutObject(ctx, testBucket, name, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		return nil, err
	}
	return func() { minioRaw.RemoveObject(context.Background(), testBucket, name, minio.RemoveObjectOptions{}) }, nil
}

// UsesStoreClock: the S3 ledger decides on the store's Date.
func (h *harness) UsesStoreClock() bool { return true }

func (h *harness) Faults() map[string]int { return h.faults.snapshot() }

// Resolution: the S3 ledger's clock is the store's Date, in whole seconds.
func (h *harness) Resolution() time.Duration { return time.Second }

// SubjectMargin: the S3 ledger keeps a subject record a minute past its horizon, for a handle
// reading the store's time through a node behind cleanup's.
func (h *harness) SubjectMargin() time.Duration { return objstore.ReadingsApart }

func (h *harness) Close() error { return nil }

func TestConformance(t *testing.T) {
	requireMinIO(t)
	ledgertest.RunConformanceTests(t, newHarness)
}
