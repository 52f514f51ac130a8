package admlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/faultfs"
	"github.com/amiss-ci/amiss/localfs/powerfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

func newLog(t testing.TB, fsys vfs.FS, path string, size int64) *Log {
	t.Helper()
	if err := Create(fsys, path, size, 1); err != nil {
		t.Fatal(err)
	}
	l, err := Open(fsys, path, 2)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func payload(w, i int) []byte {
	return fmt.Appendf(nil, "writer %d entry %d %s", w, i, strings.Repeat("x", (w*7+i*13)%900))
}

// appendConcurrently appends n entries from each of writers goroutines and answers the
// payloads of the answered ones by sequence.
func appendConcurrently(l *Log, writers, n int) map[uint64][]byte {
	return appendEach(l, writers, n, payload, nil)
}

// appendEach appends n entries (payload(w, i)) from each of writers goroutines, each writer
// stopping at its first error (shown to onErr, when set), and answers the payloads of the
// answered appends by sequence.
func appendEach(l *Log, writers, n int, payload func(w, i int) []byte, onErr func(error)) map[uint64][]byte {
	var mu sync.Mutex
	answered := map[uint64][]byte{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				p := payload(w, i)
				seq, err := l.Append(p)
				if err != nil {
					if onErr != nil {
						onErr(err)
					}
					return
				}
				mu.Lock()
				answered[seq] = p
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered
}

// persistences are what a power loss after cut may keep: nothing, everything, and n random
// choices seeded by cut.
func persistences(cut, n int) []powerfs.Persistence {
	ps := []powerfs.Persistence{{Keep: powerfs.Nothing}, {Keep: powerfs.Everything}}
	for seed := range n {
		ps = append(ps, powerfs.Persistence{Keep: powerfs.Random, Seed: uint64(cut*1000 + seed)})
	}
	return ps
}

// checkAnswered reads the log's bytes and checks that the entries form a run from 1 and
// include every answered one, with its payload.
func checkAnswered(t *testing.T, what string, data []byte, gen uint64, answered map[uint64][]byte) []Entry {
	t.Helper()
	g, entries, err := Read(data)
	if err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	if g != gen {
		t.Fatalf("%s: generation %d, want %d", what, g, gen)
	}
	for i, e := range entries {
		if e.Seq != uint64(i)+1 {
			t.Fatalf("%s: entry %d has sequence %d", what, i, e.Seq)
		}
	}
	for seq, p := range answered {
		if seq > uint64(len(entries)) {
			t.Fatalf("%s: entry %d was answered durable; the log holds %d entries", what, seq, len(entries))
		}
		if !bytes.Equal(entries[seq-1].Payload, p) {
			t.Fatalf("%s: entry %d holds %q, was answered for %q", what, seq, entries[seq-1].Payload, p)
		}
	}
	return entries
}

// Concurrent appends share their syncs, and every answered entry is read back in order.
func TestAppendsShareSyncsAndReadBack(t *testing.T) {
	t.Parallel()
	count := faultfs.NewCounter()
	fsys := faultfs.New(vfs.OSFS{}, count)
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, fsys, path, 1<<20)
	defer l.Close()
	before := count.Snapshot().ByOp[faultfs.OpSync]
	answered := appendConcurrently(l, 8, 40)
	if len(answered) != 320 {
		t.Fatalf("%d of 320 appends answered", len(answered))
	}
	syncs := count.Snapshot().ByOp[faultfs.OpSync] - before
	t.Logf("320 appends from 8 writers: %d syncs", syncs)
	if syncs < 1 || syncs > 320 {
		t.Fatalf("%d syncs for 320 appends", syncs)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if entries := checkAnswered(t, "after the appends", data, 2, answered); len(entries) != 320 {
		t.Fatalf("the log holds %d entries, want 320", len(entries))
	}
}

// A power cut at any step of concurrent appends (and of the log's creation and opening)
// loses no answered entry, and the log reads as a run of whole entries: a torn tail is the
// log's end, never damage.
func TestPowerCutLosesNoAnsweredEntry(t *testing.T) {
	t.Parallel()
	run := func(fsys *powerfs.FS) (map[uint64][]byte, bool) {
		// The logs folder is made durable before any log goes in it (Create syncs the
		// folder's entries, not the folder's own).
		if err := fsys.Mkdir("/logs", 0o700); err != nil || fsys.SyncDir("/") != nil {
			return nil, false
		}
		if err := Create(fsys, "/logs/00.log", 16*Sector, 1); err != nil {
			return nil, false
		}
		l, err := Open(fsys, "/logs/00.log", 2)
		if err != nil {
			return nil, false
		}
		return appendConcurrently(l, 3, 4), true
	}
	dry := powerfs.New()
	if answered, opened := run(dry); !opened || len(answered) != 12 {
		t.Fatalf("without a power cut: opened %v, %d of 12 appends answered", opened, len(answered))
	}
	steps := dry.Calls()
	tested := 0
	for cut := 0; cut <= steps; cut++ {
		fsys := powerfs.New()
		fsys.CutAfter(cut)
		answered, opened := run(fsys)
		fsys.Cut()
		for _, p := range persistences(cut, 16) {
			what := fmt.Sprintf("cut after %d of %d calls, %v", cut, steps, p)
			after := fsys.Recover(p)
			data, err := after.ReadFile("/logs/00.log")
			if err != nil {
				if len(answered) > 0 {
					t.Fatalf("%s: %d entries answered, the log is gone: %v", what, len(answered), err)
				}
				continue
			}
			if !opened && len(data) == 0 {
				continue
			}
			g, _, err := Read(data)
			if err != nil {
				// Made whole and synced before its rename: the file under the log's name
				// always reads.
				t.Fatalf("%s: read: %v", what, err)
			}
			if len(answered) > 0 {
				tested++
				checkAnswered(t, what, data, g, answered)
				if g != 2 {
					t.Fatalf("%s: generation %d after answered appends of generation 2", what, g)
				}
			}
		}
	}
	t.Logf("%d steps cut, %d recoveries with answered entries checked", steps+1, tested)
	if tested == 0 {
		t.Fatal("no recovery had an answered entry to check")
	}
}

// An entry that a later entry vouches for, once damaged, fails the read: its round had
// finished, so it was durable. The same damage to the last entry is a torn tail.
func TestDamageIsToldFromATornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 64*Sector)
	offsets := []int64{}
	for i := range 5 {
		offsets = append(offsets, l.Used())
		if _, err := l.Append(payload(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	damage := func(i int) []byte {
		d := bytes.Clone(data)
		d[offsets[i]+entryHead] ^= 0xff
		return d
	}
	// Each append waited for its own sync, so entry k+1 vouches for entry k.
	for i := range 4 {
		if _, _, err := Read(damage(i)); !errors.Is(err, ledger.ErrCorrupt) {
			t.Errorf("entry %d damaged, a later one vouching for it: %v, want ErrCorrupt", i+1, err)
		}
	}
	_, entries, err := Read(damage(4))
	if err != nil || len(entries) != 4 {
		t.Errorf("the last entry torn: %d entries, %v; want the 4 before it", len(entries), err)
	}
	// Bytes from a payload that look like an entry (right magic, generation and a CRC without
	// the salt) do not pass for one beyond a torn tail.
	forged := bytes.Clone(damage(4))
	copy(forged[offsets[4]+Sector:], encodeEntry(2, nil, 9, ^uint64(0), []byte("forged"), Sector))
	if _, entries, err := Read(forged); err != nil || len(entries) != 4 {
		t.Errorf("a forged entry beyond a torn tail: %d entries, %v; want the 4 before it", len(entries), err)
	}
}

// checkPoisonedBy fails op (with action) under one append of a log that took one entry
// already, and checks that this append, every later one and a Reset fail with ErrPoisoned,
// even once op works again.
func checkPoisonedBy(t *testing.T, op faultfs.Op, action faultfs.Action) {
	t.Helper()
	fsys := faultfs.New(vfs.OSFS{}, nil)
	l := newLog(t, fsys, filepath.Join(t.TempDir(), "00.log"), 64*Sector)
	defer l.Close()
	if _, err := l.Append([]byte("before")); err != nil {
		t.Fatal(err)
	}
	fsys.SetRule("fail", func(o faultfs.Op, p string) faultfs.Action {
		if o == op {
			return action
		}
		return faultfs.Pass
	})
	_, err := l.Append([]byte("failed"))
	fsys.SetRule("fail", nil)
	if !errors.Is(err, ErrPoisoned) {
		t.Errorf("append whose %s failed: %v, want ErrPoisoned", op, err)
	}
	if _, err := l.Append([]byte("after")); !errors.Is(err, ErrPoisoned) {
		t.Errorf("append after a failed %s: %v, want ErrPoisoned", op, err)
	}
	if err := l.Reset(3); !errors.Is(err, ErrPoisoned) {
		t.Errorf("reset after a failed %s: %v, want ErrPoisoned", op, err)
	}
}

// A failed sync poisons the log: that append and every later one fail, even once syncs work
// again.
func TestAFailedSyncPoisonsTheLog(t *testing.T) {
	t.Parallel()
	checkPoisonedBy(t, faultfs.OpSync, faultfs.FailAfter)
}

// A full log refuses an entry; Reset starts a new generation whose reader sees none of the
// old entries; generations only grow.
func TestFullLogAndReset(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00.log")
	l := newLog(t, vfs.OSFS{}, path, 8*Sector)
	defer l.Close()
	n := 0
	for ; ; n++ {
		if _, err := l.Append(payload(0, n)); err != nil {
			if !errors.Is(err, ErrFull) {
				t.Fatalf("append %d: %v, want ErrFull at the end", n, err)
			}
			break
		}
	}
	if n == 0 || n > 7 {
		t.Fatalf("%d entries fit in 7 sectors", n)
	}
	if err := l.Reset(2); err == nil {
		t.Fatal("reset to the same generation answered no error")
	}
	if err := l.Reset(5); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if g, entries, err := Read(data); err != nil || g != 5 || len(entries) != 0 {
		t.Fatalf("after reset: generation %d, %d entries, %v; want 5, none", g, len(entries), err)
	}
	seq, err := l.Append([]byte("new"))
	if err != nil || seq != 1 {
		t.Fatalf("first append of generation 5: %d, %v", seq, err)
	}
	data, _ = os.ReadFile(path)
	if _, entries, err := Read(data); err != nil || len(entries) != 1 || string(entries[0].Payload) != "new" {
		t.Fatalf("generation 5: %v, %v", entries, err)
	}
	if err := Create(vfs.OSFS{}, path, 8*Sector, 1); !errors.Is(err, os.ErrExist) {
		t.Fatalf("create over an existing log: %v, want ErrExist", err)
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	buf.Write(header(3, []byte("saltsalt")))
	buf.Write(make([]byte, Sector-buf.Len()))
	buf.Write(encodeEntry(3, []byte("saltsalt"), 1, 0, []byte("one"), Sector))
	buf.Write(make([]byte, Sector))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, entries, err := Read(data)
		if err != nil {
			return
		}
		for i, e := range entries {
			if e.Seq != uint64(i)+1 {
				t.Fatalf("entry %d has sequence %d", i, e.Seq)
			}
		}
	})
}

// gate holds the first sync of the files it wraps, before or after the sync itself, until the
// test releases it: so that other appends write their entries while a round is in flight.
type gate struct {
	after   bool // hold after the sync ran, rather than before
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

type gatedFile struct {
	vfs.File
	g *gate
}

func (f *gatedFile) Sync() error {
	first := false
	f.g.once.Do(func() { first = true })
	if first && !f.g.after {
		close(f.g.held)
		<-f.g.release
	}
	err := f.File.Sync()
	if first && f.g.after {
		close(f.g.held)
		<-f.g.release
	}
	return err
}

// A round covers only the entries written before its sync began, and an entry written in the
// same round as an earlier torn one does not vouch for it.
func TestARoundCoversOnlyWhatWasWrittenBeforeItsSync(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("held after the sync %v", after), func(t *testing.T) {
			base := powerfs.New()
			if err := base.Mkdir("/logs", 0o700); err != nil || base.SyncDir("/") != nil {
				t.Fatal(err)
			}
			if err := Create(base, "/logs/00.log", 16*Sector, 1); err != nil {
				t.Fatal(err)
			}
			g := &gate{after: after, held: make(chan struct{}), release: make(chan struct{})}
			// Open's header sync is not held: the file is wrapped once the log is open.
			l, err := Open(base, "/logs/00.log", 2)
			if err != nil {
				t.Fatal(err)
			}
			l.f = &gatedFile{File: l.f, g: g}
			var mu sync.Mutex
			answered := map[uint64][]byte{}
			var wg sync.WaitGroup
			appendOne := func(p []byte) {
				defer wg.Done()
				if seq, err := l.Append(p); err == nil {
					mu.Lock()
					answered[seq] = p
					mu.Unlock()
				}
			}
			wg.Add(1)
			go appendOne([]byte("first"))
			<-g.held
			for i := range 2 {
				wg.Add(1)
				go appendOne(fmt.Appendf(nil, "during the round %d", i))
			}
			for l.Used() < Sector+3*Sector {
				runtime.Gosched()
			}
			// Held after its sync, the first round covered the first entry only; held before
			// it, none. Either way the power goes before any other sync can run.
			base.Cut()
			close(g.release)
			wg.Wait()
			base.Cut()
			for seed := range 64 {
				p := powerfs.Persistence{Keep: powerfs.Random, Seed: uint64(seed)}
				data, err := base.Recover(p).ReadFile("/logs/00.log")
				if err != nil {
					t.Fatal(err)
				}
				checkAnswered(t, fmt.Sprintf("%v", p), data, 2, answered)
			}
		})
	}
}
