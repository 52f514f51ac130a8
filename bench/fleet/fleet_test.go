// Package fleet measures the FileLedger's admissions under the EFS latency model of
// localfs/vfs: one admitter against sixteen, as goroutines of one process and as separate
// processes on one root (Lambda functions sharing an EFS root). Measurements, never
// assertions: docs/benchmarks.md records the figures.
package fleet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

const (
	rounds = 3
	window = 4 * time.Second
	many   = 16
)

func limits() ledger.Limits {
	l := ledger.DefaultLimits()
	l.RecordCap = 100_000_000
	return l
}

func open(dir string) (*localfs.Ledger, error) {
	return localfs.Open(context.Background(), dir, localfs.Config{Limits: limits(), Create: true, FS: vfs.EFS(vfs.OSFS{}),
		LockWait: time.Minute})
}

// admitFor admits new keys with writers goroutines for d and returns the admissions made.
func admitFor(l *localfs.Ledger, prefix string, writers int, d time.Duration) (int64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	stop := time.Now().Add(d)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				body := fmt.Appendf(nil, `{"n":%d}`, i)
				a, err := l.Admit(context.Background(), ledger.Delivery{
					Binding: ledger.Binding{Route: "fleet", Scheme: "github-sha256", Identity: fmt.Sprintf("%s-%d-%d", prefix, w, i),
						BodyDigest: ledger.SumBody(body)},
					Change: body,
				})
				if err == nil && a.Outcome != ledger.Admitted {
					err = fmt.Errorf("admission answered %v", a.Outcome)
				}
				if err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return n.Load(), <-errs
}

// TestMain runs a worker process when the environment says so.
func TestMain(m *testing.M) {
	if dir := os.Getenv("AMISS_FLEET_ROOT"); dir != "" {
		l, err := open(dir)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		// Start together: wait for the go file.
		for {
			if _, err := os.Stat(os.Getenv("AMISS_FLEET_GO")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		n, err := admitFor(l, os.Getenv("AMISS_FLEET_ID"), 1, window)
		l.Close()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(n)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var runSeq atomic.Int64

// processes runs n worker processes on dir, each admitting for the window, and returns the
// admissions per second of them all.
func processes(b *testing.B, dir string, n int) float64 {
	goFile := filepath.Join(b.TempDir(), "go")
	run := runSeq.Add(1)
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bufio.Scanner, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), "AMISS_FLEET_ROOT="+dir, "AMISS_FLEET_GO="+goFile,
			fmt.Sprintf("AMISS_FLEET_ID=p%d-%d", run, i))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds[i], outs[i] = cmd, bufio.NewScanner(out)
	}
	time.Sleep(500 * time.Millisecond) // every process opened the root
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	for i, cmd := range cmds {
		if !outs[i].Scan() {
			b.Fatalf("worker %d printed nothing", i)
		}
		v, err := strconv.ParseInt(outs[i].Text(), 10, 64)
		if err != nil {
			b.Fatalf("worker %d: %s", i, outs[i].Text())
		}
		total += v
		if err := cmd.Wait(); err != nil {
			b.Fatalf("worker %d: %v", i, err)
		}
	}
	return float64(total) / window.Seconds()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkFleet measures admissions per second with the EFS latency model: 1 and 16
// admitters as goroutines of one process, and as separate processes, in interleaved rounds.
func BenchmarkFleet(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "root")
	l, err := open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var g1, g16, p1, p16 []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			measure := func(writers int) float64 {
				n, err := admitFor(l, fmt.Sprintf("g%d-%d", r, writers), writers, window)
				if err != nil {
					b.Fatal(err)
				}
				return float64(n) / window.Seconds()
			}
			g1 = append(g1, measure(1))
			g16 = append(g16, measure(many))
			p1 = append(p1, processes(b, dir, 1))
			p16 = append(p16, processes(b, dir, many))
			b.Logf("round %d: goroutines 1 %.1f/s, 16 %.1f/s (%.2fx); processes 1 %.1f/s, 16 %.1f/s (%.2fx)",
				r+1, g1[r], g16[r], g16[r]/g1[r], p1[r], p16[r], p16[r]/p1[r])
		}
	}
	b.StopTimer()
	b.ReportMetric(median(g1), "goroutines-1/s")
	b.ReportMetric(median(g16), "goroutines-16/s")
	b.ReportMetric(median(p1), "processes-1/s")
	b.ReportMetric(median(p16), "processes-16/s")
	rg, rp := make([]float64, len(g1)), make([]float64, len(p1))
	for i := range g1 {
		rg[i], rp[i] = g16[i]/g1[i], p16[i]/p1[i]
	}
	b.ReportMetric(median(rg), "x-goroutines-16/1")
	b.ReportMetric(median(rp), "x-processes-16/1")
	b.ReportMetric(0, "ns/op")
}
