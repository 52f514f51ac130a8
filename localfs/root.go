package localfs

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// File names inside a root (the layout is in the package documentation).
const (
	RootFile          = ".amiss-root.state"
	BatchFile         = ".amiss-cleanup.batch"
	SweepFile         = ".amiss-maintenance.state"
	MaintenanceLock   = ".amiss-maintenance.lock"
	AdmissionLock     = ".amiss-admission.lock"
	ClockLock         = ".amiss-clock.lock"
	RowsDir           = "rows"
	EndedDir          = "ended"
	SubjectsDir       = "subjects"
	ShardCapacityFile = "capacity.state"
	RoomFile          = ".amiss-room.epoch"
	tmpMarker         = ".tmp-"
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
	// StrandedAfter is the idle time after which Cleanup reports an unfinished row (default 15m).
	StrandedAfter time.Duration
	// CleanupBatch bounds the rows one Cleanup pass removes (default 1000), SweepBatch the rows
	// it reads looking for stranded and damaged ones (default 2000).
	CleanupBatch, SweepBatch int
	// DebrisBudget bounds the folder entries Prepare lists looking for debris (default 20,000);
	// the next Prepare goes on where this one stopped.
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
	orDefault(&c.LockWait, 10*time.Second)
	orDefault(&c.StrandedAfter, 15*time.Minute)
	orDefault(&c.CleanupBatch, 1000)
	c.CleanupBatch = min(c.CleanupBatch, maxBatchEntries)
	orDefault(&c.SweepBatch, 2000)
	orDefault(&c.DebrisBudget, 20_000)
	if c.Random == nil {
		c.Random = rand.Reader
	}
}

// orDefault sets v to d unless v is positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// root is what every handle on one opened root shares.
type root struct {
	dir  string
	cfg  Config
	fs   FS
	sync *syncer

	maintenance, admission, clock *fileLock

	mu       sync.Mutex
	rowLocks [shardCount]*fileLock
	// durableDirs holds the folders mkdirDurable answered for.
	durableDirs map[string]bool
	closed      bool
	// inflight counts the operations running on the root; Close waits for them (idle is
	// signalled at zero), so no lock is dropped under a running operation.
	inflight int
	idle     *sync.Cond
	randMu   sync.Mutex
	// fullProof is the room epoch under which this process read every shard full, and
	// fullProofAt when (by the ledger's clock); the proof lapses after FullProofLife.
	fullProof   *uint64
	fullProofAt time.Time
	// durableSlot[s] is the row this process last admitted with a slot of shard s and saw made
	// durable: an admission may drop it from the pending list without a syncfs (sawDurable).
	durableSlot [shardCount]pendingSlot
}

// Ledger is a handle on a FileLedger root. It is safe for concurrent use.
type Ledger struct {
	// Records runs the single-record operations (ledger.Records) over the root.
	ledger.Records
	r       *root
	session bool
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

// operation runs fn as an operation registered on r (begin, end), and answers its value, or the
// zero value with its error named by op.
func operation[T any](r *root, op string, fn func() (T, error)) (T, error) {
	var zero T
	if err := r.begin(); err != nil {
		return zero, err
	}
	defer r.end()
	out, err := fn()
	if err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func (r *root) path(name string) string { return filepath.Join(r.dir, name) }

// random8 reads 8 bytes from Config.Random.
func (r *root) random8() (v [8]byte, err error) {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	_, err = io.ReadFull(r.cfg.Random, v[:])
	return v, err
}

func (r *root) evaluationID() (string, error) {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return ledger.NewEvaluationID(r.cfg.Random.Read)
}

// unavailable describes a failed file system call (op on name) as ErrUnavailable; nil stays nil.
func unavailable(err error, op, name string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s %s: %v", ledger.ErrUnavailable, op, name, err)
}

// readFile reads the file at p and decodes it: exists is false (with no error) when there is
// none, a read that fails is ErrUnavailable, and a decoding that fails names the file.
func readFile[T any](r *root, p string, decode func([]byte) (T, error)) (v T, exists bool, err error) {
	data, err := r.fs.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return v, false, nil
	}
	if err != nil {
		return v, false, unavailable(err, "read", p)
	}
	if v, err = decode(data); err != nil {
		return v, true, fmt.Errorf("%s: %w", p, err)
	}
	return v, true, nil
}
