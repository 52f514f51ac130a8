package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
)

// The multi-process test re-executes this test binary as worker processes that admit, claim,
// save, "publish" and complete the same deliveries on one root; one worker is killed with
// SIGKILL mid-run. Each worker appends what it saved and published to its own log; the parent
// then checks every delivery is done, with one saved result, and that every publication of a
// delivery carried that same verdict.

const (
	envWorker = "AMISS_MP_WORKER"
	envRoot   = "AMISS_MP_ROOT"
	envLogs   = "AMISS_MP_LOGS"
	envCount  = "AMISS_MP_COUNT"
)

func mpDelivery(i int) ledger.Delivery {
	body := fmt.Appendf(nil, `{"delivery":%d}`, i)
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "mp", Scheme: "github-sha256", Identity: fmt.Sprintf("mp-%d", i),
			BodyDigest: ledger.SumBody(body)},
		Change: body,
	}
}

func mpLimits() ledger.Limits {
	l := testLimits()
	l.RecordCap = 100_000
	return l
}

func TestMultiProcess(t *testing.T) {
	workers, count, kills := 4, 200, 1
	if os.Getenv("AMISS_SOAK") != "" {
		workers, count, kills = 8, 2000, 3
	}
	if testing.Short() {
		t.Skip("spawns processes: skipped with -short")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "root")
	logs := t.TempDir()
	l := openRoot(t, dir, localfs.Config{Limits: mpLimits()})
	l.Close()

	procs := make([]*exec.Cmd, workers)
	for w := range workers {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envWorker+"="+strconv.Itoa(w), envRoot+"="+dir, envLogs+"="+logs,
			envCount+"="+strconv.Itoa(count))
		out, err := os.Create(filepath.Join(logs, fmt.Sprintf("stdout-%d", w)))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", w, err)
		}
		procs[w] = cmd
	}
	// Kill workers once the run is well under way.
	killed := map[int]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for k := range kills {
		for time.Now().Before(deadline) && countLines(t, logs, "pub-") < (k+1)*count/(kills+2) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := procs[k].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill worker %d: %v", k, err)
		}
		killed[k] = true
		t.Logf("killed worker %d after %d publications", k, countLines(t, logs, "pub-"))
	}
	for w, cmd := range procs {
		err := cmd.Wait()
		if killed[w] {
			continue
		}
		if err != nil {
			out, _ := os.ReadFile(filepath.Join(logs, fmt.Sprintf("stdout-%d", w)))
			t.Fatalf("worker %d: %v\n%s", w, err, out)
		}
	}

	// Check: every delivery done, one saved result, every publication carried it.
	ctx := context.Background()
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: mpLimits()})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer p.Close()
	saves := readLog(t, logs, "save-")
	takeovers := 0
	pubs := readLog(t, logs, "pub-")
	for i := range count {
		d := mpDelivery(i)
		row, err := p.Inspect(ctx, d.Key())
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if row.State != ledger.StateDone {
			t.Fatalf("delivery %d is %v, want done", i, row.State)
		}
		if row.Attempts > 1 || row.PublishAttempts > 0 {
			takeovers++
		}
		digest := row.Report.Digest.String()
		saved := map[string]bool{}
		for _, s := range saves[i] {
			saved[s] = true
		}
		if len(saved) > 1 {
			t.Fatalf("delivery %d: %d different results saved: %v", i, len(saved), saves[i])
		}
		for s := range saved {
			if !strings.HasSuffix(s, digest) || !strings.HasPrefix(s, strconv.FormatUint(row.Report.Fence, 10)+" ") {
				t.Fatalf("delivery %d: saved %q, row holds fence %d digest %s", i, s, row.Report.Fence, digest)
			}
		}
		if len(pubs[i]) == 0 {
			t.Fatalf("delivery %d was never published", i)
		}
		for _, pub := range pubs[i] {
			if pub != digest {
				t.Fatalf("delivery %d: published %s and the saved verdict is %s", i, pub, digest)
			}
		}
	}
	st, err := p.Stats(ctx)
	if err != nil || st.Rows != int64(count) || st.CapacityUsed != int64(count) || st.ByState[ledger.StateDone] != int64(count) {
		t.Fatalf("stats %+v %v", st, err)
	}
	if v, err := p.Verify(ctx, nil); err != nil || !v.OK() {
		t.Fatalf("verify: %v %v", err, v.Problems)
	}
	t.Logf("%d workers (%d killed), %d deliveries, %d publications, %d rows claimed more than once",
		workers, kills, count, countLines(t, logs, "pub-"), takeovers)
}

func countLines(t *testing.T, dir, prefix string) int {
	n := 0
	for _, lines := range readLog(t, dir, prefix) {
		n += len(lines)
	}
	return n
}

// readLog reads every worker's log with the prefix: "delivery value" per line; a torn last
// line (a killed writer) is ignored.
func readLog(t *testing.T, dir, prefix string) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasSuffix(line, ";") {
				continue
			}
			i, v, ok := strings.Cut(strings.TrimSuffix(line, ";"), " ")
			n, err := strconv.Atoi(i)
			if !ok || err != nil {
				continue
			}
			out[n] = append(out[n], v)
		}
	}
	return out
}

// TestMain runs a worker process of TestMultiProcess when the environment says so, and the
// tests otherwise.
func TestMain(m *testing.M) {
	if role := os.Getenv(envHistRole); role != "" {
		if err := historyProcess(role); err != nil {
			fmt.Fprintln(os.Stderr, role, os.Getenv(envHistID)+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if id := os.Getenv(envWorker); id != "" {
		if err := mpWorker(id); err != nil {
			fmt.Fprintln(os.Stderr, "worker", id+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mpWorker is one worker process.
func mpWorker(id string) error {
	count, _ := strconv.Atoi(os.Getenv(envCount))
	logs := os.Getenv(envLogs)
	ctx := context.Background()
	l, err := localfs.Open(ctx, os.Getenv(envRoot), localfs.Config{Limits: mpLimits(), LockWait: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer l.Close()
	// Unbuffered: a line is in the file before the next step.
	saveLog, err := os.OpenFile(filepath.Join(logs, "save-"+id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer saveLog.Close()
	pubLog, err := os.OpenFile(filepath.Join(logs, "pub-"+id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer pubLog.Close()
	owner := "worker-" + id
	ds := make([]ledger.Delivery, count)
	for i := range ds {
		ds[i] = mpDelivery(i)
	}
	w := &ledgertest.Worker{Ledger: l, Owner: owner, Lease: 300 * time.Millisecond,
		Tolerate: func(err error) bool { return errors.Is(err, ledger.ErrBusy) },
		Report: func(i int, fence uint64) []byte {
			return fmt.Appendf(nil, `{"delivery":%d,"by":%q,"fence":%d}`, i, owner, fence)
		},
		OnSaved: func(i int, fence uint64, report []byte) {
			fmt.Fprintf(saveLog, "%d %d %s;\n", i, fence, ledger.SumBody(report))
		},
		OnPublish: func(i int, report []byte) { fmt.Fprintf(pubLog, "%d %s;\n", i, ledger.SumBody(report)) },
		Pause: func(evaluating bool) {
			if evaluating {
				time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond) // evaluate
			} else {
				time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond) // the provider's answer
			}
		},
	}
	return w.Run(ctx, ds, 2*time.Minute)
}
