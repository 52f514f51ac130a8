package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Epoch is where every case's clock starts.
var Epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// Limits are the limits the suite creates stores with: small enough to fill, with ceilings
// that make arithmetic in the cases easy to follow.
func Limits() ledger.Limits {
	return ledger.Limits{
		RecordCap:        64,
		SignedAgeCeiling: 5 * time.Minute,
		QueueCeiling:     time.Hour,
		FutureSkew:       time.Minute,
		MaxSubjectBytes:  4 << 10,
		MaxReportBytes:   8 << 10,
	}
}

const (
	lease         = 30 * time.Second
	strandedAfter = 10 * time.Minute
)

// RunConformanceTests runs every case of the contract against the backend newHarness makes.
func RunConformanceTests(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			defer h.Close()
			e := &env{t: t, ctx: ctx, h: h, clock: ledger.NewManualClock(Epoch), limits: Limits()}
			if c.limits != nil {
				c.limits(&e.limits)
			}
			e.open()
			defer func() { e.l.Close() }()
			c.run(e)
		})
	}
}

type testCase struct {
	name string
	// limits adjusts the limits the store is created with.
	limits func(l *ledger.Limits)
	run    func(e *env)
}

// env is one case's world: a store, a handle on it and the clock both share.
type env struct {
	t      *testing.T
	ctx    context.Context
	h      Harness
	l      ledger.Ledger
	clock  *ledger.ManualClock
	limits ledger.Limits
	batch  int
	seq    int
}

func (e *env) opts() Options {
	return Options{Clock: e.clock, StrandedAfter: strandedAfter, CleanupBatch: e.batch}
}

func (e *env) open() {
	e.t.Helper()
	l, err := e.h.Open(e.ctx, e.limits, e.opts())
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.l = l
}

// reopen closes the handle and opens a new one, as a restarted process would.
func (e *env) reopen() {
	e.t.Helper()
	e.l.Close()
	e.open()
}

// delivery makes a new permanent delivery (signedAt zero) or a signed one.
func (e *env) delivery(signedAt time.Time) ledger.Delivery {
	e.seq++
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	body := []byte(fmt.Sprintf(`{"n":%d}`, e.seq))
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "main", Scheme: scheme, Identity: fmt.Sprintf("id-%d", e.seq),
			BodyDigest: ledger.SumBody(body)},
		Subject:  []byte(fmt.Sprintf(`{"repo":"acme/app","sha":"%040d"}`, e.seq)),
		SignedAt: signedAt,
	}
}

func (e *env) admit(d ledger.Delivery, want ledger.AdmitOutcome) ledger.Admission {
	e.t.Helper()
	a, err := e.l.Admit(e.ctx, d)
	if err != nil {
		e.t.Fatalf("admit %s: %v", d.Binding.Identity, err)
	}
	if a.Outcome != want {
		e.t.Fatalf("admit %s: got %v, want %v", d.Binding.Identity, a.Outcome, want)
	}
	return a
}

func (e *env) claim(d ledger.Delivery, owner string, want ledger.ClaimOutcome) ledger.Claim {
	e.t.Helper()
	c, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), owner, lease)
	if err != nil {
		e.t.Fatalf("claim %s by %s: %v", d.Binding.Identity, owner, err)
	}
	if c.Outcome != want {
		e.t.Fatalf("claim %s by %s: got %v, want %v", d.Binding.Identity, owner, c.Outcome, want)
	}
	return c
}

func (e *env) save(l ledger.Lease, report string) ledger.Staged {
	e.t.Helper()
	s, err := e.l.Save(e.ctx, l, []byte(report))
	if err != nil {
		e.t.Fatalf("save: %v", err)
	}
	return s
}

func (e *env) complete(s ledger.Staged) {
	e.t.Helper()
	if err := e.l.Complete(e.ctx, s); err != nil {
		e.t.Fatalf("complete: %v", err)
	}
}

// finish takes a fresh delivery through every state to done.
func (e *env) finish(signedAt time.Time) ledger.Delivery {
	e.t.Helper()
	d := e.delivery(signedAt)
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	e.complete(e.save(*c.Lease, "verdict:success"))
	return d
}

func (e *env) row(d ledger.Delivery) ledger.Row {
	e.t.Helper()
	r, err := e.l.Inspect(e.ctx, d.Key())
	if err != nil {
		e.t.Fatalf("inspect %s: %v", d.Binding.Identity, err)
	}
	return r
}

func (e *env) gone(d ledger.Delivery) bool {
	e.t.Helper()
	_, err := e.l.Inspect(e.ctx, d.Key())
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true
	}
	if err != nil {
		e.t.Fatalf("inspect %s: %v", d.Binding.Identity, err)
	}
	return false
}

func (e *env) stats() ledger.Stats {
	e.t.Helper()
	s, err := e.l.Stats(e.ctx)
	if err != nil {
		e.t.Fatalf("stats: %v", err)
	}
	return s
}

// cleanAll runs cleanup passes until a lap is done and merges their reports.
func (e *env) cleanAll() ledger.CleanupReport {
	e.t.Helper()
	var all ledger.CleanupReport
	cur := ledger.Cursor("")
	for i := 0; ; i++ {
		if i > 10_000 {
			e.t.Fatalf("cleanup never finished a lap")
		}
		r, err := e.l.Cleanup(e.ctx, cur)
		if err != nil {
			e.t.Fatalf("cleanup: %v", err)
		}
		all.Removed = append(all.Removed, r.Removed...)
		all.Retained += r.Retained
		all.Damaged = append(all.Damaged, r.Damaged...)
		all.Stranded = append(all.Stranded, r.Stranded...)
		all.HighWater = r.HighWater
		if r.Done {
			return all
		}
		cur = r.Next
	}
}

func removedKeys(r ledger.CleanupReport) map[ledger.Key]bool {
	m := map[ledger.Key]bool{}
	for _, x := range r.Removed {
		m[x.Key] = true
	}
	return m
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// capacityHolds checks the capacity record never understates the rows stored.
func (e *env) capacityHolds(exact bool) {
	e.t.Helper()
	s := e.stats()
	if s.CapacityUsed < s.Rows {
		e.t.Fatalf("capacity understates use: %d slots for %d rows", s.CapacityUsed, s.Rows)
	}
	if exact && s.CapacityUsed != s.Rows {
		e.t.Fatalf("capacity %d, rows %d: want equal", s.CapacityUsed, s.Rows)
	}
}

var cases []testCase

func register(name string, run func(e *env)) { cases = append(cases, testCase{name: name, run: run}) }

// registerCap registers a case whose store is created with the given record cap.
func registerCap(name string, recordCap int64, run func(e *env)) {
	cases = append(cases, testCase{name: name, limits: func(l *ledger.Limits) { l.RecordCap = recordCap }, run: run})
}

// tick is the smallest step of the clock that the backend tells apart.
func (e *env) tick() time.Duration {
	if r := e.h.Resolution(); r > 0 {
		return r
	}
	return time.Nanosecond
}

// bytesEqual is a helper for report comparisons with a readable failure.
func (e *env) sameBytes(what string, got, want []byte) {
	e.t.Helper()
	if !bytes.Equal(got, want) {
		e.t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// parallel runs f n times concurrently and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}
