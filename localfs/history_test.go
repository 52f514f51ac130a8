package localfs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// TestHistories checks whole histories of the FileLedger in one process: workers on handles
// of their own, with clocks minutes apart that step, crashes and failures before and after
// the effect of file operations, a cleaner running throughout, a sliding window of keys; every
// history must be linearizable under the contract's model and end in a legible, exactly
// counted root (ledgertest.RunHistories).
func TestHistories(t *testing.T) {
	t.Parallel()
	cfg := ledgertest.HistoryConfig{Histories: 3, Workers: 4, Steps: 250, Keys: 12, Skew: 2 * time.Minute, FaultRate: 0.01, Seed: 1, Forget: true}
	if os.Getenv("AMISS_SOAK") != "" {
		cfg.Histories, cfg.Workers, cfg.Steps = 40, 8, 1000
	}
	ledgertest.RunHistories(t, newHarness, cfg)
}

// The multi-process history check: worker processes (this test binary, re-executed) and a
// cleaner process run the history workload on one root, sharing their clocks through a
// memory-mapped file; the parent kills processes with SIGKILL at random and starts them again.
// Every process appends its calls to a log of its own, the call before it is made and again
// when it returns, so a call cut by a kill is known with an unknown outcome. The parent then
// finishes the history itself and checks the whole of it.

const (
	envHistRole = "AMISS_HIST_ROLE" // worker or cleaner
	envHistID   = "AMISS_HIST_ID"
	envHistSeed = "AMISS_HIST_SEED"
	envHistRoot = "AMISS_HIST_ROOT"
	envHistDir  = "AMISS_HIST_DIR" // the shared world and the logs
	envHistCfg  = "AMISS_HIST_CONFIG"
)

// sharedWorld is a ledgertest.HistoryWorld in a memory-mapped file, shared by processes.
type sharedWorld struct {
	mem []byte
}

const (
	swBase = iota * 8
	swMax
	swSeq
	swWindow
	swHW
	swBack
	swStore
	swSize
)

func openSharedWorld(path string, create bool) (*sharedWorld, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if create {
		if err := f.Truncate(swSize); err != nil {
			return nil, err
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, swSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	w := &sharedWorld{mem: mem}
	if create {
		atomic.StoreInt64(w.at(swBase), ledgertest.Epoch.UnixNano())
		atomic.StoreInt64(w.at(swMax), ledgertest.Epoch.UnixNano())
		atomic.StoreInt64(w.at(swStore), ledgertest.Epoch.UnixNano())
	}
	return w, nil
}

func (w *sharedWorld) at(off int) *int64 { return (*int64)(unsafe.Pointer(&w.mem[off])) }

func (w *sharedWorld) raise(off int, n int64) {
	for {
		cur := atomic.LoadInt64(w.at(off))
		if n <= cur || atomic.CompareAndSwapInt64(w.at(off), cur, n) {
			return
		}
	}
}

func (w *sharedWorld) Now() time.Time { return time.Unix(0, atomic.LoadInt64(w.at(swBase))).UTC() }
func (w *sharedWorld) Advance(d time.Duration) {
	if d < 0 {
		atomic.AddInt64(w.at(swBack), int64(-d))
	}
	atomic.AddInt64(w.at(swBase), int64(d))
}
func (w *sharedWorld) SteppedBack() int64 { return atomic.LoadInt64(w.at(swBack)) }
func (w *sharedWorld) Saw(t time.Time)    { w.raise(swMax, t.UnixNano()) }
func (w *sharedWorld) MaxRead() int64     { return atomic.LoadInt64(w.at(swMax)) }
func (w *sharedWorld) SawStore(t time.Time) {
	w.raise(swStore, t.UnixNano())
	w.Saw(t)
}
func (w *sharedWorld) MaxStoreRead() int64  { return atomic.LoadInt64(w.at(swStore)) }
func (w *sharedWorld) Tick() int64          { return atomic.AddInt64(w.at(swSeq), 1) }
func (w *sharedWorld) Window() int64        { return atomic.LoadInt64(w.at(swWindow)) }
func (w *sharedWorld) Slide()               { atomic.AddInt64(w.at(swWindow), 1) }
func (w *sharedWorld) HWFloor() int64       { return atomic.LoadInt64(w.at(swHW)) }
func (w *sharedWorld) RaiseHWFloor(n int64) { w.raise(swHW, n) }

// fileSink appends a process's calls to its log, one line each, written whole before the call
// goes on: "B <op>" when it is made, "E <op>" when it returns.
type fileSink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *fileSink) line(tag string, o ledgertest.Op) {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.Write(append(append([]byte(tag+" "), b...), '\n')); err != nil {
		panic(err)
	}
}

func (s *fileSink) Begin(o ledgertest.Op) { s.line("B", o) }
func (s *fileSink) End(o ledgertest.Op)   { s.line("E", o) }

// readHistoryLog reads one process's log: calls that returned as they returned, calls cut by
// the process's death with an unknown outcome, their Lo lowered by the steps back of the clock
// until the death (backAtDeath).
func readHistoryLog(t *testing.T, path string, backAtDeath int64) []ledgertest.Op {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // killed before it began
	}
	if err != nil {
		t.Fatal(err)
	}
	begun := map[int64]ledgertest.Op{}
	var out []ledgertest.Op
	for _, line := range strings.Split(string(data), "\n") {
		tag, body, ok := strings.Cut(line, " ")
		var o ledgertest.Op
		if !ok || json.Unmarshal([]byte(body), &o) != nil {
			continue // a torn last line
		}
		switch tag {
		case "B":
			begun[o.Call] = o
		case "E":
			if o.Kind != ledgertest.OpRemove {
				delete(begun, o.Call)
			}
			out = append(out, o)
		}
	}
	for _, o := range begun {
		o.Lo -= backAtDeath - o.Back
		out = append(out, o)
	}
	return out
}

// histProcess is one running process of the multi-process history.
type histProcess struct {
	role string
	id   int
	cmd  *exec.Cmd
	log  string
	done chan error
}

// TestMultiProcessHistories: 4 worker processes and a cleaner process on one root, killed and
// restarted at random; the whole history is checked against the contract's model, then the
// root is finished and checked (ledgertest.CheckHistory, FinishHistory).
func TestMultiProcessHistories(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes: skipped with -short")
	}
	t.Parallel()
	cfg := ledgertest.HistoryConfig{Histories: 2, Workers: 4, Steps: 200, Keys: 10, Skew: time.Minute, FaultRate: 0.005, Seed: 11}
	kills := 6
	if os.Getenv("AMISS_SOAK") != "" {
		cfg.Histories, cfg.Steps, kills = 6, 1500, 40
	}
	total := ledgertest.HistoryStats{}
	for h := range cfg.Histories {
		st := multiProcessHistory(t, cfg, cfg.Seed+uint64(h)*31, kills)
		total.Histories++
		total.Ops += st.Ops
		total.Unknown += st.Unknown
		total.Reopens += st.Reopens
		total.Removed += st.Removed
		total.Rows += st.Rows
		if t.Failed() {
			return
		}
	}
	t.Logf("multi-process history check: %d histories, %d operations checked (%d with unknown outcome), %d processes killed with SIGKILL and restarted, %d rows removed by cleanup",
		total.Histories, total.Ops, total.Unknown, total.Reopens, total.Removed)
	if total.Removed == 0 {
		t.Errorf("no history removed a row: cleanup's removals went unchecked")
	}
}

func multiProcessHistory(t *testing.T, cfg ledgertest.HistoryConfig, seed uint64, kills int) ledgertest.HistoryStats {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	l := openRoot(t, root, localfs.Config{Limits: ledgertest.HistoryLimits(), Clock: ledger.NewManualClock(ledgertest.Epoch)})
	l.Close()
	world, err := openSharedWorld(filepath.Join(dir, "world"), true)
	if err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := json.Marshal(cfg)
	rng := rand.New(rand.NewPCG(seed, 3))
	incarnation := 0
	start := func(role string, id int) *histProcess {
		incarnation++
		p := &histProcess{role: role, id: id, log: filepath.Join(dir, fmt.Sprintf("%s-%d-%d.log", role, id, incarnation)), done: make(chan error, 1)}
		p.cmd = exec.Command(os.Args[0])
		p.cmd.Env = append(os.Environ(), envHistRole+"="+role, envHistID+"="+strconv.Itoa(id), envHistRoot+"="+root,
			envHistDir+"="+dir, envHistCfg+"="+string(cfgJSON), envHistSeed+"="+strconv.FormatUint(rng.Uint64(), 10),
			"AMISS_HIST_LOG="+p.log)
		out, err := os.Create(p.log + ".out")
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Stdout, p.cmd.Stderr = out, out
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start %s %d: %v", role, id, err)
		}
		go func() { p.done <- p.cmd.Wait(); out.Close() }()
		return p
	}
	type death struct {
		log  string
		back int64
	}
	var deaths []death
	live := map[string]*histProcess{}
	for i := range cfg.Workers {
		live[fmt.Sprintf("worker-%d", i)] = start("worker", i)
	}
	live["cleaner"] = start("cleaner", cfg.Workers)
	var logs []string
	killed := 0
	for {
		workers := 0
		for name, p := range live {
			select {
			case err := <-p.done:
				if err != nil && p.role == "worker" {
					out, _ := os.ReadFile(p.log + ".out")
					t.Fatalf("%s ended: %v\n%s", name, err, out)
				}
				logs = append(logs, p.log)
				delete(live, name)
				continue
			default:
			}
			if p.role == "worker" {
				workers++
			}
		}
		if workers == 0 {
			break
		}
		time.Sleep(time.Duration(20+rng.IntN(150)) * time.Millisecond)
		if killed < kills {
			names := make([]string, 0, len(live))
			for n := range live {
				names = append(names, n)
			}
			sort.Strings(names)
			name := names[rng.IntN(len(names))]
			p := live[name]
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			killed++
			deaths = append(deaths, death{p.log, world.SteppedBack()})
			live[name] = start(p.role, p.id)
		}
	}
	for _, p := range live { // the cleaner
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		deaths = append(deaths, death{p.log, world.SteppedBack()})
	}
	var ops []ledgertest.Op
	for _, d := range deaths {
		ops = append(ops, readHistoryLog(t, d.log, d.back)...)
	}
	for _, path := range logs {
		ops = append(ops, readHistoryLog(t, path, 0)...)
	}
	sink := &memOpSink{}
	env := &ledgertest.HistoryEnv{Open: openHistoryHandle(root), World: world, Sink: sink, Steps: true, Config: cfg}
	removed, st := ledgertest.FinishHistory(t, ctx, env, cfg.Workers+1)
	ops = append(ops, sink.ops...)
	ledgertest.CheckHistory(t, ops, ledgertest.HistoryLimits(), 0)
	out := ledgertest.HistoryStats{Ops: len(ops), Reopens: killed, Removed: removed, Rows: int(st.Rows)}
	out.CountOps(ops)
	return out
}

type memOpSink struct {
	mu  sync.Mutex
	ops []ledgertest.Op
}

func (s *memOpSink) Begin(ledgertest.Op) {}
func (s *memOpSink) End(o ledgertest.Op) {
	s.mu.Lock()
	s.ops = append(s.ops, o)
	s.mu.Unlock()
}

func openHistoryHandle(root string) func(ctx context.Context, o ledgertest.Options) (ledger.Ledger, error) {
	var counts faultCounts
	return func(ctx context.Context, o ledgertest.Options) (ledger.Ledger, error) {
		fsys := faultfs.New(localfs.OSFS{}, nil)
		if o.Faults != nil {
			fsys.SetRule("random", randomFaults(*o.Faults, &counts))
		}
		return localfs.Open(ctx, root, localfs.Config{Limits: ledgertest.HistoryLimits(), Clock: o.Clock, FS: fsys,
			StrandedAfter: o.StrandedAfter, CleanupBatch: o.CleanupBatch, LockWait: 2 * time.Second})
	}
}

// historyProcess is a worker or cleaner process of TestMultiProcessHistories.
func historyProcess(role string) error {
	id, _ := strconv.Atoi(os.Getenv(envHistID))
	seed, _ := strconv.ParseUint(os.Getenv(envHistSeed), 10, 64)
	var cfg ledgertest.HistoryConfig
	if err := json.Unmarshal([]byte(os.Getenv(envHistCfg)), &cfg); err != nil {
		return err
	}
	world, err := openSharedWorld(filepath.Join(os.Getenv(envHistDir), "world"), false)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(os.Getenv("AMISS_HIST_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	env := &ledgertest.HistoryEnv{Open: openHistoryHandle(os.Getenv(envHistRoot)), World: world, Sink: &fileSink{f: f},
		Steps: true, Config: cfg}
	ctx := context.Background()
	if role == "cleaner" {
		ledgertest.RunHistoryCleaner(ctx, env, id, seed, make(chan struct{})) // runs until killed
		return nil
	}
	_, err = ledgertest.RunHistoryWorker(ctx, env, id, seed)
	return err
}
