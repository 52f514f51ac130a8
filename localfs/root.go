// Package localfs is the FileLedger: the ledger contract over ordinary files in one root
// folder, on local disk or on EFS (NFSv4.1), with advisory locks and atomic replacement.
//
// Layout of a root:
//
//	.amiss-root.state         format version, limits, creation time, high-water clock
//	.amiss-capacity.state     slot count (never understated), one pending key, last batch applied
//	.amiss-cleanup.batch      only while a cleanup batch is being removed
//	.amiss-maintenance.lock   .amiss-admission.lock   .amiss-clock.lock
//	.amiss-row-XX.lock        at most 256, one per first key byte, created lazily
//	rows/XX/<key>.state       one bounded state file per row
//	rows/XX/<key>.report      one bounded report, only while a saved result awaits completion
//	ended/<hour>/<end>-<key>  index of finished rows with a retention end, by end time
//
// Every file is a checksummed frame with a format version, written by atomic replacement
// (temporary file, fsync, rename, fsync of the folder). Locks are taken in one order
// (maintenance, admission, row shards ascending, clock) with bounded waits.
package localfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// File names inside a root.
const (
	RootFile        = ".amiss-root.state"
	CapacityFile    = ".amiss-capacity.state"
	BatchFile       = ".amiss-cleanup.batch"
	MaintenanceLock = ".amiss-maintenance.lock"
	AdmissionLock   = ".amiss-admission.lock"
	ClockLock       = ".amiss-clock.lock"
	RowsDir         = "rows"
	EndedDir        = "ended"
	tmpMarker       = ".tmp-"
)

// Config configures a FileLedger handle.
type Config struct {
	// Limits must match the ones the root was created with.
	Limits ledger.Limits
	// Clock is the time source (default: the system clock).
	Clock ledger.Clock
	// FS is the file system (default: OSFS).
	FS FS
	// Create makes a new root when the folder holds none.
	Create bool
	// LockWait bounds every lock wait (default 10s); a wait that runs out answers ErrBusy.
	LockWait time.Duration
	// StrandedAfter is the idle time after which Cleanup reports an unfinished row
	// (default 15 minutes).
	StrandedAfter time.Duration
	// CleanupBatch bounds the rows one Cleanup pass removes (default 1000).
	CleanupBatch int
	// SweepBatch bounds the rows one Cleanup pass reads looking for stranded and damaged
	// rows (default 2000).
	SweepBatch int
	// Random is the source of evaluation ids and temporary names (default crypto/rand).
	Random io.Reader
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = ledger.SystemClock{}
	}
	if c.FS == nil {
		c.FS = OSFS{}
	}
	if c.LockWait <= 0 {
		c.LockWait = 10 * time.Second
	}
	if c.StrandedAfter <= 0 {
		c.StrandedAfter = 15 * time.Minute
	}
	if c.CleanupBatch <= 0 {
		c.CleanupBatch = 1000
	}
	if c.CleanupBatch > maxBatchEntries {
		c.CleanupBatch = maxBatchEntries
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = 2000
	}
	if c.Random == nil {
		c.Random = rand.Reader
	}
}

// root is what every handle on one opened root shares.
type root struct {
	dir string
	cfg Config
	fs  FS

	maintenance, admission, clock *fileLock

	mu        sync.Mutex
	rowLocks  [256]*fileLock
	shardDirs [256]bool
	bucketDir map[string]bool
	closed    bool
	// inflight counts the operations running on the root; Close waits for them (idle is
	// signalled when the count drops to zero), so no lock is dropped under a running
	// operation.
	inflight int
	idle     *sync.Cond
}

// Ledger is a handle on a FileLedger root. It is safe for concurrent use.
type Ledger struct {
	r       *root
	session bool
}

var _ ledger.Ledger = (*Ledger)(nil)

// Open opens the root in dir: it reads the root state and the capacity record, checks the
// limits, and settles the one pending key. It lists nothing, so it is cheap enough for every
// Lambda cold start. A missing or damaged root state or capacity record, or limits that differ
// from cfg.Limits, fail closed with an error naming the file. With cfg.Create, a folder that
// holds no root yet gets a new one.
func Open(ctx context.Context, dir string, cfg Config) (*Ledger, error) {
	cfg.defaults()
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: root %s: %w", dir, err)
	}
	r := &root{dir: abs, cfg: cfg, fs: cfg.FS, bucketDir: map[string]bool{}}
	r.idle = sync.NewCond(&r.mu)
	if !cfg.Create {
		// Fail before creating lock files in a folder that is not a root.
		if _, err := r.fs.Stat(r.path(RootFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is missing: not a ledger root (create one first)", ledger.ErrRootMismatch, r.path(RootFile))
		}
	}
	if err := r.openLocks(); err != nil {
		return nil, err
	}
	if err := r.load(ctx); err != nil {
		r.close()
		return nil, err
	}
	return &Ledger{r: r}, nil
}

// Prepare opens the root and collects debris: it finishes an interrupted cleanup batch, and
// removes leftover temporary files and dead reports, each under the lock its writer holds, so
// a write in progress in another process is never mistaken for debris. A long-running process
// prepares once and then hands out sessions.
func Prepare(ctx context.Context, dir string, cfg Config) (*Ledger, error) {
	l, err := Open(ctx, dir, cfg)
	if err != nil {
		return nil, err
	}
	if err := l.r.begin(); err != nil {
		return nil, err
	}
	err = l.r.prepare(ctx)
	l.r.end()
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Session returns a handle sharing this one's root, its locks and its settings: no I/O, no
// repeated preparation. Closing a session leaves the root open; closing the handle that
// opened the root ends every session.
func (l *Ledger) Session() *Ledger { return &Ledger{r: l.r, session: true} }

// Dir returns the root folder.
func (l *Ledger) Dir() string { return l.r.dir }

// Close releases the handle's locks and descriptors. It writes nothing. Closing the handle
// that opened the root waits for every operation running on it or on its sessions, and no
// operation starts on the root afterwards (ErrUnavailable): a lock is never released under an
// operation that holds it.
func (l *Ledger) Close() error {
	if !l.session {
		l.r.close()
	}
	return nil
}

// begin registers an operation on the root, or refuses it once the root is closed.
func (r *root) begin() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%w: ledger handle on %s is closed", ledger.ErrUnavailable, r.dir)
	}
	r.inflight++
	return nil
}

// end ends an operation registered by begin.
func (r *root) end() {
	r.mu.Lock()
	r.inflight--
	if r.inflight == 0 {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
}

func (r *root) path(name string) string { return filepath.Join(r.dir, name) }

func (r *root) openLocks() error {
	if r.cfg.Create {
		if err := r.fs.Mkdir(r.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: create root folder %s: %v", ledger.ErrUnavailable, r.dir, err)
		}
	}
	for _, p := range []struct {
		dst  **fileLock
		name string
	}{{&r.maintenance, MaintenanceLock}, {&r.admission, AdmissionLock}, {&r.clock, ClockLock}} {
		l, err := acquireRef(r.fs, r.path(p.name))
		if err != nil {
			r.close()
			return err
		}
		*p.dst = l
	}
	return nil
}

func (r *root) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	for r.inflight > 0 {
		r.idle.Wait()
	}
	for _, l := range append([]*fileLock{r.maintenance, r.admission, r.clock}, r.rowLocks[:]...) {
		if l != nil {
			l.unref()
		}
	}
}

func (r *root) rowLock(shard byte) (*fileLock, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%w: ledger handle closed", ledger.ErrUnavailable)
	}
	if l := r.rowLocks[shard]; l != nil {
		return l, nil
	}
	l, err := acquireRef(r.fs, r.path(fmt.Sprintf(".amiss-row-%02x.lock", shard)))
	if err != nil {
		return nil, err
	}
	r.rowLocks[shard] = l
	return l, nil
}

// lockRow takes the row-shard lock of key.
func (r *root) lockRow(ctx context.Context, key ledger.Key) (func(), error) {
	l, err := r.rowLock(key[0])
	if err != nil {
		return nil, err
	}
	if err := l.lock(ctx, r.cfg.LockWait); err != nil {
		return nil, err
	}
	return l.unlock, nil
}

func lockFile(ctx context.Context, l *fileLock, wait time.Duration) (func(), error) {
	if err := l.lock(ctx, wait); err != nil {
		return nil, err
	}
	return l.unlock, nil
}

// load reads the root state and capacity record, creating them when asked to.
func (r *root) load(ctx context.Context) error {
	data, err := r.fs.ReadFile(r.path(RootFile))
	if errors.Is(err, fs.ErrNotExist) {
		if !r.cfg.Create {
			return fmt.Errorf("%w: %s is missing: not a ledger root (create one first)", ledger.ErrRootMismatch, r.path(RootFile))
		}
		if err := r.create(ctx); err != nil {
			return err
		}
		data, err = r.fs.ReadFile(r.path(RootFile))
	}
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, r.path(RootFile), err)
	}
	st, err := decodeRoot(data)
	if err != nil {
		return fmt.Errorf("%s: %w", r.path(RootFile), err)
	}
	if d := st.Limits.Diff(r.cfg.Limits); d != "" {
		return fmt.Errorf("%w: %s: %s", ledger.ErrRootMismatch, r.path(RootFile), d)
	}
	capa, err := r.readCapacity()
	if err != nil {
		return err
	}
	if capa.Pending != nil {
		return r.settlePending(ctx, *capa.Pending)
	}
	return nil
}

// create writes a new root under the admission lock. The capacity record is written first and
// the root state last, so a root state on disk always has its capacity record beside it.
func (r *root) create(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := r.fs.Stat(r.path(RootFile)); err == nil {
		return nil // another process created it first
	}
	entries, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.dir, err)
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".lock") || strings.Contains(n, tmpMarker) || n == CapacityFile {
			continue // a creation interrupted before its root state
		}
		return fmt.Errorf("%w: %s is missing but the folder holds %s: refusing to create a root over ledger data",
			ledger.ErrRootMismatch, r.path(RootFile), n)
	}
	if err := r.writeCapacity(capacityState{}); err != nil {
		return err
	}
	now := r.cfg.Clock.Now()
	data, err := encodeJSON(kindRoot, rootState{Limits: r.cfg.Limits, CreatedAt: now.UnixNano(), HighWater: now.UnixNano()})
	if err != nil {
		return err
	}
	return r.writeAtomic(r.path(RootFile), data)
}

func (r *root) readRoot() (rootState, error) {
	data, err := r.fs.ReadFile(r.path(RootFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return rootState{}, fmt.Errorf("%w: %s is missing", ledger.ErrRootMismatch, r.path(RootFile))
		}
		return rootState{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, r.path(RootFile), err)
	}
	st, err := decodeRoot(data)
	if err != nil {
		return rootState{}, fmt.Errorf("%s: %w", r.path(RootFile), err)
	}
	return st, nil
}

// highWater returns the persisted high-water clock.
func (r *root) highWater() (time.Time, error) {
	st, err := r.readRoot()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, st.HighWater).UTC(), nil
}

// persistHighWater raises the persisted high-water to at least t, under the clock lock.
func (r *root) persistHighWater(ctx context.Context, t time.Time) error {
	unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := r.readRoot()
	if err != nil {
		return err
	}
	if t.UnixNano() <= st.HighWater {
		return nil
	}
	st.HighWater = t.UnixNano()
	data, err := encodeJSON(kindRoot, st)
	if err != nil {
		return err
	}
	return r.writeAtomic(r.path(RootFile), data)
}

func (r *root) readCapacity() (capacityState, error) {
	p := r.path(CapacityFile)
	data, err := r.fs.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return capacityState{}, fmt.Errorf("%w: %s is missing: the capacity record cannot be rebuilt by guessing", ledger.ErrRootMismatch, p)
		}
		return capacityState{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	c, err := decodeCapacity(data)
	if err != nil {
		return capacityState{}, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

func (r *root) writeCapacity(c capacityState) error {
	data, err := encodeJSON(kindCapacity, c)
	if err != nil {
		return err
	}
	return r.writeAtomic(r.path(CapacityFile), data)
}

// settlePending finishes the bookkeeping of an admission that may have been interrupted: if
// the pending key's row was never written, its slot is given back. Cleanup never removes the
// pending key's row, so an absent row can only mean an interrupted admission.
func (r *root) settlePending(ctx context.Context, key ledger.Key) error {
	if exists, err := r.rowExists(key); err != nil || exists {
		return err
	}
	unlock, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	c, err := r.readCapacity()
	if err != nil {
		return err
	}
	if c.Pending == nil || *c.Pending != key {
		return nil // settled by someone else meanwhile
	}
	if err := r.settleLocked(&c); err != nil {
		return err
	}
	return r.writeCapacity(c)
}

// settleLocked settles c's pending key in memory; the caller holds the admission lock and
// writes c. A pending row that exists is simply no longer pending. An absent one is an
// admission that never finished, whose slot is given back, unless an unfinished cleanup batch
// recorded it as existing (that batch removed it and releases its slot itself).
func (r *root) settleLocked(c *capacityState) error {
	if c.Pending == nil {
		return nil
	}
	exists, err := r.rowExists(*c.Pending)
	if err != nil {
		return err
	}
	if !exists {
		b, err := r.readBatch()
		if err != nil {
			return err
		}
		recorded := b != nil && b.ID > c.AppliedBatch && b.Pending != nil && *b.Pending == *c.Pending
		if !recorded && c.Used > 0 {
			c.Used--
		}
	}
	c.Pending = nil
	return nil
}

// readBatch returns the cleanup batch record, or nil when there is none.
func (r *root) readBatch() (*batchState, error) {
	data, err := r.fs.ReadFile(r.path(BatchFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, r.path(BatchFile), err)
	}
	b, err := decodeBatch(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path(BatchFile), err)
	}
	return &b, nil
}

func (r *root) rowExists(key ledger.Key) (bool, error) {
	_, err := r.fs.Stat(r.statePath(key))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("%w: stat %s: %v", ledger.ErrUnavailable, r.statePath(key), err)
}

func shardName(key ledger.Key) string { return fmt.Sprintf("%02x", key[0]) }

func (r *root) shardDir(key ledger.Key) string { return filepath.Join(r.dir, RowsDir, shardName(key)) }
func (r *root) statePath(key ledger.Key) string {
	return filepath.Join(r.shardDir(key), key.String()+".state")
}
func (r *root) reportPath(key ledger.Key) string {
	return filepath.Join(r.shardDir(key), key.String()+".report")
}

// ensureShardDir creates rows/XX once per process.
func (r *root) ensureShardDir(key ledger.Key) error {
	r.mu.Lock()
	known := r.shardDirs[key[0]]
	r.mu.Unlock()
	if known {
		return nil
	}
	if err := r.mkdirDurable(filepath.Join(r.dir, RowsDir)); err != nil {
		return err
	}
	if err := r.mkdirDurable(r.shardDir(key)); err != nil {
		return err
	}
	r.mu.Lock()
	r.shardDirs[key[0]] = true
	r.mu.Unlock()
	return nil
}

// mkdirDurable creates dir if it is missing and makes its entry durable in the parent.
func (r *root) mkdirDurable(dir string) error {
	err := r.fs.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: mkdir %s: %v", ledger.ErrUnavailable, dir, err)
	}
	if err := r.fs.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("%w: sync %s: %v", ledger.ErrUnavailable, filepath.Dir(dir), err)
	}
	return nil
}

// writeAtomic replaces path with data durably: a temporary file beside it, written and
// fsynced, renamed over path, and the folder fsynced. A failure before the rename leaves the
// old file; a failure after it leaves the new one.
func (r *root) writeAtomic(path string, data []byte) error {
	st, err := r.stage(path, data)
	if err != nil {
		return err
	}
	return st.commit()
}

// staged is a temporary file written and fsynced, not yet renamed into place: invisible to
// every reader until commit.
type staged struct {
	r         *root
	tmp, path string
}

// stage writes data durably to a temporary file beside path.
func (r *root) stage(path string, data []byte) (*staged, error) {
	var rnd [8]byte
	if _, err := io.ReadFull(r.cfg.Random, rnd[:]); err != nil {
		return nil, fmt.Errorf("localfs: temporary name: %w", err)
	}
	st := &staged{r: r, tmp: path + tmpMarker + hex.EncodeToString(rnd[:]), path: path}
	f, err := r.fs.OpenFile(st.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: create %s: %v", ledger.ErrUnavailable, st.tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, st.abort("write", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, st.abort("fsync", err)
	}
	if err := f.Close(); err != nil {
		return nil, st.abort("close", err)
	}
	return st, nil
}

// abort removes the temporary file (best effort: prepare collects what is left) and describes
// the failure.
func (st *staged) abort(op string, err error) error {
	st.r.fs.Remove(st.tmp)
	return fmt.Errorf("%w: %s %s: %v", ledger.ErrUnavailable, op, st.path, err)
}

// commit renames the temporary file into place and fsyncs the folder.
func (st *staged) commit() error {
	if err := st.r.fs.Rename(st.tmp, st.path); err != nil {
		return st.abort("rename", err)
	}
	if err := st.r.fs.SyncDir(filepath.Dir(st.path)); err != nil {
		return fmt.Errorf("%w: sync folder of %s: %v", ledger.ErrUnavailable, st.path, err)
	}
	return nil
}

// readRow reads and checks a row; an absent row is ErrUnknownDelivery, a damaged one
// ErrCorrupt naming the file.
func (r *root) readRow(key ledger.Key) (ledger.Row, error) {
	p := r.statePath(key)
	data, err := r.fs.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ledger.Row{}, fmt.Errorf("%w: %s", ledger.ErrUnknownDelivery, key)
		}
		return ledger.Row{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	return r.decodeRowFile(p, key, data)
}

func (r *root) decodeRowFile(p string, key ledger.Key, data []byte) (ledger.Row, error) {
	row, err := decodeRow(data, r.cfg.Limits)
	if err != nil {
		return ledger.Row{}, fmt.Errorf("%s: %w", p, err)
	}
	if row.Key != key {
		return ledger.Row{}, fmt.Errorf("%s: %w: file holds row %s", p, ledger.ErrCorrupt, row.Key)
	}
	return row, nil
}

func (r *root) writeRow(row *ledger.Row) error {
	data, err := encodeRow(row, r.cfg.Limits)
	if err != nil {
		return err
	}
	if err := r.ensureShardDir(row.Key); err != nil {
		return err
	}
	return r.writeAtomic(r.statePath(row.Key), data)
}

func (r *root) readReport(row *ledger.Row) ([]byte, error) {
	p := r.reportPath(row.Key)
	data, err := r.fs.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: the %v row names a report that is missing", ledger.ErrCorrupt, p, row.State)
		}
		return nil, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	rep, err := decodeReport(data, r.cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if ledger.SumBody(rep) != row.Report.Digest {
		return nil, fmt.Errorf("%w: %s does not match the digest its row recorded", ledger.ErrCorrupt, p)
	}
	return rep, nil
}

// now returns the effective now for a row: the clock, the persisted high-water and the row's
// own times.
func (r *root) now(row *ledger.Row) (time.Time, error) {
	hw, err := r.highWater()
	if err != nil {
		return time.Time{}, err
	}
	if row == nil {
		return ledger.MaxTime(r.cfg.Clock.Now(), hw), nil
	}
	return row.Now(r.cfg.Clock.Now(), hw), nil
}

func (r *root) evaluationID() (string, error) {
	return ledger.NewEvaluationID(r.cfg.Random.Read)
}
