package admlog

// Attack 32: tests written against the promises of the package documentation. Each test says
// which promise it checks; the ones that fail on the current code are findings.

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// hookFile calls onSync (if set) around each Sync of the file it wraps.
type hookFile struct {
	vfs.File
	syncs  atomic.Int64
	onSync func(n int64) // n: the sync's number, from 1; called before the sync runs
}

func (f *hookFile) Sync() error {
	n := f.syncs.Add(1)
	if f.onSync != nil {
		f.onSync(n)
	}
	return f.File.Sync()
}

// wakeGate is the Locker of a sync.Cond that wraps the log's mutex: Unlock is the mutex's,
// Lock (called only by cond.Wait when a waiter wakes) lets the first waker through and holds
// every later one until release is closed. It models a scheduler that runs one woken waiter
// and leaves another one runnable but not running.
type wakeGate struct {
	mu      *sync.Mutex
	wakes   atomic.Int64
	held    chan struct{} // closed once a waker is held
	once    sync.Once
	release chan struct{}
}

func (g *wakeGate) Unlock() { g.mu.Unlock() }

func (g *wakeGate) Lock() {
	if g.wakes.Add(1) > 1 {
		g.once.Do(func() { close(g.held) })
		<-g.release
	}
	g.mu.Lock()
}

// Finding: Reset's guard ("reset while entries wait for their sync") lets a Reset in while an
// Append whose entry a round covered is woken but not yet running. That Append then finds
// durable (now 0, of the new generation) below its sequence and leads rounds with nothing to
// sync, forever: a livelock of fdatasyncs, and an answer only once the new generation's
// sequence passes the old one (the answer is then a sequence of the retired generation,
// indistinguishable from the new entry that bears it). The package says the caller holds off
// appends during a Reset; this checks that the code fails safely when it does not: either the
// Reset is refused, or every Append in flight is answered.
func TestAttack32ResetBetweenARoundAndItsWaiterLivelocks(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 64*Sector)
	defer l.Close()
	holdFirst := make(chan struct{})
	firstHeld := make(chan struct{})
	hf := &hookFile{File: l.f, onSync: func(n int64) {
		if n == 1 {
			close(firstHeld)
			<-holdFirst
		}
	}}
	l.f = hf
	g := &wakeGate{mu: &l.mu, held: make(chan struct{}), release: make(chan struct{})}
	l.cond = sync.NewCond(g)

	type answer struct {
		seq uint64
		err error
	}
	answers := make(chan answer, 3)
	appendOne := func(p string) {
		seq, err := l.Append([]byte(p))
		answers <- answer{seq, err}
	}
	go appendOne("a") // leads the first round, held in its sync
	<-firstHeld
	go appendOne("w")
	go appendOne("x")
	for l.Used() < 4*Sector { // both written: both wait in cond.Wait
		time.Sleep(time.Millisecond)
	}
	close(holdFirst)
	// The first round ends (entry 1 durable); both waiters wake; one leads a round covering
	// entries 2 and 3 and is answered, the other is held before it takes the lock.
	<-g.held
	got := map[uint64]bool{}
	for range 2 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("append: %v", a.err)
		}
		got[a.seq] = true
	}
	// The caller (wrongly) resets now: every entry is durable, no round runs.
	resetErr := l.Reset(3)
	close(g.release)
	syncsBefore := hf.syncs.Load()
	select {
	case a := <-answers:
		t.Logf("reset: %v; the last append answered %d, %v", resetErr, a.seq, a.err)
		return
	case <-time.After(2 * time.Second):
	}
	spun := hf.syncs.Load() - syncsBefore
	// Let it go: three entries of generation 3 take durable past its sequence.
	for i := range 3 {
		if _, err := l.Append(fmt.Appendf(nil, "gen 3 entry %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	a := <-answers
	stuck := uint64(6) // entries 1, 2 and 3 of generation 2: the one not answered before the reset
	for k := range got {
		stuck -= k
	}
	t.Errorf("Reset(3) answered %v while an append (entry %d of generation 2, already durable) was "+
		"woken but not yet answered; that append then ran %d fdatasyncs in 2s with nothing to sync, "+
		"and was answered (seq %d, %v) only after generation 3 reached its sequence",
		resetErr, stuck, spun, a.seq, a.err)
}

// Finding: the package says any failure of a write poisons the log and that Append fails with
// ErrPoisoned; an Append whose own WriteAt fails answers ledger.ErrUnavailable only. A caller
// that tells "the log is dead, replay decides" by ErrPoisoned misses the one append whose
// entry may be on disk.
func TestAttack32AFailedWriteAnswersErrPoisoned(t *testing.T) {
	t.Parallel()
	for name, action := range map[string]faultfs.Action{"fail before": faultfs.FailBefore, "fail after": faultfs.FailAfter} {
		t.Run(name, func(t *testing.T) { checkPoisonedBy(t, faultfs.OpWrite, action) })
	}
}

// attackPayload gives payloads of very different sizes: empty, exactly one sector, one byte
// into a second sector, three and five sectors (so that multi-sector entries tear inside).
func attackPayload(w, i int) []byte {
	sizes := []int{0, Sector - entryHead - entryTrailer, Sector - entryHead - entryTrailer + 1, 1400, 2400}
	n := sizes[(w*3+i)%len(sizes)]
	p := bytes.Repeat([]byte{byte('a' + w)}, n)
	copy(p, fmt.Sprintf("w%d i%d", w, i))
	return p
}

// Held: power cuts at every call of Create, Open, concurrent appends of very different sizes,
// and Resets between rounds of them (the caller holding appends off); every answered entry of
// the header's generation is read back, the header is the last generation a Reset answered (or
// the one a Reset in flight wrote), and no read fails.
func TestAttack32PowerCutsAcrossResetsAndSizes(t *testing.T) {
	t.Parallel()
	type outcome struct {
		lastOK, attempted uint64
		answered          map[uint64]map[uint64][]byte // by generation, by sequence
	}
	run := func(fsys *powerfs.FS) outcome {
		o := outcome{answered: map[uint64]map[uint64][]byte{}}
		if fsys.Mkdir("/logs", 0o700) != nil || fsys.SyncDir("/") != nil {
			return o
		}
		if Create(fsys, "/logs/00.log", 40*Sector, 1) != nil {
			return o
		}
		o.attempted = 2
		l, err := Open(fsys, "/logs/00.log", 2)
		if err != nil {
			return o
		}
		o.lastOK = 2
		for phase, gen := range []uint64{2, 3, 5} {
			if gen != 2 {
				o.attempted = gen
				if l.Reset(gen) != nil {
					return o
				}
				o.lastOK = gen
			}
			var mu sync.Mutex
			o.answered[gen] = map[uint64][]byte{}
			var wg sync.WaitGroup
			for w := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 3 {
						p := attackPayload(w+phase, i)
						seq, err := l.Append(p)
						if err != nil {
							return
						}
						mu.Lock()
						o.answered[gen][seq] = p
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		return o
	}
	dry := powerfs.New()
	if o := run(dry); o.lastOK != 5 || len(o.answered[5]) != 9 {
		t.Fatalf("without a cut: generation %d, %d answered", o.lastOK, len(o.answered[5]))
	}
	steps := dry.Calls()
	checked := 0
	for cut := 0; cut <= steps; cut++ {
		fsys := powerfs.New()
		fsys.CutAfter(cut)
		o := run(fsys)
		fsys.Cut()
		for _, p := range persistences(cut, 24) {
			what := fmt.Sprintf("cut after %d of %d, %v", cut, steps, p)
			data, err := fsys.Recover(p).ReadFile("/logs/00.log")
			if err != nil {
				if o.lastOK != 0 {
					t.Fatalf("%s: the log is gone after Open answered: %v", what, err)
				}
				continue
			}
			g, _, err := Read(data)
			if err != nil {
				t.Fatalf("%s: read: %v", what, err)
			}
			if o.lastOK == 0 {
				continue
			}
			if g != o.lastOK && g != o.attempted {
				t.Fatalf("%s: generation %d; the last answered reset was to %d, the last attempted to %d", what, g, o.lastOK, o.attempted)
			}
			if g == o.lastOK {
				checked++
				checkAnswered(t, what, data, g, o.answered[g])
			}
		}
	}
	t.Logf("%d cuts, %d recoveries checked", steps+1, checked)
}

// Held: a log that held large entries of an older generation (its owner dead and replayed) is
// opened again, by a new owner with a newer generation (a generation equal to the old one, or
// one below it, is refused by Open, which reads the header in place); small concurrent
// entries overwrite the old ones' first sectors. At every cut, every answered entry reads back
// and the stale entries beyond the tail, whole and with their own vouched fields, are neither
// read nor taken for damage (the salt tells them apart even at an equal generation).
func TestAttack32PowerCutsOverStaleEntries(t *testing.T) {
	t.Parallel()
	base := powerfs.New()
	if base.Mkdir("/logs", 0o700) != nil || base.SyncDir("/") != nil {
		t.Fatal("mkdir")
	}
	if err := Create(base, "/logs/00.log", 48*Sector, 1); err != nil {
		t.Fatal(err)
	}
	old, err := Open(base, "/logs/00.log", 4)
	if err != nil {
		t.Fatal(err)
	}
	// Old entries: each waits for its own sync, so each vouches for all before it.
	for i := range 10 {
		if _, err := old.Append(attackPayload(0, 3+i%2)); err != nil {
			t.Fatal(err)
		}
	}
	oldSalt := old.salt
	old.Close()
	base.SyncAll()
	for _, gen := range []uint64{5, 4, 3} {
		t.Run(fmt.Sprintf("open as %d", gen), func(t *testing.T) {
			if gen <= 4 {
				// Open now reads the header in place and refuses a generation that does not
				// grow past it (the caller's high-water, checked again), so stale entries of
				// an equal generation are never appended among.
				if l, err := Open(base.Clone(), "/logs/00.log", gen); err == nil {
					l.Close()
					t.Fatalf("opened as generation %d over a header of generation 4", gen)
				}
				return
			}
			run := func(fsys *powerfs.FS) (map[uint64][]byte, bool) {
				l, err := Open(fsys, "/logs/00.log", gen)
				if err != nil {
					return nil, false
				}
				defer l.Close()
				small := func(w, i int) []byte { return attackPayload(w, i%3) }
				return appendEach(l, 3, 3, small, nil), true
			}
			dry := base.Clone()
			dry.ResetCalls()
			if a, ok := run(dry); !ok || len(a) != 9 {
				t.Fatalf("without a cut: %v, %d answered", ok, len(a))
			}
			steps := dry.Calls()
			for cut := 0; cut <= steps; cut++ {
				fsys := base.Clone()
				fsys.CutAfter(cut)
				answered, opened := run(fsys)
				fsys.Cut()
				for _, p := range persistences(cut, 24) {
					what := fmt.Sprintf("cut after %d of %d, %v", cut, steps, p)
					data, err := fsys.Recover(p).ReadFile("/logs/00.log")
					if err != nil {
						t.Fatal(err)
					}
					g, entries, err := Read(data)
					if err != nil {
						t.Fatalf("%s: read: %v", what, err)
					}
					if opened {
						checkAnswered(t, what, data, gen, answered)
					} else if bytes.Equal(data[12:20], oldSalt) && (g != 4 || len(entries) != 10) {
						t.Fatalf("%s: the old header (generation %d) with %d of its 10 entries", what, g, len(entries))
					} else if !bytes.Equal(data[12:20], oldSalt) && (g != gen || len(entries) != 0) {
						t.Fatalf("%s: a new header of generation %d with %d entries", what, g, len(entries))
					}
				}
			}
		})
	}
}

// Held: a payload that embeds complete encoded entries at every sector boundary (the right
// magic and generation, every sequence, vouched at the maximum, a CRC with no salt, with a
// zero salt, and with the salt of the previous generation), followed by a torn entry, is read
// as the log's end: neither an entry nor damage.
func TestAttack32ForgedEntriesInPayloads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 64*Sector)
	defer l.Close()
	oldSalt := l.salt
	if err := l.Reset(3); err != nil {
		t.Fatal(err)
	}
	var forged []byte
	for k := range 6 {
		for _, salt := range [][]byte{nil, make([]byte, 8), oldSalt} {
			for _, gen := range []uint64{2, 3} {
				e := encodeEntry(gen, salt, uint64(k%3+1), ^uint64(0), []byte("forged"), Sector)
				forged = append(forged, e...)
			}
		}
	}
	// The forged entries start at sector boundaries of the file: the head is 32 bytes, so
	// the payload starts 480 bytes before the entry's second sector.
	p := append(bytes.Repeat([]byte{'.'}, Sector-entryHead), forged...)
	if _, err := l.Append(p); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("second")); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, path)
	if _, entries, err := Read(data); err != nil || len(entries) != 2 || !bytes.Equal(entries[0].Payload, p) {
		t.Fatalf("whole: %d entries, %v", len(entries), err)
	}
	// The first entry torn in its first sector: the log ends before it.
	torn := bytes.Clone(data)
	torn[Sector+entryHead-1] ^= 1
	// ... and the second entry lost too.
	second := Sector + int(entrySize(len(p)))
	copy(torn[second:second+Sector], make([]byte, Sector))
	if _, entries, err := Read(torn); err != nil || len(entries) != 0 {
		t.Fatalf("torn: %d entries, %v; want none and no error", len(entries), err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := vfs.OSFS{}.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Held: with every mutating call failing in turn (before and after its effect), with
// concurrent appenders over a power-cut file system, no append is answered for an entry a
// successful sync did not cover: a cut right after the failure, keeping nothing unsynced,
// keeps every answered entry.
func TestAttack32NoAnswerWithoutASyncUnderFaults(t *testing.T) {
	t.Parallel()
	run := func(fsys *faultfs.FS) (map[uint64][]byte, *Log) {
		l, err := Open(fsys, "/logs/00.log", 2)
		if err != nil {
			return nil, nil
		}
		answered := appendEach(l, 4, 4, attackPayload, func(err error) {
			if !errors.Is(err, ErrPoisoned) && !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("append: %v", err)
			}
		})
		return answered, l
	}
	base := powerfs.New()
	if base.Mkdir("/logs", 0o700) != nil || base.SyncDir("/") != nil {
		t.Fatal("mkdir")
	}
	if err := Create(base, "/logs/00.log", 64*Sector, 1); err != nil {
		t.Fatal(err)
	}
	base.SyncAll()
	for n := range 40 {
		for _, after := range []bool{false, true} {
			pfs := base.Clone()
			fsys := faultfs.New(pfs, nil)
			fsys.SetRule("fail", faultfs.FailNth(n, after))
			answered, l := run(fsys)
			if l != nil {
				if _, err := l.Append([]byte("later")); !errors.Is(err, ErrPoisoned) && len(answered) < 16 {
					t.Fatalf("fail %d (after %v): an append after the failure: %v", n, after, err)
				}
				l.Close()
			}
			pfs.Cut()
			for _, p := range []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Random, Seed: uint64(n)}} {
				data, err := pfs.Recover(p).ReadFile("/logs/00.log")
				if err != nil {
					t.Fatal(err)
				}
				if l == nil {
					if _, _, err := Read(data); err != nil {
						t.Fatalf("fail %d: read: %v", n, err)
					}
					continue
				}
				checkAnswered(t, fmt.Sprintf("fail %d (after %v), %v", n, after, p), data, 2, answered)
			}
		}
	}
}

// Held: an entry that exactly fills the log fits and reads back; one byte more can never fit
// (ledger.ErrTooLarge, see TestAttack32AnEntryThatNeverFitsIsNotErrFull); a Reset with
// appends waiting for a held round is refused.
func TestAttack32FullBoundaryAndResetWhileWaiting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 4*Sector)
	defer l.Close()
	exact := bytes.Repeat([]byte{'e'}, 3*Sector-entryHead-entryTrailer)
	if _, err := l.Append(append(exact, 'x')); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("an entry one byte past the end of an empty log: %v, want ErrTooLarge", err)
	}
	if seq, err := l.Append(exact); err != nil || seq != 1 {
		t.Fatalf("an entry exactly filling the log: %d, %v", seq, err)
	}
	if _, err := l.Append(nil); !errors.Is(err, ErrFull) {
		t.Fatalf("an empty entry in a full log: %v, want ErrFull", err)
	}
	if _, entries, err := Read(readFile(t, path)); err != nil || len(entries) != 1 || !bytes.Equal(entries[0].Payload, exact) {
		t.Fatalf("read: %d entries, %v", len(entries), err)
	}

	path2 := filepath.Join(t.TempDir(), "01.log")
	l2 := newLog(t, vfs.OSFS{}, path2, 64*Sector)
	defer l2.Close()
	hold, held := make(chan struct{}), make(chan struct{})
	l2.f = &hookFile{File: l2.f, onSync: func(n int64) {
		if n == 1 {
			close(held)
			<-hold
		}
	}}
	done := make(chan error, 2)
	go func() { _, err := l2.Append([]byte("a")); done <- err }()
	<-held
	go func() { _, err := l2.Append([]byte("b")); done <- err }()
	for l2.Used() < 3*Sector {
		time.Sleep(time.Millisecond)
	}
	if err := l2.Reset(3); err == nil {
		t.Error("a reset while a round runs and an append waits answered no error")
	}
	close(hold)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := l2.Reset(3); err != nil {
		t.Fatalf("reset once every append is answered: %v", err)
	}
}

// Held: Read of odd lengths, huge length fields, sequence 0 and a length that points past the
// end fails or ends cleanly, never panics, never answers an entry out of order.
func TestAttack32ReadOddInputs(t *testing.T) {
	t.Parallel()
	salt := []byte("saltsalt")
	good := append(header(7, salt), make([]byte, Sector-headerLen)...)
	good = append(good, encodeEntry(7, salt, 1, 0, []byte("one"), Sector)...)
	good = append(good, make([]byte, 2*Sector)...)
	for _, n := range []int{0, 1, Sector, 2*Sector - 1, 2*Sector + 1, len(good) - 1} {
		if _, _, err := Read(good[:n]); !errors.Is(err, ledger.ErrCorrupt) {
			t.Errorf("%d bytes: %v, want ErrCorrupt", n, err)
		}
	}
	// An entry whose length field is huge, with its CRC right (over what it claims).
	for _, length := range []uint32{^uint32(0), 1 << 31, uint32(2*Sector - entryHead - entryTrailer + 1), uint32(2*Sector - entryHead - entryTrailer)} {
		d := bytes.Clone(good)
		b := d[2*Sector:]
		copy(b, encodeEntry(7, salt, 2, 1, nil, Sector))
		b[28], b[29], b[30], b[31] = byte(length>>24), byte(length>>16), byte(length>>8), byte(length)
		_, entries, err := Read(d)
		t.Logf("length %d: %d entries, %v", length, len(entries), err)
		if err == nil && len(entries) > 2 {
			t.Errorf("length %d: %d entries", length, len(entries))
		}
	}
	// Sequence 0 vouching for everything beyond a torn entry 2.
	d := bytes.Clone(good)
	copy(d[3*Sector:], encodeEntry(7, salt, 0, ^uint64(0), []byte("zero"), Sector))
	if _, entries, err := Read(d); err != nil || len(entries) != 1 {
		t.Errorf("a sequence-0 entry beyond the tail: %d entries, %v", len(entries), err)
	}
}

// Finding (minor, API): ErrFull says "the caller checkpoints (Reset) and tries again"; an entry
// larger than the whole log answers ErrFull on an empty log too, so that remedy loops forever
// (the design's admission "waits for a checkpoint"). It should answer an error the caller does
// not retry.
func TestAttack32AnEntryThatNeverFitsIsNotErrFull(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 4*Sector)
	defer l.Close()
	huge := make([]byte, 3*Sector-entryHead-entryTrailer+1)
	for gen := uint64(3); gen < 6; gen++ {
		if err := l.Reset(gen); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(huge); errors.Is(err, ErrFull) {
			t.Errorf("generation %d, an empty log of %d bytes: an entry of %d bytes answers ErrFull, "+
				"whose remedy (Reset and try again) can never work: %v", gen, l.Size(), entrySize(len(huge)), err)
			break
		}
	}
}
