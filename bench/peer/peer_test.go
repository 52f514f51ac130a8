// Package peer measures the FileLedger's admission against its yardsticks in one run: a bare
// durable replace of one file (write, fsync, rename, folder fsync: two fsyncs), the floor of a
// durable write (600 bytes written in place over a file made beforehand, one fdatasync), and
// SQLite (WAL, synchronous=FULL) doing what an admission does (one transaction: check the
// capacity count, insert the row, count it). The contenders run in a shuffled order, every
// sample and every round, so that none is always first on a disk whose speed drifts.
// Measurements, never assertions: docs/benchmarks.md records the figures.
package peer

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

const (
	rounds  = 5
	window  = 3 * time.Second
	samples = 300
)

var seq atomic.Int64

func delivery() ledger.Delivery {
	n := seq.Add(1)
	body := fmt.Appendf(nil, `{"after":"%040d"}`, n)
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "bench", Scheme: "github-sha256", Identity: fmt.Sprintf("peer-%d-%d", n, time.Now().UnixNano()),
			BodyDigest: ledger.SumBody(body)},
		Change: fmt.Appendf(nil, `{"provider":"github","repository":"acme/app","sha":"%040d","ref":"refs/heads/main","event":"push"}`, n),
	}
}

// bareReplace is one durable replacement of a 600-byte file: temporary file, write, fsync,
// rename, fsync of the folder.
func bareReplace(path string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(make([]byte, 600)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// floorWrite returns the floor of a durable write: 600 bytes written in place over a file made
// (and synced) beforehand in dir, then one fdatasync: no new name, no metadata.
func floorWrite(b *testing.B, dir string) func() error {
	f, err := os.OpenFile(filepath.Join(dir, "floor"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	data := make([]byte, 600)
	if _, err := f.WriteAt(data, 0); err != nil || f.Sync() != nil {
		b.Fatalf("floor file: %v", err)
	}
	return func() error {
		if _, err := f.WriteAt(data, 0); err != nil {
			return err
		}
		return unix.Fdatasync(int(f.Fd()))
	}
}

func openLedger(b *testing.B) *localfs.Ledger {
	limits := ledger.DefaultLimits()
	limits.RecordCap = 100_000_000
	l, err := localfs.Open(context.Background(), filepath.Join(b.TempDir(), "root"), localfs.Config{Limits: limits, Create: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// sqlitePeer is an SQLite database doing an admission's work per transaction.
type sqlitePeer struct {
	db  *sql.DB
	dir string
}

func openSQLite(b *testing.B, conns int) *sqlitePeer {
	p, err := openSQLiteAt(filepath.Join(b.TempDir(), "peer.db"), conns, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.db.Close() })
	return p
}

// openSQLiteAt opens the database at path with conns connections, making its tables when
// create is set.
func openSQLiteAt(path string, conns int, create bool) (*sqlitePeer, error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=30000&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if create {
		for _, q := range []string{
			`CREATE TABLE rows (key BLOB PRIMARY KEY, binding BLOB NOT NULL, state TEXT NOT NULL, change BLOB NOT NULL, created INTEGER NOT NULL) WITHOUT ROWID`,
			`CREATE TABLE capacity (id INTEGER PRIMARY KEY, used INTEGER NOT NULL, cap INTEGER NOT NULL)`,
			`INSERT INTO capacity VALUES (1, 0, 100000000)`,
		} {
			if _, err := db.Exec(q); err != nil {
				db.Close()
				return nil, err
			}
		}
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("journal mode %q %v", mode, err)
	}
	return &sqlitePeer{db: db, dir: filepath.Dir(path)}, nil
}

// admit is one transaction: read the count, refuse at the cap, insert the row, count it.
func (p *sqlitePeer) admit(d ledger.Delivery) error {
	tx, err := p.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var used, limit int64
	if err := tx.QueryRow(`SELECT used, cap FROM capacity WHERE id = 1`).Scan(&used, &limit); err != nil {
		return err
	}
	if used >= limit {
		return fmt.Errorf("full")
	}
	k := d.Key()
	bd := d.Binding.Digest()
	if _, err := tx.Exec(`INSERT INTO rows VALUES (?, ?, 'pending', ?, ?)`, k[:], bd[:], d.Change, time.Now().UnixNano()); err != nil {
		return err
	}
	if _, err := tx.Exec(`UPDATE capacity SET used = used + 1 WHERE id = 1`); err != nil {
		return err
	}
	return tx.Commit()
}

// throughput runs writers calling f with new deliveries for the window and returns calls/s.
func throughput(b *testing.B, writers int, f func(ledger.Delivery) error) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(window)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := f(delivery()); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / window.Seconds()
}

// diskWrites reads the write requests and the 512-byte sectors written that the block device
// holding dir has completed (/sys/dev/block/MAJOR:MINOR/stat, fields 5 and 7). ok is false where
// the figure is not available. The device is shared: the figures include whatever else wrote
// to it meanwhile, so they are meaningful on a quiet machine only.
func diskWrites(dir string) (ios, sectors float64, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(data))
	if len(f) < 7 {
		return 0, 0, false
	}
	i, err1 := strconv.ParseFloat(f[4], 64)
	s, err2 := strconv.ParseFloat(f[6], 64)
	return i, s, err1 == nil && err2 == nil
}

// writesPer runs writers with throughput and also answers the device's write requests and
// KiB written per call (zero where the device's figures are not available).
func writesPer(b *testing.B, dir string, writers int, f func(ledger.Delivery) error) (rate, ios, kib float64) {
	i0, s0, ok0 := diskWrites(dir)
	rate = throughput(b, writers, f)
	i1, s1, ok1 := diskWrites(dir)
	if calls := rate * window.Seconds(); ok0 && ok1 && calls > 0 {
		ios, kib = (i1-i0)/calls, (s1-s0)*512/1024/calls
	}
	return rate, ios, kib
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianDur(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkPeers measures, in rounds, so that all contenders see the same disk: the median
// latency of one admission against the two yardsticks (one sample of each in turn, in a
// shuffled order), and admissions per second with 1 and 8 writers for the FileLedger and for
// SQLite (the four windows in a shuffled order every round).
func BenchmarkPeers(b *testing.B) {
	ctx := context.Background()
	fl := openLedger(b)
	sq := openSQLite(b, 8)
	tmp := b.TempDir()
	yard := filepath.Join(tmp, "yardstick")
	floor := floorWrite(b, tmp)
	admitFL := func(d ledger.Delivery) error {
		a, err := fl.Admit(ctx, d)
		if err == nil && a.Outcome != ledger.Admitted {
			err = fmt.Errorf("admission answered %v", a.Outcome)
		}
		return err
	}
	// The latency samples: an admission and the two yardsticks.
	contenders := []func() error{func() error { return admitFL(delivery()) }, func() error { return bareReplace(yard) }, floor}
	var ratio, floorRatio, admitP50, replaceP50, floorP50, fl1, fl8, sq1, sq8 []float64
	var flIOs, flKiB, sqIOs, sqKiB []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			lat := make([][]time.Duration, len(contenders))
			for range samples {
				for _, i := range rand.Perm(len(contenders)) {
					start := time.Now()
					if err := contenders[i](); err != nil {
						b.Fatal(err)
					}
					lat[i] = append(lat[i], time.Since(start))
				}
			}
			a, p, f := medianDur(lat[0]), medianDur(lat[1]), medianDur(lat[2])
			admitP50 = append(admitP50, float64(a.Microseconds()))
			replaceP50 = append(replaceP50, float64(p.Microseconds()))
			floorP50 = append(floorP50, float64(f.Microseconds()))
			ratio, floorRatio = append(ratio, float64(a)/float64(p)), append(floorRatio, float64(a)/float64(f))
			windows := []struct {
				name string
				run  func()
			}{
				{"FileLedger 8", func() {
					rate, ios, kib := writesPer(b, fl.Dir(), 8, admitFL)
					fl8, flIOs, flKiB = append(fl8, rate), append(flIOs, ios), append(flKiB, kib)
				}},
				{"SQLite 8", func() {
					rate, ios, kib := writesPer(b, sq.dir, 8, sq.admit)
					sq8, sqIOs, sqKiB = append(sq8, rate), append(sqIOs, ios), append(sqKiB, kib)
				}},
				{"FileLedger 1", func() { fl1 = append(fl1, throughput(b, 1, admitFL)) }},
				{"SQLite 1", func() { sq1 = append(sq1, throughput(b, 1, sq.admit)) }},
			}
			var order []string
			for _, i := range rand.Perm(len(windows)) {
				order = append(order, windows[i].name)
				windows[i].run()
			}
			b.Logf("round %d (windows in the order %s): admission p50 %v = %.2fx a bare replace (write, fsync, rename, folder fsync: two fsyncs; p50 %v) = %.2fx the floor (an in-place write and one fdatasync; p50 %v); "+
				"admissions/s with 1 writer: FileLedger %.0f, SQLite %.0f; with 8: FileLedger %.0f, SQLite %.0f (FileLedger %.2fx SQLite in WAL mode, synchronous=FULL); "+
				"device writes per admission with 8 writers: FileLedger %.1f (%.1f KiB), SQLite %.1f (%.1f KiB)",
				r+1, strings.Join(order, ", "), a, float64(a)/float64(p), p, float64(a)/float64(f), f,
				fl1[r], sq1[r], fl8[r], sq8[r], fl8[r]/sq8[r], flIOs[r], flKiB[r], sqIOs[r], sqKiB[r])
		}
	}
	b.StopTimer()
	b.ReportMetric(median(admitP50), "admit-p50-µs")
	b.ReportMetric(median(replaceP50), "replace-p50-µs")
	b.ReportMetric(median(floorP50), "floor-p50-µs")
	b.ReportMetric(median(ratio), "x-replace")
	b.ReportMetric(median(floorRatio), "x-floor")
	b.ReportMetric(median(fl1), "fileledger-1w/s")
	b.ReportMetric(median(fl8), "fileledger-8w/s")
	b.ReportMetric(median(sq1), "sqlite-1w/s")
	b.ReportMetric(median(sq8), "sqlite-8w/s")
	rel := make([]float64, len(fl8))
	for i := range fl8 {
		rel[i] = fl8[i] / sq8[i]
	}
	b.ReportMetric(median(rel), "x-sqlite-8w")
	b.ReportMetric(median(flIOs), "fileledger-8w-writes/admission")
	b.ReportMetric(median(flKiB), "fileledger-8w-KiB/admission")
	b.ReportMetric(median(sqIOs), "sqlite-8w-writes/admission")
	b.ReportMetric(median(sqKiB), "sqlite-8w-KiB/admission")
	b.ReportMetric(0, "ns/op")
}
