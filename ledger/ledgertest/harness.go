// Package ledgertest is the conformance suite every ledger backend passes. A backend provides
// a Harness; RunConformanceTests runs every case as a named subtest against it.
package ledgertest

import (
	"context"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Options are the per-handle settings the suite opens a ledger with.
type Options struct {
	// Clock is the host's clock, the one the handle is given.
	Clock ledger.Clock
	// StoreClock is the store's own clock, for a backend that decides on it (UsesStoreClock):
	// the time the store reports. Nil means Clock.
	StoreClock ledger.Clock
	// Faults, when set, asks for a handle whose storage operations fail at random.
	Faults *FaultPlan
	// StrandedAfter is the idle time after which Cleanup reports an unfinished row.
	StrandedAfter time.Duration
	// CleanupBatch bounds the rows one Cleanup pass removes.
	CleanupBatch int
}

// OpCount counts storage operations made through the harness's instrumented store.
type OpCount struct {
	// Ops counts every storage operation (file system calls, HTTP requests).
	Ops int
	// Listings counts the operations that list a directory or a prefix.
	Listings int
}

// Harness is what a backend provides to the suite. One harness owns one store (a root
// folder, a bucket prefix); every Open reopens that same store, as a new process would.
type Harness interface {
	// Open opens a new handle on the harness's store, creating the store when it does not
	// exist yet. Opening clears any crash staged with CrashAfter: it is a new process.
	Open(ctx context.Context, limits ledger.Limits, opts Options) (ledger.Ledger, error)
	// Ops reports the operations counted since the last ResetOps.
	Ops() OpCount
	// ResetOps sets the counters to zero.
	ResetOps()
	// CrashAfter makes every handle opened so far die after n more mutating operations:
	// the operation that would be the (n+1)th, and every operation after it, fails without
	// effect, as if the process had been killed. A negative n cancels a staged crash.
	CrashAfter(n int)
	// FailListings makes listings fail after n more successful ones, so a cleanup cannot
	// read the whole store. A negative n lets listings succeed again.
	FailListings(n int)
	// DamageRow overwrites the stored row of key with bytes that do not decode.
	DamageRow(ctx context.Context, key ledger.Key) error
	// DamageSubject overwrites the stored record of a subject with bytes that do not decode.
	DamageSubject(ctx context.Context, key ledger.SubjectKey) error
	// HoldMaintenance takes the maintenance lock or lease as another process would, until
	// release is called.
	HoldMaintenance(ctx context.Context) (release func(), err error)
	// UsesStoreClock reports whether the backend decides on the store's clock
	// (Options.StoreClock) rather than the host's.
	UsesStoreClock() bool
	// Faults counts the faults injected so far into handles opened with a FaultPlan, by kind.
	Faults() map[string]int
	// Resolution is the finest step of time the backend's decisions tell apart (zero: as
	// fine as time.Time). Cases step the clock past an instant by at least this much. The S3
	// ledger runs on the store's Date, which has whole seconds.
	Resolution() time.Duration
	// SubjectMargin is how long past its horizon the backend keeps a subject record that
	// nothing can land on any more, for the clocks its decisions read
	// (ledger.SubjectRecord.Forgettable's behind): zero for a backend whose every decision
	// reads a time that cleanup persists before it forgets anything.
	SubjectMargin() time.Duration
	// Close releases the harness and its store.
	Close() error
}

// FaultPlan asks a harness for a handle whose storage operations fail at random, as its store
// can fail: the harness chooses the kinds (for files: a failure before or after the effect, a
// crash that kills the handle; for an object store: a failure before sending, a lost answer, a
// request held in flight and landing late, a crash). Every failure reaches the caller as an
// error of unknown outcome.
type FaultPlan struct {
	// Rate is the chance that one storage operation is hit.
	Rate float64
	// Seed makes the choices repeatable.
	Seed uint64
}

// NewHarness makes a harness over a new, empty store.
type NewHarness func(ctx context.Context, t TB) (Harness, error)

// TB is the part of testing.TB a harness constructor needs.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}
