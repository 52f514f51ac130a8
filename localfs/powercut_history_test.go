package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Power-cut histories: concurrent workers drive deliveries through random lifecycles beside cleanup
// passes and a moving clock, and the power is cut at a random call.

// powerKey is one delivery a worker of a power-cut history drives, and what the answers it
// got promise about it.
type powerKey struct {
	d ledger.Delivery
	// last is the row as read after the last answered operation (valid when read).
	last ledger.Row
	read bool
	// admitted: an admission was answered; saved: a save was answered, with this report.
	admitted bool
	saved    ledger.Digest
	// fence is the fence of the last answered save: never to come back lower.
	fence uint64
}

// TestPowerCutHistories runs concurrent workers on one root (their keys share two row folders,
// so their writes share group-commit rounds and folder syncs), each driving deliveries through
// random lifecycles, with cleanup passes and a moving clock; the power is cut at a random call.
// After every way of recovering, each key must keep what its answers promised (an answered
// admission keeps its row, an answered save its verdict and fence, unless cleanup could have
// forgotten the row), every row must be legible and its work able to finish, and the prepared
// root must verify clean with capacity counting its rows exactly.
func TestPowerCutHistories(t *testing.T) {
	t.Parallel()
	powerCutHistories(t, testLimits(), []byte{0x10, 0x11}, 8*powerScale())
}

// TestPowerCutHistoriesCrowded runs the power-cut histories of TestPowerCutHistories (with
// Unclaim among the lifecycles) on a root of 16 slots, one in each of the first 16 shards,
// with keys spread over six row folders: most admissions borrow a slot from another shard,
// some are refused Full until cleanup gives slots back (an admission that meets Full finishes
// a crashed cleanup's batch first), and cleanup releases slots into shards other than the
// rows' folders.
func TestPowerCutHistoriesCrowded(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.RecordCap = 16
	powerCutHistories(t, limits, []byte{0x00, 0x05, 0x10, 0x11, 0x80, 0xff}, 8*powerScale())
}

func powerCutHistories(t *testing.T, limits ledger.Limits, shards []byte, histories int) {
	const (
		workers  = 4
		steps    = 40
		leaseFor = 24 * time.Hour
	)
	ctx := context.Background()
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPoweredWith(t, base, ledger.NewManualClock(epoch), limits, true).Close()
	base.SyncAll()
	fulls := atomic.Int64{}
	cuts, answered, removed, midway := 0, atomic.Int64{}, atomic.Int64{}, 0
	for h := range histories {
		rng := rand.New(rand.NewPCG(uint64(h), 7))
		clock := ledger.NewManualClock(epoch.Add(time.Duration(h) * time.Hour))
		fsys := base.Clone()
		l := openPoweredWith(t, fsys, clock, limits, false)
		fsys.CutAfter(rng.IntN(800)) // a history makes about 850 changes and syncs
		var mu sync.Mutex
		var keys []*powerKey
		var wg sync.WaitGroup
		for w := range workers {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				wr := rand.New(rand.NewPCG(seed, uint64(w)))
				var k *powerKey
				var lease *ledger.Lease
				var staged *ledger.Staged
				for range steps {
					if wr.IntN(6) == 0 {
						// A cleanup pass, the clock moved on by a few minutes: finished
						// rows past their retention are forgotten.
						clock.Advance(3 * time.Minute)
						rep, err := l.Cleanup(ctx, "")
						if err != nil {
							if !fsys.IsCut() {
								t.Errorf("cleanup failed with the power on: %v", err)
							}
							return
						}
						removed.Add(int64(len(rep.Removed)))
						continue
					}
					if k == nil || k.read && k.last.State.Terminal() {
						signed := time.Time{}
						if wr.IntN(2) == 0 {
							signed = clock.Now()
						}
						d := deliveryInShard(shards[wr.IntN(len(shards))])
						d.SignedAt = signed
						if !signed.IsZero() {
							d.Binding.Scheme = "standard-webhooks"
						}
						k, lease, staged = &powerKey{d: d}, nil, nil
						mu.Lock()
						keys = append(keys, k)
						mu.Unlock()
						a, err := l.Admit(ctx, d)
						if err != nil {
							return // the power is cut
						}
						// (A refusal, Stale when the clock moved past the signature's age
						// ceiling, makes no row.)
						k.admitted = a.Outcome == ledger.Admitted
						if a.Outcome == ledger.Full {
							fulls.Add(1)
						}
						answered.Add(1)
					} else {
						var err error
						switch {
						case staged != nil && wr.IntN(2) == 0:
							err = l.Complete(ctx, *staged)
						case staged != nil:
							err = l.Abandon(ctx, *staged, "provider answered 422")
						case lease != nil && wr.IntN(4) == 0:
							err = l.Release(ctx, *lease, time.Time{})
							lease = nil
						case lease != nil && wr.IntN(4) == 0:
							err = l.Unclaim(ctx, *lease, time.Time{})
							lease = nil
						case lease != nil && wr.IntN(4) == 0:
							var nl ledger.Lease
							if nl, err = l.Renew(ctx, *lease, leaseFor); err == nil {
								lease = &nl
							}
						case lease != nil:
							report := fmt.Appendf(nil, "verdict %d", wr.IntN(1000))
							var s ledger.Staged
							if s, err = l.Save(ctx, *lease, report); err == nil {
								staged, lease = &s, nil
								k.saved, k.fence = ledger.SumBody(report), s.Lease.Fence
							}
						case k.last.State == ledger.StateAbandoned:
							_, err = l.Revive(ctx, k.d.Key(), k.last.EvaluationID)
						default:
							var c ledger.Claim
							if c, err = l.Claim(ctx, k.d.Key(), k.d.Binding.Digest(), "w", leaseFor); err == nil {
								switch c.Outcome {
								case ledger.Execute:
									lease = c.Lease
								case ledger.Publish:
									staged = c.Staged
								}
							}
						}
						if err != nil {
							if !fsys.IsCut() {
								t.Errorf("a history's operation failed with the power on: %v", err)
							}
							return
						}
						answered.Add(1)
						if staged != nil && (k.last.State == ledger.StateDone || k.last.State == ledger.StateAbandoned) {
							staged = nil
						}
					}
					row, err := l.Inspect(ctx, k.d.Key())
					if errors.Is(err, ledger.ErrUnknownDelivery) && !k.admitted {
						k = nil // refused: the next step admits another
						continue
					}
					if err != nil {
						if !fsys.IsCut() {
							t.Errorf("inspect failed with the power on: %v", err)
						}
						return
					}
					k.last, k.read = row, true
					if row.State.Terminal() {
						staged = nil
					}
				}
			}()
		}
		wg.Wait()
		if fsys.IsCut() {
			midway++
		}
		fsys.Cut()
		l.Close()
		for _, p := range historyPersistences(h) {
			cuts++
			what := fmt.Sprintf("history %d, %s", h, p)
			rebooted := fsys.Recover(p)
			clock := ledger.NewManualClock(clock.Now())
			l := openPoweredWith(t, rebooted, clock, limits, false)
			for _, k := range keys {
				checkPowerKey(t, l, clock, k, what)
			}
			for _, k := range keys {
				if state, _ := ledgertest.RowState(t, l, k.d); state != "" {
					ledgertest.FinishRow(t, l, clock, k.d)
				}
			}
			cleanupLap(t, l)
			l.Close()
			checkPreparedRootWith(t, rebooted, clock, limits, false, what)
		}
	}
	t.Logf("%d histories (%d cut while running), %d operations answered, %d admissions answered Full, %d rows removed by cleanup, %d reboots",
		histories, midway, answered.Load(), fulls.Load(), removed.Load(), cuts)
	if midway == 0 || removed.Load() == 0 {
		t.Errorf("the histories never met a cut while running (%d) or never removed a row (%d): what they check went untried", midway, removed.Load())
	}
}

// checkPowerKey checks what k's answers promised after a reboot.
func checkPowerKey(t *testing.T, l ledger.Ledger, clock *ledger.ManualClock, k *powerKey, what string) {
	t.Helper()
	what = fmt.Sprintf("%s, key %s", what, k.d.Key().Short())
	state, row := ledgertest.RowState(t, l, k.d)
	if state == "" {
		// Only cleanup may forget a row whose admission was answered: one finished and past
		// its retention when last read.
		if k.admitted && !(k.read && k.last.State.Terminal() && k.last.Removable(k.last.Now(clock.Now(), time.Time{}))) {
			t.Fatalf("%s: the answered admission was lost (last read %q)", what, k.last.State)
		}
		return
	}
	if !k.saved.IsZero() {
		switch row.State {
		case ledger.StateSaved, ledger.StateAbandoned:
			if row.Report.Digest != k.saved {
				t.Fatalf("%s: the answered save's verdict %s became %s", what, k.saved, row.Report.Digest)
			}
		case ledger.StateDone:
		default:
			t.Fatalf("%s: the answered save was lost: the row is %s", what, row.State)
		}
		if row.Fence < k.fence {
			t.Fatalf("%s: fence went back from %d to %d", what, k.fence, row.Fence)
		}
	}
}
