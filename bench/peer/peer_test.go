// Package peer measures the FileLedger's admission against its yardsticks in one run: a bare
// durable replace of one file, and SQLite (WAL, synchronous=FULL) doing what an admission does
// (one transaction: check the capacity count, insert the row, count it). Measurements, never
// assertions: docs/benchmarks.md records the figures.
package peer

import (
	"context"
	"database/sql"
	"fmt"
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
		Subject: fmt.Appendf(nil, `{"provider":"github","repository":"acme/app","sha":"%040d","ref":"refs/heads/main","event":"push"}`, n),
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
	db      *sql.DB
	dir     string
	subject []byte
}

func openSQLite(b *testing.B, conns int) *sqlitePeer {
	p := filepath.Join(b.TempDir(), "peer.db")
	db, err := sql.Open("sqlite3", "file:"+p+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=30000&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	for _, q := range []string{
		`CREATE TABLE rows (key BLOB PRIMARY KEY, binding BLOB NOT NULL, state TEXT NOT NULL, subject BLOB NOT NULL, created INTEGER NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE capacity (id INTEGER PRIMARY KEY, used INTEGER NOT NULL, cap INTEGER NOT NULL)`,
		`INSERT INTO capacity VALUES (1, 0, 100000000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		b.Fatalf("journal mode %q %v", mode, err)
	}
	b.Cleanup(func() { db.Close() })
	return &sqlitePeer{db: db, dir: filepath.Dir(p)}
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
	if _, err := tx.Exec(`INSERT INTO rows VALUES (?, ?, 'pending', ?, ?)`, k[:], bd[:], d.Subject, time.Now().UnixNano()); err != nil {
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

// BenchmarkPeers measures, in rounds that interleave every contender so that all of them see
// the same disk: the median latency of one admission against one bare durable replace (the
// two alternated, one sample each in turn), and admissions per second with 1 and 8 writers for
// the FileLedger and for SQLite.
func BenchmarkPeers(b *testing.B) {
	ctx := context.Background()
	fl := openLedger(b)
	sq := openSQLite(b, 8)
	yard := filepath.Join(b.TempDir(), "yardstick")
	admitFL := func(d ledger.Delivery) error {
		a, err := fl.Admit(ctx, d)
		if err == nil && a.Outcome != ledger.Admitted {
			err = fmt.Errorf("admission answered %v", a.Outcome)
		}
		return err
	}
	var ratio, admitP50, replaceP50, fl1, fl8, sq1, sq8 []float64
	var flIOs, flKiB, sqIOs, sqKiB []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			var ad, rp []time.Duration
			for range samples {
				start := time.Now()
				if err := admitFL(delivery()); err != nil {
					b.Fatal(err)
				}
				ad = append(ad, time.Since(start))
				start = time.Now()
				if err := bareReplace(yard); err != nil {
					b.Fatal(err)
				}
				rp = append(rp, time.Since(start))
			}
			a, p := medianDur(ad), medianDur(rp)
			admitP50 = append(admitP50, float64(a.Microseconds()))
			replaceP50 = append(replaceP50, float64(p.Microseconds()))
			ratio = append(ratio, float64(a)/float64(p))
			rate, ios, kib := writesPer(b, fl.Dir(), 8, admitFL)
			fl8, flIOs, flKiB = append(fl8, rate), append(flIOs, ios), append(flKiB, kib)
			rate, ios, kib = writesPer(b, sq.dir, 8, sq.admit)
			sq8, sqIOs, sqKiB = append(sq8, rate), append(sqIOs, ios), append(sqKiB, kib)
			fl1 = append(fl1, throughput(b, 1, admitFL))
			sq1 = append(sq1, throughput(b, 1, sq.admit))
			b.Logf("round %d: admission p50 %v, bare replace p50 %v (%.2fx); admissions/s: FileLedger 1 %.0f, 8 %.0f; SQLite 1 %.0f, 8 %.0f (8 writers: %.2fx SQLite); device writes per admission with 8 writers: FileLedger %.1f (%.1f KiB), SQLite %.1f (%.1f KiB)",
				r+1, a, p, float64(a)/float64(p), fl1[r], fl8[r], sq1[r], sq8[r], fl8[r]/sq8[r], flIOs[r], flKiB[r], sqIOs[r], sqKiB[r])
		}
	}
	b.StopTimer()
	b.ReportMetric(median(admitP50), "admit-p50-µs")
	b.ReportMetric(median(replaceP50), "replace-p50-µs")
	b.ReportMetric(median(ratio), "x-replace")
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
