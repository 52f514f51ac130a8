package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// failWriteback is a rule failing the write-back check of the files whose path contains
// one of the given strings (a key, a file name), and counting how often it did.
func failWriteback(fired *atomic.Int32, parts ...string) faultfs.Rule {
	return func(op faultfs.Op, path string) faultfs.Action {
		if op != faultfs.OpWriteback {
			return faultfs.Pass
		}
		for _, p := range parts {
			if strings.Contains(path, p) {
				fired.Add(1)
				return faultfs.FailBefore
			}
		}
		return faultfs.Pass
	}
}

// TestWritebackFailureFailsTheOperation: a round of group commit that syncs the whole file
// system (syncfs) hears of a write-back error only through the descriptor it calls syncfs
// on, and only once, whichever file the error concerned: an error recorded before that
// descriptor was opened, or reported to another round first, would let an operation whose
// data never reached the disk be answered success. Each file a round carries is checked
// after its sync; the operation whose file failed is answered ErrUnavailable and leaves
// nothing behind, an operation in the same round whose files were written back succeeds, and
// the failed one succeeds when tried again.
func TestWritebackFailureFailsTheOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, filepath.Join(t.TempDir(), "root"), localfs.Config{Clock: clock, FS: fsys})
	defer l.Close()

	// The one-flush round of a lone admission reports each file's write-back through its own
	// descriptor; the subtests after this one test the syncfs round.
	t.Run("admission alone, one flush", func(t *testing.T) {
		was := localfs.SetWriteBackForTest(l, true)
		defer localfs.SetWriteBackForTest(l, was)
		record := func(d ledger.Delivery) string {
			return filepath.Join(l.Dir(), localfs.RowsDir, fmt.Sprintf("%02x", d.Key()[0]), "capacity.state")
		}
		for _, c := range []struct {
			what string
			op   faultfs.Op
			part func(d ledger.Delivery) string
			want func(d ledger.Delivery) string
		}{
			{"the row's early write-out", faultfs.OpWriteStart, func(d ledger.Delivery) string { return d.Key().String() }, func(d ledger.Delivery) string { return "start writing " }},
			{"the capacity record's write-back", faultfs.OpWriteOut, record, func(d ledger.Delivery) string { return "write back " + record(d) }},
			{"the row's fsync", faultfs.OpSync, func(d ledger.Delivery) string { return d.Key().String() }, func(d ledger.Delivery) string { return "fsync " }},
		} {
			d := newDelivery(time.Time{})
			var fired atomic.Int32
			fsys.SetRule("writeback", func(op faultfs.Op, path string) faultfs.Action {
				if op == c.op && strings.Contains(path, c.part(d)) {
					fired.Add(1)
					return faultfs.FailBefore
				}
				return faultfs.Pass
			})
			_, err := l.Admit(ctx, d)
			fsys.SetRule("writeback", nil)
			if fired.Load() == 0 {
				t.Fatalf("%s: never made", c.what)
			}
			if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), c.want(d)) {
				t.Fatalf("admission whose %s failed: %v, want ErrUnavailable naming %q", c.what, err, c.want(d))
			}
			if _, err := l.Inspect(ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
				t.Fatalf("%s: the failed admission left a row: %v", c.what, err)
			}
			ledgertest.MustAdmit(t, l, d)
		}
	})
	localfs.SetWriteBackForTest(l, false)

	t.Run("admission alone", func(t *testing.T) {
		// An admission writes two files (its capacity record and its row), so even alone it
		// is synced with syncfs, where the file system gives no one-flush round.
		d := newDelivery(time.Time{})
		var fired atomic.Int32
		fsys.SetRule("writeback", failWriteback(&fired, d.Key().String()))
		_, err := l.Admit(ctx, d)
		fsys.SetRule("writeback", nil)
		if fired.Load() == 0 {
			t.Fatal("the write-back of the row was never checked")
		}
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("admission whose row was not written back: %v, want ErrUnavailable", err)
		}
		if _, err := l.Inspect(ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
			t.Fatalf("the failed admission left a row: %v", err)
		}
		ledgertest.MustAdmit(t, l, d)
	})

	t.Run("capacity record", func(t *testing.T) {
		// The record is written in place: the failure names it (not an empty temporary name).
		d := newDelivery(time.Time{})
		var fired atomic.Int32
		fsys.SetRule("writeback", failWriteback(&fired, "capacity.state"))
		_, err := l.Admit(ctx, d)
		fsys.SetRule("writeback", nil)
		record := filepath.Join(l.Dir(), localfs.RowsDir, fmt.Sprintf("%02x", d.Key()[0]), "capacity.state")
		if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "write-back of "+record+" failed") {
			t.Fatalf("admission whose capacity record was not written back: %v, want ErrUnavailable naming the record", err)
		}
		ledgertest.MustAdmit(t, l, d)
	})

	t.Run("two admissions in one round", func(t *testing.T) {
		defer localfs.SetSyncGatherForTest(l, 0, 0)
		rounds := gatherPairs(l)
		bad, good := newDelivery(time.Time{}), newDelivery(time.Time{})
		var fired atomic.Int32
		fsys.SetRule("writeback", failWriteback(&fired, bad.Key().String()))
		defer fsys.SetRule("writeback", nil)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, d := range []ledger.Delivery{bad, good} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = l.Admit(ctx, d)
			}()
		}
		wg.Wait()
		if _, ok := rounds.Load(2); !ok {
			t.Fatal("no round carried both admissions")
		}
		if fired.Load() == 0 {
			t.Fatal("the write-back of the row was never checked")
		}
		if !errors.Is(errs[0], ledger.ErrUnavailable) {
			t.Fatalf("admission whose row was not written back: %v, want ErrUnavailable", errs[0])
		}
		if errs[1] != nil {
			t.Fatalf("admission written back in the same round: %v", errs[1])
		}
		if _, err := l.Inspect(ctx, bad.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
			t.Fatalf("the failed admission left a row: %v", err)
		}
		fsys.SetRule("writeback", nil)
		ledgertest.MustAdmit(t, l, bad)
	})

	t.Run("verdict in a round with an admission", func(t *testing.T) {
		// A save alone writes one file and fsyncs it (its own error); in a round of several
		// it is synced by syncfs.
		d, other := newDelivery(time.Time{}), newDelivery(time.Time{})
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
		rounds := gatherPairs(l)
		defer localfs.SetSyncGatherForTest(l, 0, 0)
		var fired atomic.Int32
		fsys.SetRule("writeback", failWriteback(&fired, d.Key().String()))
		defer fsys.SetRule("writeback", nil)
		var saveErr, admitErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, saveErr = l.Save(ctx, lease, []byte("verdict")) }()
		go func() { defer wg.Done(); _, admitErr = l.Admit(ctx, other) }()
		wg.Wait()
		if _, ok := rounds.Load(2); !ok {
			t.Fatal("no round carried the save and the admission")
		}
		if fired.Load() == 0 {
			t.Fatal("the write-back of the verdict was never checked")
		}
		if !errors.Is(saveErr, ledger.ErrUnavailable) {
			t.Fatalf("save whose verdict was not written back: %v, want ErrUnavailable", saveErr)
		}
		if admitErr != nil {
			t.Fatalf("admission written back in the same round: %v", admitErr)
		}
		fsys.SetRule("writeback", nil)
		ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, lease, "verdict"))
	})
}

// gatherPairs makes l's group-commit rounds gather two requests until one round has carried
// two: a round waits for its pair (both callers start at once, but a loaded machine can take
// seconds to run the second) and goes as soon as it has it; after that first pair, rounds go
// as they come (a caller that syncs again alone does not wait).
func gatherPairs(l *localfs.Ledger) *sync.Map {
	var rounds sync.Map
	localfs.SetSyncGatherForTest(l, 2, time.Minute)
	localfs.SetAfterSyncForTest(l, func(n int) {
		rounds.Store(n, true)
		if n >= 2 {
			localfs.SetSyncGatherForTest(l, 0, 0) // on the round's own goroutine, before it answers
		}
	})
	return &rounds
}

// TestAnAbortedJournalFailsTheOperation: when ext4 fails to write a journal commit it aborts
// the journal and tells only the caller that waited on that commit; a later fsync or syncfs
// finds nothing to commit and answers success, though the renames of the aborted transaction
// are lost (an attack on a loop-mounted ext4 lost two answered admissions so). Every sync the
// ledger trusts is followed by a check that the journal still commits (a change that needs
// it: a probe file's size changed, answered EROFS once the journal has aborted); when the
// check fails, whatever the sync carried fails: an admission alone (its row renamed, its
// folder synced), a save alone (the same, one file), and a cleanup batch, which must not give
// back the slots of removals that may not be durable.
func TestAnAbortedJournalFailsTheOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, filepath.Join(t.TempDir(), "root"), localfs.Config{Clock: clock, FS: fsys})
	defer l.Close()
	var fired atomic.Int32
	aborted := func(op faultfs.Op, path string) faultfs.Action {
		if op == faultfs.OpJournal {
			fired.Add(1)
			return faultfs.FailBefore
		}
		return faultfs.Pass
	}
	check := func(what string, err error) {
		t.Helper()
		if fired.Swap(0) == 0 {
			t.Fatalf("%s: the journal was never checked", what)
		}
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("%s after the journal aborted: %v, want ErrUnavailable", what, err)
		}
	}

	d := newDelivery(time.Time{})
	fsys.SetRule("journal", aborted)
	_, err := l.Admit(ctx, d)
	fsys.SetRule("journal", nil)
	check("admission", err)
	// The row was renamed into place before the check: a failed operation leaves nothing or
	// its whole effect, and the delivery sent again finds it.
	if a, err := l.Admit(ctx, d); err != nil || (a.Outcome != ledger.Admitted && a.Outcome != ledger.Pending) {
		t.Fatalf("the delivery sent again: %+v %v", a, err)
	}

	lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
	fsys.SetRule("journal", aborted)
	_, err = l.Save(ctx, lease, []byte("verdict"))
	fsys.SetRule("journal", nil)
	check("save", err)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, lease, "verdict"))

	// A signed row, forgotten by cleanup once its replay window has passed; the journal is
	// found aborted at the first check after a row is removed.
	gone := newDelivery(clock.Now())
	ledgertest.MustAdmit(t, l, gone)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, gone, ledger.Execute).Lease, "verdict"))
	clock.Advance(3 * time.Hour)
	before, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var removed atomic.Bool
	fsys.SetRule("journal", func(op faultfs.Op, path string) faultfs.Action {
		if op == faultfs.OpRemove && strings.HasSuffix(path, gone.Key().String()+".state") {
			removed.Store(true)
		}
		if removed.Load() {
			return aborted(op, path)
		}
		return faultfs.Pass
	})
	_, err = l.Cleanup(ctx, "")
	fsys.SetRule("journal", nil)
	if !removed.Load() {
		t.Fatalf("the cleanup removed no row: %v", err)
	}
	check("cleanup", err)
	after, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.CapacityUsed < before.CapacityUsed {
		t.Fatalf("a cleanup whose removals may be lost gave back slots: %d used before, %d after", before.CapacityUsed, after.CapacityUsed)
	}
	// The next pass finishes the batch: the row is forgotten and its slot given back, once.
	if _, err := l.Cleanup(ctx, ""); err != nil {
		t.Fatalf("cleanup after the check passes again: %v", err)
	}
	if _, err := l.Inspect(ctx, gone.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("the row outlived a finished cleanup: %v", err)
	}
	if st, err := l.Stats(ctx); err != nil || st.CapacityUsed != before.CapacityUsed-1 {
		t.Fatalf("capacity after the batch finished: %+v %v, want %d used", st, err, before.CapacityUsed-1)
	}
}

// TestOneFlushRoundFailureCombinations: in the one-flush round of a lone admission, every
// combination of a failed early write-out (OpWriteStart), capacity record write-back (OpWriteOut)
// and row fsync (OpSync), failed before or after its effect, fails the admission with
// ErrUnavailable, leaves no row, lets the delivery be admitted again, and leaks no slot once the
// shard is recounted.
func TestOneFlushRoundFailureCombinations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, fsys := oneFlushRoot(t)
	defer l.Close()
	ops := []faultfs.Op{faultfs.OpWriteStart, faultfs.OpWriteOut, faultfs.OpSync}
	for mask := 1; mask < 1<<len(ops); mask++ {
		for _, how := range []faultfs.Action{faultfs.FailBefore, faultfs.FailAfter} {
			d := newDelivery(time.Time{})
			record := filepath.Join(l.Dir(), shardFile(d.Key()[0]))
			var fired atomic.Int32
			fsys.SetRule("one-flush faults", func(op faultfs.Op, path string) faultfs.Action {
				for i, o := range ops {
					if mask&(1<<i) == 0 || op != o {
						continue
					}
					if strings.Contains(path, d.Key().String()) || path == record {
						fired.Add(1)
						return how
					}
				}
				return faultfs.Pass
			})
			_, err := l.Admit(ctx, d)
			fsys.SetRule("one-flush faults", nil)
			what := fmt.Sprintf("mask %03b action %d", mask, how)
			if fired.Load() == 0 {
				t.Fatalf("%s: no fault fired (err %v)", what, err)
			}
			if !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("%s: admission answered %v, want ErrUnavailable", what, err)
			}
			if _, err := l.Inspect(ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
				t.Fatalf("%s: the failed admission left a row: %v", what, err)
			}
			ledgertest.MustAdmit(t, l, d)
		}
	}
	if err := localfs.RecountAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.CapacityUsed != st.Rows {
		t.Fatalf("after recounting: %d slots used for %d rows", st.CapacityUsed, st.Rows)
	}
}

// TestConcurrentOneFlushAdmissions: concurrent admissions with the one-flush round forced on, on
// the real file system (raw descriptors, StartWriteBack on them), under the race detector: every
// admission succeeds and each slot is held by a row.
func TestConcurrentOneFlushAdmissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, fsys := oneFlushRoot(t)
	defer l.Close()
	const workers, each = 8, 12
	// A round takes the one-flush path only when it carries one admission; eight workers at
	// once can keep every round shared on a loaded machine, so the batch is run again (at most
	// five times) until some round was a lone one.
	admitted := int64(0)
	for batch := 0; batch < 5 && fsys.Counter().Snapshot().ByOp[faultfs.OpWriteStart] == 0; batch++ {
		admitted += workers * each
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					d := newDelivery(time.Time{})
					a, err := l.Admit(ctx, d)
					if err == nil && a.Outcome != ledger.Admitted {
						err = fmt.Errorf("outcome %v", a.Outcome)
					}
					if err != nil {
						errs <- err
						continue
					}
					if _, err := l.Inspect(ctx, d.Key()); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	if n := fsys.Counter().Snapshot().ByOp[faultfs.OpWriteStart]; n == 0 {
		t.Fatal("no admission went through the one-flush round")
	} else {
		t.Logf("%d one-flush rounds", n)
	}
	if err := localfs.RecountAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	if st, err := l.Stats(ctx); err != nil || st.Rows != admitted || st.CapacityUsed != st.Rows {
		t.Fatalf("stats %+v %v, want %d rows each holding one slot", st, err, admitted)
	}
}

// oneFlushRoot opens a root on the real file system through faultfs, with the one-flush round
// of a lone admission forced on.
func oneFlushRoot(t *testing.T) (*localfs.Ledger, *faultfs.FS) {
	t.Helper()
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l := openRoot(t, filepath.Join(t.TempDir(), "root"), localfs.Config{Clock: ledger.NewManualClock(epoch), FS: fsys})
	localfs.SetWriteBackForTest(l, true)
	return l, fsys
}
