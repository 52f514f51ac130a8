package localfs

import (
	"crypto/rand"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
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
	// SubjectsDir holds the subject records: subjects/XX/<subject key>.state.
	SubjectsDir = "subjects"
	// ShardCapacityFile is the capacity shard's record inside each rows/XX folder.
	ShardCapacityFile = "capacity.state"
	// RoomFile changes before any capacity shard gains room (see capacity.go).
	RoomFile  = ".amiss-room.epoch"
	tmpMarker = ".tmp-"
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

	mu       sync.Mutex
	rowLocks [shardCount]*fileLock
	// durableDirs holds the folders mkdirDurable answered for (ended, ended/<hour>, subjects,
	// subjects/XX).
	durableDirs map[string]bool
	closed      bool
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

func (r *root) evaluationID() (string, error) {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return ledger.NewEvaluationID(r.cfg.Random.Read)
}
