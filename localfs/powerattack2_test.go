package localfs_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Attacks on answers given from a row read (not written) after a process died between a
// rename and its folder sync, or after a folder sync failed while the process lived on: the
// change that made a re-admission answered Pending/Duplicate and a Publish grant sync the
// row's folder first left other answers given from the page cache.

// abandonedRow admits d, saves report under a claim and abandons it, everything synced.
func abandonedRow(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock, d ledger.Delivery, report string) ledger.Staged {
	t.Helper()
	ctx := context.Background()
	l := openPowered(t, fsys, clock, false)
	defer l.Close()
	ledgertest.MustAdmit(t, l, d)
	s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, report)
	if err := l.Abandon(ctx, s, "provider answered 422"); err != nil {
		t.Fatal(err)
	}
	fsys.SyncAll()
	return s
}

// TestPowerCutAfterAProcessCrashKeepsARetriedRevive: an operator's `amiss ledger republish`
// is killed (Ctrl-C, OOM) inside Revive, after the saved row was renamed into place and before
// its folder was synced. The operator runs it again: Revive reads the row saved (from the page
// cache), changes nothing, writes nothing, and answers the row ("republished KEY: saved").
// Then the power goes. A Revive that was answered must survive a power loss
// (file-ledger.md, ops.go: "a Revive (an operator's act)"), but the row is abandoned again:
// the operator was told the verdict will be published, and it never is.
func TestPowerCutAfterAProcessCrashKeepsARetriedRevive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	d := newDelivery(time.Time{})
	s := abandonedRow(t, fsys, clock, d, "abandoned verdict")
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	first := openOn(t, dying, clock)
	if _, err := first.Revive(ctx, d.Key(), s.Lease.EvaluationID); err == nil {
		t.Fatal("the revive was answered although its process died before the folder sync")
	}
	first.Close()
	// The operator runs the command again, in a new process.
	second := openPowered(t, fsys, clock, false)
	row, err := second.Revive(ctx, d.Key(), s.Lease.EvaluationID)
	if err != nil || row.State != ledger.StateSaved {
		t.Fatalf("the retried revive: %+v %v", row, err)
	}
	second.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the retried revive was answered (row %v)", row.State), "saved")
}

// TestPowerCutKeepsARevivedRowAfterAFailedFolderSync: Revive's folder sync fails (an I/O
// error; the process lives on) after the rename; the caller repeats the Revive, which is
// answered from the row as read (saved: nothing to change, nothing written or synced). A power
// loss then takes the revived state.
func TestPowerCutKeepsARevivedRowAfterAFailedFolderSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	d := newDelivery(time.Time{})
	s := abandonedRow(t, fsys, clock, d, "abandoned verdict")
	failing := &syncFault{FS: fsys, failRowFolderOnce: true}
	l := openOn(t, failing, clock)
	if _, err := l.Revive(ctx, d.Key(), s.Lease.EvaluationID); err == nil {
		t.Fatal("the revive was answered although its folder sync failed")
	}
	row, err := l.Revive(ctx, d.Key(), s.Lease.EvaluationID)
	if err != nil || row.State != ledger.StateSaved {
		t.Fatalf("the repeated revive: %+v %v", row, err)
	}
	l.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the repeated revive was answered (row %v)", row.State), "saved")
}

// TestPowerCutKeepsASaveRepeatedAfterAFailedFolderSync: a Save's folder sync fails (an I/O
// error; the process lives on) after the saved row was renamed into place. The caller repeats
// the Save with the same lease and report (the ledger answers a repeated Save again: that is
// what a lost answer is retried with): the row is read saved, nothing changes, nothing is
// written or synced, and the Save is answered. The verdict is published next; a power loss
// then brings the row back to running, to be evaluated again (and perhaps to publish another
// verdict). An answered Save must survive a power loss.
func TestPowerCutKeepsASaveRepeatedAfterAFailedFolderSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys, d := poweredRootWithARow(t, clock)
	failing := &syncFault{FS: fsys, failRowFolderOnce: true}
	l := openOn(t, failing, clock)
	lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
	if _, err := l.Save(ctx, lease, []byte("first verdict")); err == nil {
		t.Fatal("the save was answered although its folder sync failed")
	}
	staged, err := l.Save(ctx, lease, []byte("first verdict"))
	if err != nil {
		t.Fatalf("the repeated save: %v", err)
	}
	l.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the repeated save was answered (publishing %q under fence %d): a row not saved is evaluated again",
		staged.Report, staged.Lease.Fence), "saved")
}

// TestPowerCutAfterUnsyncedCompleteAnsweredDuplicateIsRecovered: a worker publishes and
// completes (the done state is never synced); a duplicate message is claimed by another
// process and answered ClaimDuplicate from the page cache (the runner acknowledges it and
// drops it); then the power goes. The row may come back saved, but then it must be found
// again (Rows lists it unfinished, the stranded sweep reports it once its lease ends) and
// publish the same frozen bytes: never lost, never a second verdict. The same for Abandon.
func TestPowerCutAfterUnsyncedCompleteAnsweredDuplicateIsRecovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, end := range []string{"complete", "abandon"} {
		clock := ledger.NewManualClock(epoch)
		fsys := newPoweredRoot(t, clock)
		d := newDelivery(time.Time{})
		{
			l := openPowered(t, fsys, clock, false)
			ledgertest.MustAdmit(t, l, d)
			l.Close()
		}
		fsys.SyncAll()
		// The worker dies at its first row-folder sync after its end (the Save synced).
		l := openPowered(t, fsys, clock, false)
		s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "the verdict")
		var err error
		if end == "complete" {
			err = l.Complete(ctx, s)
		} else {
			err = l.Abandon(ctx, s, "422")
		}
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		other := openPowered(t, fsys, clock, false)
		ledgertest.MustClaim(t, other, d, ledger.ClaimDuplicate)
		other.Close()
		fsys.Cut()
		for _, p := range powerPersistences() {
			what := fmt.Sprintf("%s, %s", end, p)
			clock := ledger.NewManualClock(clock.Now())
			l := openPowered(t, fsys.Recover(p), clock, false)
			state, _ := ledgertest.RowState(t, l, d)
			switch state {
			case "done", "abandoned":
			case "saved":
				clock.Advance(3 * time.Hour) // the publishing lease ended, and the stranded threshold passed
				found := false
				for cur := ledger.Cursor(""); ; {
					rep, err := l.Cleanup(ctx, cur)
					if err != nil {
						t.Fatalf("%s: cleanup: %v", what, err)
					}
					for _, s := range rep.Stranded {
						found = found || s.Key == d.Key()
					}
					if rep.Done {
						break
					}
					cur = rep.Next
				}
				if !found {
					t.Errorf("%s: the row came back saved after a ClaimDuplicate and is not reported stranded", what)
				}
				c := ledgertest.MustClaim(t, l, d, ledger.Publish)
				if string(c.Staged.Report) != "the verdict" {
					t.Errorf("%s: publishing %q", what, c.Staged.Report)
				}
			default:
				t.Errorf("%s: the row is %q after a ClaimDuplicate and a power cut", what, state)
			}
			l.Close()
		}
	}
}

// TestPowerCutAfterAProcessCrashConcurrentAnswers: a process dies in an admission between the
// rename and the folder sync; a new process then serves, at once, the sender's retries
// (re-admissions), a worker that claims, saves and completes the row, and admissions of other
// keys into the same folder (their syncs share group-commit rounds with the re-admission's
// folder sync), and the power is cut at a random call. After every way of recovering: a
// re-admission answered Pending or Duplicate keeps the row, an answered Save keeps its
// verdict (saved or done), answered admissions keep their rows, rows are legible, and the
// prepared root counts its rows exactly.
func TestPowerCutAfterAProcessCrashConcurrentAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	const folder = 0x44
	runs := 24 * powerScale()
	cuts, readmits, saves := 0, 0, 0
	for run := range runs {
		fsys := base.Clone()
		d := deliveryInShard(folder)
		dying := &syncFault{FS: fsys, dieAtRowFolder: true}
		first := openOn(t, dying, clock)
		if _, err := first.Admit(ctx, d); err == nil {
			t.Fatal("the admission was answered although its process died")
		}
		first.Close()
		l := openPowered(t, fsys, clock, false)
		localfs.SetSyncGatherForTest(l, 3, 5*time.Millisecond)
		fsys.CutAfter(run * 2)
		var pendingAnswered atomic.Bool
		var saved atomic.Pointer[ledger.Staged]
		var mu sync.Mutex
		var others []ledger.Delivery
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { // the sender's retries
			defer wg.Done()
			for range 4 {
				a, err := l.Admit(ctx, d)
				if err != nil {
					return
				}
				if a.Outcome == ledger.Pending || a.Outcome == ledger.Duplicate {
					pendingAnswered.Store(true)
				}
			}
		}()
		go func() { // a worker
			defer wg.Done()
			for range 4 {
				c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Hour)
				if err != nil {
					return
				}
				switch c.Outcome {
				case ledger.Execute:
					s, err := l.Save(ctx, *c.Lease, []byte("verdict"))
					if err != nil {
						return
					}
					saved.Store(&s)
					if l.Complete(ctx, s) != nil {
						return
					}
				case ledger.Publish:
					saved.Store(c.Staged)
				}
			}
		}()
		go func() { // other admissions in the folder
			defer wg.Done()
			for range 3 {
				o := deliveryInShard(folder)
				if _, err := l.Admit(ctx, o); err != nil {
					return
				}
				mu.Lock()
				others = append(others, o)
				mu.Unlock()
			}
		}()
		wg.Wait()
		if pendingAnswered.Load() {
			readmits++
		}
		if saved.Load() != nil {
			saves++
		}
		fsys.Cut()
		l.Close()
		for _, p := range historyPersistences(run) {
			cuts++
			what := fmt.Sprintf("run %d, %s", run, p)
			rebooted := fsys.Recover(p)
			clock := ledger.NewManualClock(clock.Now())
			l := openPowered(t, rebooted, clock, false)
			state, row := ledgertest.RowState(t, l, d)
			if pendingAnswered.Load() && state == "" {
				t.Errorf("%s: a re-admission was answered Pending or Duplicate, and the row is gone", what)
			}
			if s := saved.Load(); s != nil {
				if state != "saved" && state != "done" {
					t.Errorf("%s: a save (or a publish grant) was answered, and the row is %q", what, state)
				} else if row.Report.Digest != ledger.SumBody(s.Report) || row.Fence < s.Lease.Fence {
					t.Errorf("%s: the answered verdict is not the row's: %+v", what, row)
				}
			}
			for _, o := range others {
				if st, _ := ledgertest.RowState(t, l, o); st != "pending" {
					t.Errorf("%s: an answered admission of another key left %q", what, st)
				}
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, clock, testLimits(), true, what)
		}
	}
	t.Logf("%d runs (%d with a re-admission answered, %d with a save answered), %d reboots", runs, readmits, saves, cuts)
}

// TestPowerCutAfterACleanupProcessDiesOverUnsyncedEnds: rows completed or abandoned (their
// done state and index entries never synced) fill a root of 16 slots; a cleanup pass removes
// them and its process dies at the syncfs that would make the removals durable, so the rows
// are gone from the page cache only and the capacity still counts them. A live process's
// admission meets Full, finishes the batch (recoverBatchIfAny) and is admitted; the power is
// cut at every step of that admission. After each reboot: rows legible, capacity never
// understated, an answered admission kept, a removed row's replay (clock stepped back) stale
// or the row still there, and the prepared root's capacity equal to its rows.
func TestPowerCutAfterACleanupProcessDiesOverUnsyncedEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testLimits()
	limits.RecordCap = 16
	start := epoch
	clock := ledger.NewManualClock(start)
	base := powerfs.New()
	if err := base.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, base, clock, limits, true)
	var ended []ledger.Delivery
	for i := range 16 {
		d := deliveryInShard([]byte{0x00, 0x05, 0x10, 0x80}[i%4])
		d.SignedAt = clock.Now()
		d.Binding.Scheme = "standard-webhooks"
		ledgertest.MustAdmit(t, l, d)
		s := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
		if i%3 == 0 {
			if err := l.Abandon(ctx, s, "gone"); err != nil {
				t.Fatal(err)
			}
		} else {
			ledgertest.MustComplete(t, l, s)
		}
		ended = append(ended, d)
	}
	l.Close()
	clock.Advance(3 * time.Hour)
	// The cleanup process dies at its syncfs.
	dying := &syncFault{FS: base, dieAtSyncFS: true}
	cl, err := localfs.Open(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: dying})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Cleanup(ctx, ""); err == nil {
		t.Fatal("the cleanup was answered although its process died at its syncfs")
	}
	cl.Close()
	fresh := newDelivery(time.Time{})
	steps := cutSteps(base, func(m *powerfs.FS) {
		l := openPoweredWith(t, m, clock, limits, false)
		m.ResetCalls()
		l.Admit(ctx, fresh)
		l.Close()
	})
	points := 0
	for _, step := range steps {
		fsys := base.Clone()
		l := openPoweredWith(t, fsys, clock, limits, false)
		fsys.ResetCalls()
		fsys.CutAfter(step)
		a, err := l.Admit(ctx, fresh)
		answered := !fsys.IsCut()
		if answered && (err != nil || a.Outcome != ledger.Admitted) {
			t.Fatalf("the admission with no cut: %+v %v", a, err)
		}
		fsys.Cut()
		l.Close()
		for _, p := range syncPersistences(step) {
			points++
			what := fmt.Sprintf("admission after a dead cleanup, cut at step %d (answered %v), %s", step, answered, p)
			rebooted := fsys.Recover(p)
			back := ledger.NewManualClock(start.Add(time.Minute))
			l := openPoweredWith(t, rebooted, back, limits, false)
			if answered {
				if st, _ := ledgertest.RowState(t, l, fresh); st != "pending" {
					t.Fatalf("%s: the answered admission left %q", what, st)
				}
			}
			gone := 0
			for _, d := range ended {
				if st, _ := ledgertest.RowState(t, l, d); st == "" {
					gone++
					if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Stale {
						t.Fatalf("%s: a removed row's replay answered %v %v", what, a.Outcome, err)
					}
				}
			}
			if answered && gone != len(ended) {
				t.Fatalf("%s: the admission was answered (so the dead cleanup's batch was finished) and %d of %d ended rows are gone", what, gone, len(ended))
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed < st.Rows {
				t.Fatalf("%s: capacity understates: %+v %v", what, st, err)
			}
			l.Close()
			checkPreparedRootWith(t, rebooted, ledger.NewManualClock(clock.Now()), limits, true, what)
		}
	}
	t.Logf("%d power cuts over %d steps", points, len(steps))
}
