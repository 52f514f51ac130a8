package peer

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// Admission by separate processes on one store: what Lambda functions sharing an EFS root, or
// several `amiss serve` processes on one folder, do. Each worker process opens the store
// itself (a FileLedger root, or the SQLite database with a connection of its own), waits for
// the start, admits for the window and prints how many it admitted.

const (
	envPeerStore = "AMISS_PEER_STORE" // "file:DIR" or "sqlite:PATH"
	envPeerGo    = "AMISS_PEER_GO"
)

// TestMain runs a worker process when the environment says so.
func TestMain(m *testing.M) {
	if store := os.Getenv(envPeerStore); store != "" {
		n, err := peerWorker(store, os.Getenv(envPeerGo))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(n)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func peerWorker(store, goFile string) (int64, error) {
	kind, where, _ := strings.Cut(store, ":")
	var admit func(ledger.Delivery) error
	switch kind {
	case "file":
		limits := ledger.DefaultLimits()
		limits.RecordCap = 100_000_000
		l, err := localfs.Open(context.Background(), where, localfs.Config{Limits: limits})
		if err != nil {
			return 0, err
		}
		defer l.Close()
		admit = func(d ledger.Delivery) error {
			a, err := l.Admit(context.Background(), d)
			if err == nil && a.Outcome != ledger.Admitted {
				err = fmt.Errorf("admission answered %v", a.Outcome)
			}
			return err
		}
	case "sqlite":
		p, err := openSQLiteAt(where, 1, false)
		if err != nil {
			return 0, err
		}
		defer p.db.Close()
		admit = p.admit
	default:
		return 0, fmt.Errorf("unknown store %q", store)
	}
	for {
		if _, err := os.Stat(goFile); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	n := int64(0)
	for stop := time.Now().Add(window); time.Now().Before(stop); n++ {
		if err := admit(delivery()); err != nil {
			return n, err
		}
	}
	return n, nil
}

// inProcesses runs n worker processes on store for the window and returns their admissions
// per second in all.
func inProcesses(b *testing.B, store string, n int) float64 {
	goFile := filepath.Join(b.TempDir(), "go")
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bufio.Scanner, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), envPeerStore+"="+store, envPeerGo+"="+goFile)
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
	time.Sleep(500 * time.Millisecond) // every process opened the store
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
		cmd.Wait()
	}
	return float64(total) / window.Seconds()
}

// BenchmarkPeerProcesses measures admissions per second by 1 and by 8 processes on one store,
// for the FileLedger and for SQLite (WAL, synchronous=FULL), the four windows in a shuffled
// order every round.
func BenchmarkPeerProcesses(b *testing.B) {
	root := openLedger(b).Dir()
	sq := openSQLite(b, 1)
	sqPath := filepath.Join(sq.dir, "peer.db")
	var fl1, fl8, sq1, sq8, rel []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			windows := []struct {
				name string
				run  func()
			}{
				{"FileLedger 8 processes", func() { fl8 = append(fl8, inProcesses(b, "file:"+root, 8)) }},
				{"SQLite 8 processes", func() { sq8 = append(sq8, inProcesses(b, "sqlite:"+sqPath, 8)) }},
				{"FileLedger 1 process", func() { fl1 = append(fl1, inProcesses(b, "file:"+root, 1)) }},
				{"SQLite 1 process", func() { sq1 = append(sq1, inProcesses(b, "sqlite:"+sqPath, 1)) }},
			}
			var order []string
			for _, i := range rand.Perm(len(windows)) {
				order = append(order, windows[i].name)
				windows[i].run()
			}
			rel = append(rel, fl8[r]/sq8[r])
			b.Logf("round %d (windows in the order %s): admissions/s by 1 process: FileLedger %.0f, SQLite %.0f; by 8: FileLedger %.0f, SQLite %.0f (FileLedger %.2fx SQLite in WAL mode, synchronous=FULL)",
				r+1, strings.Join(order, ", "), fl1[r], sq1[r], fl8[r], sq8[r], rel[r])
		}
	}
	b.StopTimer()
	b.ReportMetric(median(fl1), "fileledger-1p/s")
	b.ReportMetric(median(fl8), "fileledger-8p/s")
	b.ReportMetric(median(sq1), "sqlite-1p/s")
	b.ReportMetric(median(sq8), "sqlite-8p/s")
	b.ReportMetric(median(rel), "x-sqlite-8p")
	b.ReportMetric(0, "ns/op")
}
