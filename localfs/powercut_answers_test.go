package localfs_test

import (
	"context"
	"errors"
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

// Power cuts after answers given from a row read, not written. A process that died between a rename
// and its folder sync, or whose folder sync failed, left the row in the page cache only; an answer
// that promises the row outlives a power loss (a re-admission, a repeated Save or Revive, a Publish
// grant) makes its folder durable first (ops.go, "What each write makes durable").

// TestPowerCutAfterAProcessCrashLosesNoAnsweredAdmission: a process dies in an admission after
// renaming the row into place and before syncing its folder (an OOM kill, a Lambda timeout),
// so the row is in the page cache and not on disk. The sender retries, a new process answers
// the retry (Pending: the row is there, "already admitted"), and then the power goes. The
// answered admission must still be there after the reboot (file-ledger.md: "the sender was
// told 202 and will not send again"; here it was told 200).
func TestPowerCutAfterAProcessCrashLosesNoAnsweredAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := newPoweredRoot(t, clock)
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	d := newDelivery(time.Time{})
	first := openOn(t, dying, clock)
	if _, err := first.Admit(ctx, d); err == nil {
		t.Fatal("the admission was answered although its process died before the folder sync")
	}
	first.Close()
	// A new process answers the sender's retry.
	second := openPowered(t, fsys, clock, false)
	// Answered Pending ("already admitted; queued again": HTTP 200 from the ingress, which
	// also enqueues it), the sender stops sending, as it does for Admitted.
	a, err := second.Admit(ctx, d)
	if err != nil || (a.Outcome != ledger.Admitted && a.Outcome != ledger.Pending) {
		t.Fatalf("retry: %+v %v", a, err)
	}
	second.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the retry was answered %v (evaluation %s)", a.Outcome, a.EvaluationID), "pending")
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

// TestPowerCutAfterAProcessCrashKeepsAPublishedVerdict: a worker's process dies in a Save after
// renaming the saved row into place and before syncing its folder. A new worker claims the row,
// is told to publish the saved verdict (read from the page cache), publishes it and completes;
// then the power goes. After the reboot the row must not run again: its verdict was published,
// and a second evaluation could publish another (file-ledger.md: "the verdict is published next
// and must never be evaluated again").
func TestPowerCutAfterAProcessCrashKeepsAPublishedVerdict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys, d := poweredRootWithARow(t, clock)
	dying := &syncFault{FS: fsys, dieAtRowFolder: true}
	first := openOn(t, dying, clock)
	lease := *ledgertest.MustClaim(t, first, d, ledger.Execute).Lease
	if _, err := first.Save(ctx, lease, []byte("first verdict")); err == nil {
		t.Fatal("the save was answered although its process died before the folder sync")
	}
	first.Close()
	clock.Advance(2 * time.Hour) // the dead worker's lease has run out
	second := openPowered(t, fsys, clock, false)
	c := ledgertest.MustClaim(t, second, d, ledger.Publish)
	if string(c.Staged.Report) != "first verdict" {
		t.Fatalf("publishing %q", c.Staged.Report)
	}
	ledgertest.MustComplete(t, second, *c.Staged) // published
	second.Close()
	fsys.Cut()
	rowAfterEachReboot(t, fsys, clock, d, fmt.Sprintf("the verdict %q was published: a row neither saved nor done is evaluated again", c.Staged.Report),
		"saved", "done")
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

// TestAnswersFromARowReadFailWithTheirSync: when the folder sync of an answer given from a row
// read fails, the answer is an error of class ErrUnavailable with nothing in it: a repeated
// Save, a re-admission answered Pending, a Publish grant.
func TestAnswersFromARowReadFailWithTheirSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys, d := poweredRootWithARow(t, clock)
	l := openOn(t, &syncFault{FS: fsys, failRowFolderAlways: true}, clock)
	defer l.Close()
	if a, err := l.Admit(ctx, d); !errors.Is(err, ledger.ErrUnavailable) || a.Outcome != 0 {
		t.Errorf("re-admission: %+v %v", a, err)
	}
	lease := *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease
	for i := range 2 {
		if s, err := l.Save(ctx, lease, []byte("v")); !errors.Is(err, ledger.ErrUnavailable) || s.Report != nil {
			t.Errorf("save %d: %+v %v", i, s, err)
		}
	}
	// A Save under another fence is refused as before, not as unavailable.
	other := lease
	other.Fence++
	if _, err := l.Save(ctx, other, []byte("w")); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("save under a wrong fence: %v", err)
	}
	clock.Advance(2 * time.Hour)
	if c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", time.Minute); !errors.Is(err, ledger.ErrUnavailable) || c.Staged != nil {
		t.Errorf("publish grant: %+v %v", c, err)
	}
}
