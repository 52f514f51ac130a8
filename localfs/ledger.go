package localfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// File names inside a root.
const (
	RootFile        = ".amiss-root.state"
	BatchFile       = ".amiss-cleanup.batch"
	SweepFile       = ".amiss-maintenance.state"
	MaintenanceLock = ".amiss-maintenance.lock"
	AdmissionLock   = ".amiss-admission.lock"
	ClockLock       = ".amiss-clock.lock"
	RowsDir         = "rows"
	EndedDir        = "ended"
	// ShardCapacityFile is the capacity shard's record inside each rows/XX folder.
	ShardCapacityFile = "capacity.state"
	// RoomFile changes before any capacity shard gains room (see capacity.go).
	RoomFile = ".amiss-room.epoch"
	// CapacityFile is the capacity record of format 1, read only to migrate.
	CapacityFile = ".amiss-capacity.state"
	tmpMarker    = ".tmp-"
)

// shardCount is the number of row shards, and of capacity shards: one per first key byte.
const shardCount = 256

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
	// DebrisBudget bounds the folder entries Prepare lists looking for debris (default
	// 20,000); the next Prepare goes on where this one stopped.
	DebrisBudget int
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
	if c.DebrisBudget <= 0 {
		c.DebrisBudget = 20_000
	}
	if c.Random == nil {
		c.Random = rand.Reader
	}
}

// root is what every handle on one opened root shares.
type root struct {
	dir  string
	cfg  Config
	fs   FS
	sync *syncer

	maintenance, admission, clock *fileLock

	mu        sync.Mutex
	rowLocks  [shardCount]*fileLock
	bucketDir map[string]bool
	closed    bool
	// inflight counts the operations running on the root; Close waits for them (idle is
	// signalled when the count drops to zero), so no lock is dropped under a running
	// operation.
	inflight int
	idle     *sync.Cond
	randMu   sync.Mutex
	// fullProof is the room epoch under which this process read every shard full, and
	// fullProofAt when (by the ledger's clock); the proof lapses after FullProofLife.
	fullProof   *uint64
	fullProofAt time.Time
	// durableSlot[s] is the row this process last admitted with a slot of capacity shard s
	// and saw made durable (sawDurable): an admission may drop it from the pending list
	// without a syncfs.
	durableSlot [shardCount]pendingSlot
}

// Ledger is a handle on a FileLedger root. It is safe for concurrent use.
type Ledger struct {
	r       *root
	session bool
}

var _ ledger.Ledger = (*Ledger)(nil)

// Open opens the root in dir: it reads the root state and checks the limits. It lists nothing
// and reads one file, so it is cheap enough for every Lambda cold start. A root written by
// format 1 is migrated first (see migrate.go). A missing or damaged root state, or limits that
// differ from cfg.Limits, fail closed with an error naming the file; a missing or damaged
// capacity shard fails closed when an admission or Prepare reads it. With cfg.Create, a folder
// that holds no root yet gets a new one.
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
	r.sync = newSyncer(r.fs, abs)
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
	// Asked once the folder exists: it answers for the file system mounted there.
	r.sync.writeBack = vfs.FlushCoversWriteBack(r.fs, abs)
	return &Ledger{r: r}, nil
}

// Prepare opens the root, checks every capacity shard, finishes an interrupted cleanup batch
// and collects debris: leftover temporary files and dead reports, each removed only under the
// lock its writer holds, so a write in progress in another process is never mistaken for
// debris. Its work is bounded whatever the size of the root: it lists the root folder and at
// most Config.DebrisBudget entries of row folders, going on where the previous Prepare stopped
// (the cleanup sweep collects debris too, in the folders it lists). A long-running process
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

// load reads the root state, creating the root or migrating it from format 1 when needed.
func (r *root) load(ctx context.Context) error {
	st, version, err := r.readRootVersion()
	if errors.Is(err, fs.ErrNotExist) {
		if !r.cfg.Create {
			return fmt.Errorf("%w: %s is missing: not a ledger root (create one first)", ledger.ErrRootMismatch, r.path(RootFile))
		}
		if err := r.create(ctx); err != nil {
			return err
		}
		st, version, err = r.readRootVersion()
	}
	if err != nil {
		return err
	}
	// Limits that differ fail closed before anything is written; a body-age ceiling to adopt
	// is recorded after a migration, in a root state of this format.
	_, adopt, err := st.Limits.Reconcile(r.cfg.Limits, time.Unix(0, st.HighWater))
	if err != nil {
		return fmt.Errorf("%s: %w", r.path(RootFile), err)
	}
	if version < FormatVersion {
		if err := r.migrate(ctx); err != nil {
			return err
		}
	}
	if adopt {
		if err := r.adoptBodyTimes(ctx); err != nil {
			return err
		}
	}
	// The handle decides with the limits the root records (the time body times were adopted
	// included), which Reconcile found equal to the configured ones.
	st, err = r.readRoot()
	if err != nil {
		return err
	}
	r.cfg.Limits = st.Limits
	return nil
}

// adoptBodyTimes records a configured body-age ceiling, and when it was adopted, in a root
// created without one (ledger.Limits.Reconcile), under the clock lock that guards every write
// of the root state, so a high-water or batch id written meanwhile is never lost. The
// adoption time is the root's effective now. It is durable before the root is used.
func (r *root) adoptBodyTimes(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := r.readRoot()
	if err != nil {
		return err
	}
	now := ledger.MaxTime(r.cfg.Clock.Now(), time.Unix(0, st.HighWater).UTC())
	limits, adopt, err := st.Limits.Reconcile(r.cfg.Limits, now)
	if err != nil {
		return fmt.Errorf("%s: %w", r.path(RootFile), err)
	}
	if !adopt {
		return nil // another process adopted them first
	}
	st.Limits = limits
	out, err := encodeJSON(kindRoot, st)
	if err != nil {
		return err
	}
	if err := r.replace(r.path(RootFile), out, durableFull); err != nil {
		return fmt.Errorf("record body times in %s: %w", r.path(RootFile), err)
	}
	return nil
}

// create writes a new root under the admission lock: the 256 row folders, each with its
// capacity shard, made durable by one syncfs, and the root state last, so a root state on
// disk always has every capacity shard beside it.
func (r *root) create(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := r.fs.Stat(r.path(RootFile)); err == nil {
		return nil // another process created it first
	}
	if err := r.checkEmptyForCreate(); err != nil {
		return err
	}
	// The root state that follows finds every record durable.
	if err := r.writeShards(true, func(s int) shardState {
		return shardState{Seq: 1, Shard: s, Quota: quota(r.cfg.Limits.RecordCap, s)}
	}); err != nil {
		return err
	}
	now := r.cfg.Clock.Now()
	data, err := encodeJSON(kindRoot, rootState{Limits: r.cfg.Limits, CreatedAt: now.UnixNano(), HighWater: now.UnixNano()})
	if err != nil {
		return err
	}
	return r.replace(r.path(RootFile), data, durableFull)
}

// checkEmptyForCreate refuses to create a root over ledger data: the folder may hold lock
// files, temporary files and what an interrupted creation left (row folders holding only
// capacity shards), nothing else.
func (r *root) checkEmptyForCreate() error {
	entries, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.dir, err)
	}
	refuse := func(n string) error {
		return fmt.Errorf("%w: %s is missing but the folder holds %s: refusing to create a root over ledger data",
			ledger.ErrRootMismatch, r.path(RootFile), n)
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasSuffix(n, ".lock") || strings.Contains(n, tmpMarker):
		case n == RowsDir:
			shards, err := r.fs.ReadDir(r.path(RowsDir))
			if err != nil {
				return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.path(RowsDir), err)
			}
			for _, s := range shards {
				names, err := r.fs.ReadDir(filepath.Join(r.path(RowsDir), s.Name()))
				if err != nil {
					return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, filepath.Join(r.path(RowsDir), s.Name()), err)
				}
				for _, f := range names {
					if f.Name() != ShardCapacityFile && !strings.Contains(f.Name(), tmpMarker) {
						return refuse(filepath.Join(RowsDir, s.Name(), f.Name()))
					}
				}
			}
		default:
			return refuse(n)
		}
	}
	return nil
}

// readRoot reads the root state, which must be of this format.
func (r *root) readRoot() (rootState, error) {
	st, version, err := r.readRootVersion()
	if err == nil && version < FormatVersion {
		err = fmt.Errorf("%w: %s is of format %d: it must be migrated (open it again)", ledger.ErrRootMismatch, r.path(RootFile), version)
	}
	return st, err
}

// readRootVersion reads the root state and the format that wrote it. A missing one is
// ErrRootMismatch, and matches fs.ErrNotExist too.
func (r *root) readRootVersion() (rootState, uint16, error) {
	p := r.path(RootFile)
	data, err := r.fs.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return rootState{}, 0, fmt.Errorf("%w: %s is missing (%w)", ledger.ErrRootMismatch, p, err)
	}
	if err != nil {
		return rootState{}, 0, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	st, version, err := decodeRootVersion(data)
	if err != nil {
		return rootState{}, 0, fmt.Errorf("%s: %w", p, err)
	}
	return st, version, nil
}

// highWater returns the persisted high-water clock.
func (r *root) highWater() (time.Time, error) {
	st, err := r.readRoot()
	if err != nil {
		return time.Time{}, err
	}
	// A root whose recorded policy changed since this handle opened it (another process
	// adopted body times) is never acted on under the older one: the handle stops.
	if d := st.Limits.Diff(r.cfg.Limits); d != "" {
		return time.Time{}, fmt.Errorf("%w: %s changed since this handle opened it (reopen): %s", ledger.ErrRootMismatch, r.path(RootFile), d)
	}
	return time.Unix(0, st.HighWater).UTC(), nil
}

// persistRoot raises the persisted high-water to at least t and, when newBatch is set,
// reserves the next cleanup batch id, under the clock lock. It returns the id reserved.
func (r *root) persistRoot(ctx context.Context, t time.Time, newBatch bool) (uint64, error) {
	unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return 0, err
	}
	defer unlock()
	st, err := r.readRoot()
	if err != nil {
		return 0, err
	}
	if t.UnixNano() <= st.HighWater && !newBatch {
		return 0, nil
	}
	st.HighWater = max(st.HighWater, t.UnixNano())
	if newBatch {
		st.LastBatch++
	}
	data, err := encodeJSON(kindRoot, st)
	if err != nil {
		return 0, err
	}
	// Full durability: the high-water must be on disk before cleanup deletes anything, and a
	// batch id must never be handed out twice.
	return st.LastBatch, r.replace(r.path(RootFile), data, durableFull)
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
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return ledger.NewEvaluationID(r.cfg.Random.Read)
}
