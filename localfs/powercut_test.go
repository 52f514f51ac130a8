package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Power-cut tests: the harness (a root in a powerfs, the ways a reboot recovers what no sync made
// durable, the calls to cut before) and the sweeps over every step of every operation and of
// opening a root. The tests of one mechanism each are in powercut_*_test.go and
// groupcommit_test.go; process crashes, where the page cache survives, are in crash_test.go.

// powerRoot is where the power-cut tests keep their root inside a powerfs.
const powerRoot = "/power/root"

// powerScale is how much of the power-cut search runs: 1 in `make test`, AMISS_POWER_SCALE in
// `make powercut` (more histories, and more ways of recovering from each cut).
func powerScale() int {
	if v, err := strconv.Atoi(os.Getenv("AMISS_POWER_SCALE")); err == nil && v > 1 {
		return v
	}
	return 1
}

// randomPersistences are n random ways of recovering, alternately in order and any subset,
// their seeds from seed on.
func randomPersistences(seed uint64, n int) []powerfs.Persistence {
	var ps []powerfs.Persistence
	for i := range n {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Random, Seed: seed + uint64(i), Ordered: (seed+uint64(i))%2 == 0})
	}
	return ps
}

// powerPersistences are the ways a power loss is recovered from after a cut that matters on
// its own: nothing unsynced kept, everything kept, and some at random, in order (a journaling
// file system) or any subset (no journal, the disk of the project's own machine).
func powerPersistences() []powerfs.Persistence {
	return append([]powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}},
		randomPersistences(1, 2+6*(powerScale()-1))...)
}

// stepPersistences are the ways a cut at one step of many is recovered from: nothing kept and
// one at random that changes from step to step (everything kept is what a process crash
// leaves, which TestCrashAtEveryStep covers on the real file system); with powerScale() > 1,
// everything kept too and 3 x powerScale() at random.
func stepPersistences(step int) []powerfs.Persistence {
	if powerScale() > 1 {
		return syncPersistences(step)
	}
	return append([]powerfs.Persistence{{Keep: powerfs.Nothing}}, randomPersistences(uint64(step)*64+1, 1)...)
}

// syncPersistences are the ways a cut before a sync (cutSteps) is recovered from: nothing kept
// and two at random (a prefix in order, any subset); with powerScale() > 1, everything kept
// too and 3 x powerScale() at random.
func syncPersistences(step int) []powerfs.Persistence {
	ps := []powerfs.Persistence{{Keep: powerfs.Nothing}}
	if powerScale() > 1 {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Everything})
	}
	n := 2 // one in order, one any subset
	if powerScale() > 1 {
		n = 3 * powerScale()
	}
	return append(ps, randomPersistences(uint64(step)*64+1, n)...)
}

// historyPersistences are the ways history h's cut is recovered from: nothing kept,
// everything kept, and some at random.
func historyPersistences(h int) []powerfs.Persistence {
	return append([]powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}},
		randomPersistences(uint64(h)*16+1, 2*powerScale())...)
}

// cutSteps are the calls before which a test cuts the power in an operation, run by run on a
// copy of fsys (run calls ResetCalls when the operation starts): every call and the answer when
// powerScale() > 1; otherwise each sync and the answer. Between two syncs only what was
// written changes, not what is durable, so a cut before a sync, recovered in order, keeps any
// prefix of what was done since the last one: the states a cut between them leaves on disk.
func cutSteps(fsys *powerfs.FS, run func(*powerfs.FS)) []int {
	return cutStepsEvery(fsys, run, powerScale() > 1)
}

// cutStepsEvery is cutSteps, with every call cut only when every is set (an operation of
// thousands of calls, such as making a root, is cut before its syncs only, at any scale).
func cutStepsEvery(fsys *powerfs.FS, run func(*powerfs.FS), every bool) []int {
	dry := fsys.Clone()
	run(dry)
	if every {
		steps := make([]int, dry.Calls()+1)
		for i := range steps {
			steps[i] = i
		}
		return steps
	}
	return append(dry.Syncs(), dry.Calls())
}

// folderPersistences are, for a cut file system, the recoveries that keep every unsynced
// change but those of one folder, one per folder holding any: a file system without a journal
// writes each folder back on its own, so a change can survive an earlier one made elsewhere
// (a cleanup's removals without the batch record that says which slots to give back).
func folderPersistences(m *powerfs.FS) []powerfs.Persistence {
	var ps []powerfs.Persistence
	for _, dir := range m.DirtyFolders() {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Everything, LoseFolder: dir})
	}
	return ps
}

// durableOps are the operations whose answer promises that a power loss keeps their effect:
// someone outside the host relies on it (file-ledger.md, "What each write makes durable").
// The others may be forgotten by a power loss, never half kept.
var durableOps = []string{"admit", "readmit-later-signature", "save", "revive"}

func openPowered(t testing.TB, fsys *powerfs.FS, clock *ledger.ManualClock, create bool) *localfs.Ledger {
	t.Helper()
	return openPoweredWith(t, fsys, clock, testLimits(), create)
}

// openOn opens the root through fsys, a wrapper of a powerfs (a process that dies, a sync
// that fails), as a process would; the test fails if it cannot.
func openOn(t testing.TB, fsys localfs.FS, clock *ledger.ManualClock) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: fsys})
	if err != nil {
		t.Fatalf("open the root: %v", err)
	}
	return l
}

// eachReboot recovers the cut fsys every way (powerPersistences) and runs check on a ledger
// opened on each reboot.
func eachReboot(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock, check func(p powerfs.Persistence, l *localfs.Ledger)) {
	t.Helper()
	for _, p := range powerPersistences() {
		l := openPowered(t, fsys.Recover(p), clock, false)
		check(p, l)
		l.Close()
	}
}

// rowAfterEachReboot checks, on every reboot of the cut fsys (eachReboot), that d's row is in
// one of the states want; answered says what was answered before the cut.
func rowAfterEachReboot(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock, d ledger.Delivery, answered string, want ...string) {
	t.Helper()
	eachReboot(t, fsys, clock, func(p powerfs.Persistence, l *localfs.Ledger) {
		if state, _ := ledgertest.RowState(t, l, d); !slices.Contains(want, state) {
			t.Errorf("%s: %s, and after the power cut the row is %q, want %v", p, answered, state, want)
		}
	})
}

// poweredRootWithARow returns a powerfs holding a new root with one permanent delivery
// admitted, everything synced.
func poweredRootWithARow(t testing.TB, clock *ledger.ManualClock) (*powerfs.FS, ledger.Delivery) {
	t.Helper()
	fsys := newPoweredRoot(t, clock)
	d := newDelivery(time.Time{})
	l := openPowered(t, fsys, clock, false)
	ledgertest.MustAdmit(t, l, d)
	l.Close()
	fsys.SyncAll()
	return fsys, d
}

// newPoweredRoot returns a powerfs holding a new root, everything synced.
func newPoweredRoot(t testing.TB, clock *ledger.ManualClock) *powerfs.FS {
	t.Helper()
	fsys := powerfs.New()
	if err := fsys.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	openPowered(t, fsys, clock, true).Close()
	fsys.SyncAll()
	return fsys
}

// errAnsweredThenCut stands for the answer of an operation that succeeded just before the
// power was cut, when its effect may be forgotten: nothing of it, or all of it.
var errAnsweredThenCut = errors.New("answered success, then the power was cut")

// TestPowerCutAtEveryStep cuts the power at every step of every operation (before each sync
// in `make test`, before every change and sync in `make powercut`: see cutSteps), and right
// after its answer, then reboots with each way of keeping what no sync made durable
// (powerfs), from nothing to everything. After each it checks what the process-crash test
// checks (the row legible, nothing or all of an unanswered operation, fences never back,
// capacity never understated, the row's work can finish), that an answered admission, save,
// re-admission or revive is kept exactly as answered, and that the root verifies clean with
// every slot accounted for once preparation has run.
func TestPowerCutAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledger.NewManualClock(epoch)
	base := newPoweredRoot(t, clock)
	continuations := ledgertest.Continuations()
	points := 0
	for _, op := range ledgertest.FaultOps() {
		fsys := base.Clone()
		healthy := openPowered(t, fsys, clock, false)
		d, run := op.Prep(t, healthy, clock)
		// Another admission in the row's folder recounts its slot (the record no longer names
		// it pending), as a busy root's would: a slot still pending is given back by recounting
		// whenever its row is missing, which would hide a removal whose release was lost.
		ledgertest.MustAdmit(t, healthy, deliveryInShard(d.Key()[0]))
		_, before := ledgertest.RowState(t, healthy, d)
		healthy.Close()
		fsys.SyncAll() // what came before the operation was answered and is durable
		steps := cutSteps(fsys, func(m *powerfs.FS) {
			l := openPowered(t, m, ledger.NewManualClock(clock.Now()), false)
			m.ResetCalls()
			run(l)
			l.Close()
		})
		for _, step := range steps {
			// Each reboot goes on from the same instant: what follows one (finishing the row,
			// cleanup) moves its own clock only.
			start := clock.Now()
			m := fsys.Clone()
			faulty := openPowered(t, m, ledger.NewManualClock(start), false)
			m.ResetCalls()
			m.CutAfter(step)
			opErr := run(faulty)
			answered := !m.IsCut()
			var want ledger.Row
			if answered {
				if opErr != nil {
					t.Fatalf("%s: failed with no cut: %v", op.Name, opErr)
				}
				_, want = ledgertest.RowState(t, faulty, d)
				m.Cut()
				if !slices.Contains(durableOps, op.Name) {
					opErr = errAnsweredThenCut
				}
			}
			faulty.Close()
			for _, p := range append(syncPersistences(step), folderPersistences(m)...) {
				points++
				clock := ledger.NewManualClock(start)
				what := fmt.Sprintf("%s, power cut at step %d (answered: %v), %s", op.Name, step, answered, p)
				rebooted := m.Recover(p)
				l := openPowered(t, rebooted, clock, false)
				if answered && opErr == nil {
					if _, got := ledgertest.RowState(t, l, d); !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: the answered row was not kept:\n got  %+v\n want %+v", what, got, want)
					}
				}
				next := continuations[points%len(continuations)]
				ledgertest.CheckAfterFault(t, l, clock, op, what, d, before, opErr, next)
				l.Close()
				checkPreparedRoot(t, ctx, rebooted, clock, what)
			}
		}
	}
	t.Logf("%d power cuts", points)
}

// checkPreparedRoot prepares the root (as a restarted process does) and checks that it
// verifies clean and that its capacity counts exactly its rows.
func checkPreparedRoot(t *testing.T, ctx context.Context, fsys *powerfs.FS, clock *ledger.ManualClock, what string) {
	t.Helper()
	checkPreparedRootWith(t, fsys, clock, testLimits(), false, what)
}

// TestPowerCutWhileOpening cuts the power before every sync (see cutSteps) of making a new root,
// and after the answer, then reboots with each way of keeping what was not synced: the next
// start opens the root (making it again where the first start was never answered), which
// verifies clean and counts its capacity exactly.
func TestPowerCutWhileOpening(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := powerfs.New()
	if err := empty.Mkdir("/power", 0o700); err != nil {
		t.Fatal(err)
	}
	empty.SyncAll()
	cutPoints := cutStepsEvery(empty, func(m *powerfs.FS) {
		l, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: ledger.NewManualClock(fixtureEpoch.Add(time.Hour)), FS: m, Create: true})
		if err != nil {
			t.Fatalf("new root: %v", err)
		}
		l.Close()
	}, false)
	points := 0
	for _, step := range cutPoints {
		m := empty.Clone()
		clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
		m.CutAfter(step)
		l, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: m, Create: true})
		answered := !m.IsCut()
		if answered {
			if err != nil {
				t.Fatalf("new root: failed with no cut: %v", err)
			}
			l.Close()
			m.Cut()
		}
		// The 256 row folders are all written by these steps: losing one folder is tried
		// for the root's own folders and a sample of the row folders (all of them in make
		// powercut).
		var losing []powerfs.Persistence
		for i, p := range folderPersistences(m) {
			if powerScale() > 1 || i%37 == 0 || !strings.Contains(p.LoseFolder, "/"+localfs.RowsDir+"/") {
				losing = append(losing, p)
			}
		}
		for _, p := range append(syncPersistences(step), losing...) {
			points++
			what := fmt.Sprintf("new root, power cut at step %d (answered: %v), %s", step, answered, p)
			rebooted := m.Recover(p)
			l, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: testLimits(), Clock: clock, FS: rebooted, Create: !answered})
			if err != nil {
				t.Fatalf("%s: the next start: %v", what, err)
			}
			if v, err := l.Verify(ctx, nil); err != nil || !v.OK() {
				t.Fatalf("%s: verify: %v %v", what, err, v.Problems)
			}
			if st, err := l.Stats(ctx); err != nil || st.CapacityUsed != st.Rows {
				t.Fatalf("%s: capacity %d for %d rows (%v)", what, st.CapacityUsed, st.Rows, err)
			}
			ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
			l.Close()
		}
	}
	t.Logf("new root: %d power cuts", points)
}

// smallCapLimits has one slot per capacity shard: a second key in a shard borrows.
func smallCapLimits() ledger.Limits {
	l := testLimits()
	l.RecordCap = 256
	return l
}

func openPoweredWith(t testing.TB, fsys *powerfs.FS, clock *ledger.ManualClock, limits ledger.Limits, create bool) *localfs.Ledger {
	t.Helper()
	l, err := localfs.Open(context.Background(), powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: fsys, Create: create})
	if err != nil {
		t.Fatalf("open the root: %v", err)
	}
	return l
}

// checkPreparedRootWith is checkPreparedRoot for a root of the given limits; it also runs a
// cleanup lap first when lap is set (a lap recounts what interrupted admissions left pending).
func checkPreparedRootWith(t *testing.T, fsys *powerfs.FS, clock *ledger.ManualClock, limits ledger.Limits, lap bool, what string) {
	t.Helper()
	ctx := context.Background()
	p, err := localfs.Prepare(ctx, powerRoot, localfs.Config{Limits: limits, Clock: clock, FS: fsys})
	if err != nil {
		t.Fatalf("%s: prepare: %v", what, err)
	}
	defer p.Close()
	v, err := p.Verify(ctx, nil)
	if err != nil || !v.OK() {
		t.Fatalf("%s: verify: %v %v", what, err, v.Problems)
	}
	if lap {
		cleanupLap(t, p)
	}
	st, err := p.Stats(ctx)
	if err != nil || st.CapacityUsed != st.Rows {
		t.Fatalf("%s: after prepare: capacity %d for %d rows (%v)", what, st.CapacityUsed, st.Rows, err)
	}
}

// syncFault is a process's view of a powerfs whose syncs go wrong while the machine, and its
// page cache, go on: the process dies (every sync fails from then on) at its first folder sync
// of a row folder (dieAtRowFolder: what it renamed stays in the page cache, nothing made it
// durable) or at its first syncfs (dieAtSyncFS), or a row folder's sync fails with an I/O
// error, once (failRowFolderOnce) or every time (failRowFolderAlways), and the process lives on.
type syncFault struct {
	*powerfs.FS
	dieAtRowFolder, dieAtSyncFS, failRowFolderOnce, failRowFolderAlways bool
	// dieAtFirstSync: the process dies at its first sync of any kind (a file's fsync or
	// write-back, a folder's sync, syncfs), whatever round its operation takes.
	dieAtFirstSync bool
	dead, failed   atomic.Bool
}

// OpenFile wraps files for dieAtFirstSync.
func (f *syncFault) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !f.dieAtFirstSync {
		return file, err
	}
	return &faultFile{File: file, f: f}, nil
}

// faultFile is a file of a syncFault that dies at its first sync.
type faultFile struct {
	vfs.File
	f *syncFault
}

func (w *faultFile) die() error {
	if w.f.dieAtFirstSync {
		w.f.dead.Store(true)
	}
	if w.f.dead.Load() {
		return errProcessDied
	}
	return nil
}

func (w *faultFile) Sync() error {
	if err := w.die(); err != nil {
		return err
	}
	return w.File.Sync()
}

func (w *faultFile) WriteBack() error {
	if err := w.die(); err != nil {
		return err
	}
	return vfs.WriteBack(w.File)
}

func (w *faultFile) CheckWriteback() error { return vfs.CheckWriteback(w.File) }

func (w *faultFile) Flock(how int) error { return vfs.Flock(w.File, how) }

var (
	errProcessDied      = errors.New("the process died")
	errFolderSyncFailed = errors.New("sync folder: input/output error")
)

func (f *syncFault) SyncDir(name string) error {
	row := strings.Contains(name, "/"+localfs.RowsDir+"/")
	if row && f.dieAtRowFolder || f.dieAtFirstSync {
		f.dead.Store(true)
	}
	if f.dead.Load() {
		return errProcessDied
	}
	if row && (f.failRowFolderAlways || f.failRowFolderOnce && f.failed.CompareAndSwap(false, true)) {
		return errFolderSyncFailed
	}
	return f.FS.SyncDir(name)
}

func (f *syncFault) SyncFS(name string) error {
	if f.dieAtSyncFS || f.dieAtFirstSync {
		f.dead.Store(true)
	}
	if f.dead.Load() {
		return errProcessDied
	}
	return f.FS.SyncFS(name)
}
