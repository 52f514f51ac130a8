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

// attack 30 (holds): in the one-flush round of a lone admission, every combination of a
// failed early write-out (OpWriteStart), capacity record write-back (OpWriteOut) and row
// fsync (OpSync), failed before or after its effect, fails the admission with
// ErrUnavailable, leaves no row, lets the delivery be admitted again, and leaks no slot once
// the shard is settled.
func TestAttack30OneFlushRoundFailureCombinations(t *testing.T) {
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
			fsys.SetRule("attack30", func(op faultfs.Op, path string) faultfs.Action {
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
			fsys.SetRule("attack30", nil)
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
	if err := localfs.SettleAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.CapacityUsed != st.Rows {
		t.Fatalf("after settling: %d slots used for %d rows", st.CapacityUsed, st.Rows)
	}
}

// attack 30 (holds): concurrent admissions with the one-flush round forced on, on the real
// file system (raw descriptors, StartWriteBack on them), under the race detector: every
// admission succeeds and each slot is held by a row.
func TestAttack30ConcurrentOneFlushAdmissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, fsys := oneFlushRoot(t)
	defer l.Close()
	const workers, each = 8, 12
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
	if n := fsys.Counter().Snapshot().ByOp[faultfs.OpWriteStart]; n == 0 {
		t.Fatal("no admission went through the one-flush round")
	} else {
		t.Logf("%d one-flush rounds", n)
	}
	if err := localfs.SettleAllForTest(ctx, l); err != nil {
		t.Fatal(err)
	}
	if st, err := l.Stats(ctx); err != nil || st.Rows != workers*each || st.CapacityUsed != st.Rows {
		t.Fatalf("stats %+v %v, want %d rows each holding one slot", st, err, workers*each)
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
