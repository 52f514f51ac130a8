package localfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
)

// Tests of the admission logs of format 3 (logged.go). The power-cut and crash tests of the
// rest of the package run on them too (a local root admits through its log); these try what
// only the log makes possible.

// slotsAndRows prepares the root, runs two cleanup laps, and returns its rows and slots.
func slotsAndRows(t *testing.T, open func() *localfs.Ledger) (rows, slots int64) {
	t.Helper()
	l := open()
	defer l.Close()
	cleanupLap(t, l)
	cleanupLap(t, l)
	st, err := l.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Rows, st.CapacityUsed
}

// dieAtRowRename crashes the process at the rename of a row's state file.
func dieAtRowRename(op faultfs.Op, p string) faultfs.Action {
	if op == faultfs.OpRename && filepath.Ext(p) == ".state" && filepath.Base(p) != localfs.ShardCapacityFile {
		return faultfs.Crash
	}
	return faultfs.Pass
}

// TestReplayGivesBackADeadAdmissionsSlotOnce: process A admits X through its log and dies
// before the rename (its record counts X's slot); process B, which owns another slot, admits
// X again with a slot of its own. Replaying A's log must give A's slot back (nothing else
// ever will), and a replay that crashes after that give-back and runs again must not give it
// back twice (the records' Replayed marks). Afterwards the root counts exactly its rows.
func TestReplayGivesBackADeadAdmissionsSlotOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	b := openRoot(t, dir, localfs.Config{Clock: clock})
	ledgertest.MustAdmit(t, b, deliveryInShard(0x10)) // b takes a slot
	if localfs.LogSlotForTest(b) < 0 {
		b.Close()
		t.Skip("no admission log on this file system")
	}
	x := deliveryInShard(0x20)
	afs := faultfs.New(localfs.OSFS{}, nil)
	afs.SetRule("die at the row's rename", dieAtRowRename)
	a := openRoot(t, dir, localfs.Config{Clock: clock, FS: afs})
	if _, err := a.Admit(ctx, x); err == nil {
		t.Fatal("the admission survived its crash")
	}
	a.Close()
	if got := localfs.LogSlotForTest(b); got != 0 {
		t.Fatalf("b admits with slot %d, want 0", got)
	}
	// b does not replay (it holds no maintenance lock here): it admits X anew.
	if adm, err := b.Admit(ctx, x); err != nil || adm.Outcome != ledger.Admitted {
		t.Fatalf("x admitted again: %+v %v", adm, err)
	}
	// A replay crashes after its give-back, at the header that would retire A's log.
	rfs := faultfs.New(localfs.OSFS{}, nil)
	rfs.SetRule("die at the retirement", func(op faultfs.Op, p string) faultfs.Action {
		if op == faultfs.OpWrite && strings.HasSuffix(p, "01.log") {
			return faultfs.Crash
		}
		return faultfs.Pass
	})
	if l, err := localfs.Open(ctx, dir, localfs.Config{Limits: testLimits(), Clock: clock, FS: rfs}); err == nil {
		l.Close()
		t.Fatal("the replay survived its crash")
	}
	b.Close()
	rows, slots := slotsAndRows(t, func() *localfs.Ledger { return openRoot(t, dir, localfs.Config{Clock: clock}) })
	if rows != 2 || slots != rows {
		t.Fatalf("after the replays: %d rows, %d slots, want 2 and 2", rows, slots)
	}
}

// TestCleanupNeverForgetsARowALiveEntryNames: a row admitted through a log is finished and
// past its retention while its entry is still live (its owner has not checkpointed). A
// cleanup by another process must leave it: removed, then the power cut, the replay of the
// owner's log would write it back as pending, and its verdict would be published twice.
func TestCleanupNeverForgetsARowALiveEntryNames(t *testing.T) {
	t.Parallel()
	limits := testLimits()
	limits.QueueCeiling = 0
	clock := ledger.NewManualClock(epoch)
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	owner := openPoweredWith(t, fsys, clock, limits, true)
	d := newDelivery(epoch)
	ledgertest.MustAdmit(t, owner, d)
	if err := localfs.KeepLogLiveForTest(owner); err != nil {
		t.Fatal(err)
	}
	ledgertest.FinishRow(t, owner, clock, d)
	clock.Set(epoch.Add(2 * time.Hour))
	cleaner := openPoweredWith(t, fsys, clock, limits, false)
	cleanupLap(t, cleaner)
	cleaner.Close()
	fsys.Cut()
	owner.Close()
	for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}} {
		l := openPoweredWith(t, fsys.Recover(p), clock, limits, false)
		// Done, or saved (the Complete's rename may be lost: it publishes the same frozen
		// verdict again), or gone; never back before its verdict.
		if st, _ := ledgertest.RowState(t, l, d); st != "done" && st != "saved" && st != "" {
			t.Fatalf("%s: the finished row came back %q", p, st)
		}
		l.Close()
	}
}

// TestANewLogStartsAboveEveryMarkOfItsSlot: a slot's log removed by hand (the records still
// mark its old entries) is made again above every generation they mark, so an entry of the
// new log never looks counted by an old mark: a power cut that loses the record and the
// rename of an answered admission must still leave its slot counted after the replay.
func TestANewLogStartsAboveEveryMarkOfItsSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	l := openPoweredWith(t, fsys, clock, testLimits(), true)
	for range 3 {
		ledgertest.MustAdmit(t, l, deliveryInShard(0x30))
	}
	l.Close() // retires the log: its header moves to the next generation
	if err := fsys.Remove("/power/root/logs/00.log"); err != nil {
		t.Fatal(err)
	}
	fsys.SyncAll()
	l = openPoweredWith(t, fsys, clock, testLimits(), false)
	d := deliveryInShard(0x30)
	if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	fsys.Cut()
	l.Close()
	rebooted := fsys.Recover(powerfs.Persistence{Keep: powerfs.Nothing})
	rows, slots := slotsAndRows(t, func() *localfs.Ledger { return openPoweredWith(t, rebooted, clock, testLimits(), false) })
	if rows != 4 || slots != rows {
		t.Fatalf("after the reboot: %d rows, %d slots, want 4 and 4", rows, slots)
	}
}

// loggedRows admits three keys through a fresh process's log on fsys (two in one shard, one
// borrowing nothing), and returns them with their answers.
func loggedRows(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock) (*localfs.Ledger, []ledger.Delivery, []ledger.Admission) {
	t.Helper()
	l := openPowered(t, fsys, clock, false)
	ds := []ledger.Delivery{deliveryInShard(0x51), deliveryInShard(0x51), deliveryInShard(0x52)}
	var as []ledger.Admission
	for _, d := range ds {
		a, err := l.Admit(context.Background(), d)
		if err != nil || a.Outcome != ledger.Admitted {
			t.Fatalf("admit: %+v %v", a, err)
		}
		as = append(as, a)
	}
	return l, ds, as
}

// checkAnswered checks that every answered admission is there as answered (its evaluation
// id), and that another admission into the same shard goes through.
func checkAnswered(t *testing.T, l *localfs.Ledger, ds []ledger.Delivery, as []ledger.Admission, what string) {
	t.Helper()
	ctx := context.Background()
	for i, d := range ds {
		row, err := l.Inspect(ctx, d.Key())
		if err != nil || row.EvaluationID != as[i].EvaluationID || row.Binding != d.Binding {
			t.Fatalf("%s: answered admission %d came back as %+v %v, want evaluation %s", what, i, row, err, as[i].EvaluationID)
		}
	}
	if a, err := l.Admit(ctx, deliveryInShard(0x51)); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("%s: a later admission into the shard: %+v %v", what, a, err)
	}
}

// TestPowerCutInACheckpoint cuts the power at every call of a checkpoint that retires three
// answered admissions (their records and rows written unsynced), and reboots with each way of
// keeping what no sync made durable. The replay at the next Open must bring back every one
// as answered, another admission into their shard must go through, and the prepared root
// must count exactly its rows.
func TestPowerCutInACheckpoint(t *testing.T) {
	t.Parallel()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	dry := base.Clone()
	l, _, _ := loggedRows(t, dry, clock)
	dry.ResetCalls()
	if err := localfs.CheckpointForTest(l); err != nil {
		t.Fatal(err)
	}
	calls := dry.Calls()
	l.Close()
	if calls < 2 {
		t.Fatalf("a checkpoint of %d calls", calls)
	}
	points := 0
	for step := 0; step <= calls; step++ {
		m := base.Clone()
		l, ds, as := loggedRows(t, m, clock)
		m.ResetCalls()
		m.CutAfter(step)
		err := localfs.CheckpointForTest(l)
		if !m.IsCut() && err != nil {
			t.Fatalf("step %d: checkpoint with no cut: %v", step, err)
		}
		m.Cut()
		l.Close()
		for _, p := range append(syncPersistences(step), folderPersistences(m)...) {
			points++
			what := fmt.Sprintf("checkpoint cut at call %d of %d, %s", step, calls, p)
			rebooted := m.Recover(p)
			l := openPowered(t, rebooted, clock, false)
			checkAnswered(t, l, ds, as, what)
			l.Close()
			checkPreparedRootWith(t, rebooted, clock, testLimits(), true, what)
		}
	}
	t.Logf("%d power cuts over %d calls", points, calls)
}

// TestPowerCutInAReplay: a process admits three keys through its log and dies with its entries
// live (its records and rows in the page cache only); the power may go then (any subset of
// its writes kept), and again at every call of the replay the next Open runs. After each
// reboot, the next replay must bring back every answered admission as answered, another
// admission into the shard must go through, and the prepared root must count exactly its
// rows.
func TestPowerCutInAReplay(t *testing.T) {
	t.Parallel()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	dead := base.Clone()
	l, ds, as := loggedRows(t, dead, clock)
	if err := localfs.KeepLogLiveForTest(l); err != nil {
		t.Fatal(err)
	}
	l.Close() // dies with its entries live: its lock is let go, nothing is retired
	points := 0
	for _, first := range []powerfs.Persistence{{Keep: powerfs.Everything}, {Keep: powerfs.Nothing}, {Keep: powerfs.Random, Seed: 7}} {
		before := dead.Clone()
		if first.Keep != powerfs.Everything {
			before.Cut()
			before = before.Recover(first)
		}
		steps := cutSteps(before, func(m *powerfs.FS) {
			m.ResetCalls()
			openPowered(t, m, clock, false).Close()
		})
		for _, step := range steps {
			m := before.Clone()
			m.ResetCalls()
			m.CutAfter(step)
			l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: m})
			if err == nil {
				l.Close()
			}
			m.Cut()
			for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Random, Seed: uint64(step)}, {Keep: powerfs.Random, Seed: uint64(step), Ordered: true}} {
				points++
				what := fmt.Sprintf("dead process, then %s, replay cut at call %d, %s", first, step, p)
				rebooted := m.Recover(p)
				l := openPowered(t, rebooted, clock, false)
				checkAnswered(t, l, ds, as, what)
				l.Close()
				checkPreparedRootWith(t, rebooted, clock, testLimits(), true, what)
			}
		}
	}
	t.Logf("%d power cuts", points)
}
