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
	"github.com/amiss-ci/amiss/localfs/faultfs"
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

	t.Run("admission alone", func(t *testing.T) {
		// An admission writes two files (its capacity record and its row), so even alone it
		// is synced with syncfs.
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
		rounds := gatherPairs(l)
		defer localfs.SetSyncGatherForTest(l, 0, 0)
		d, other := newDelivery(time.Time{}), newDelivery(time.Time{})
		ledgertest.MustAdmit(t, l, d)
		lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
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

// gatherPairs makes l's group-commit rounds gather two requests (waiting briefly for the
// second) until the test ends, and records the sizes of the rounds run.
func gatherPairs(l *localfs.Ledger) *sync.Map {
	var rounds sync.Map
	localfs.SetSyncGatherForTest(l, 2, 300*time.Millisecond)
	localfs.SetAfterSyncForTest(l, func(n int) { rounds.Store(n, true) })
	return &rounds
}
