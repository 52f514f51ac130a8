package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/amiss-ci/amiss/ledger"
)

// Config configures a handle on an S3 ledger.

// Config configures a handle on an S3 ledger.
type Config struct {
	// Client is the S3 client (see NewClient).
	Client *s3.Client
	// Bucket and Prefix locate the ledger; Prefix is empty or ends with "/".
	Bucket, Prefix string
	// Limits must match the ones the ledger was created with.
	Limits ledger.Limits
	// Clock is the host's clock, read only for the time elapsed since the store's last
	// answer (default: the monotonic clock). It never decides anything on its own.
	Clock ledger.Clock
	// Create makes a new ledger when the prefix holds none.
	Create bool
	// Shards is the number of capacity shards a new ledger gets (default 16).
	Shards int
	// StrandedAfter is how long an unfinished row with no live lease stays idle before cleanup
	// reports it stranded (default 15 minutes). CleanupBatch bounds what one cleanup pass
	// looks at (default 1000). SweepBatch is how many rows and subject records a pass of the
	// safety net's lap reads (default 1000; a lap runs once a month, see cleanup.go).
	StrandedAfter time.Duration
	CleanupBatch  int
	SweepBatch    int
	// HighWaterEvery gathers cleanup's removals of rows: a row is removed at the first whole
	// period after its retention ends (default an hour), so that the high-water, which a pass
	// persists before it deletes a row (a write of the root and of every capacity shard), is
	// written about once a period. Negative: a row is removed as soon as it can be.
	HighWaterEvery time.Duration
	// MaintenanceLease is how long one cleanup pass may hold maintenance (default 15 minutes,
	// three times the cleanup function's timeout). It is checked by fence before every batch
	// of deletes; safety never rests on it (deletes name versions), only progress.
	MaintenanceLease time.Duration
	// PendingGrace is how old, by the store's clock, an unfinished admission must be before
	// another one recounts it (default 2 minutes). Recounting early only makes that admission
	// retry; it never costs a slot or lets a row in without one.
	PendingGrace time.Duration
	// RequestLife is how long after it was signed a request can still land on the store
	// (default 31 minutes: see DefaultRequestLife). A row's key is emptied no sooner than that
	// after its reservation landed, so that no copy of the reservation's PUT, landing late on
	// the empty key, lets a copy of the row's create land over it again; and no object is
	// forgotten sooner than that after its last write. This compares two readings of the
	// store's clock (the writer's, through its handle, and cleanup's): its last minute is margin
	// for the store's nodes, which the ledger assumes agree within 10 seconds. Only a deployment
	// whose transport bounds a request's life more tightly (a test's) may set it lower.
	RequestLife time.Duration
	// Owner names this handle in the maintenance lease (default: random).
	Owner string
	// Random is the source of evaluation ids and write tokens (default crypto/rand).
	Random io.Reader
}

func (c *Config) defaults() error {
	if c.Client == nil || c.Bucket == "" {
		return fmt.Errorf("%w: objstore needs a client and a bucket", ledger.ErrInvalid)
	}
	if c.Shards <= 0 {
		c.Shards = 16
	}
	if c.StrandedAfter <= 0 {
		c.StrandedAfter = 15 * time.Minute
	}
	if c.CleanupBatch <= 0 {
		c.CleanupBatch = 1000
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = 1000
	}
	if c.HighWaterEvery == 0 {
		c.HighWaterEvery = time.Hour
	}
	if c.MaintenanceLease <= 0 {
		c.MaintenanceLease = 15 * time.Minute
	}
	if c.PendingGrace <= 0 {
		c.PendingGrace = 2 * time.Minute
	}
	if c.RequestLife <= 0 {
		c.RequestLife = DefaultRequestLife
	}
	if c.Random == nil {
		c.Random = rand.Reader
	}
	if c.Owner == "" {
		var b [8]byte
		if _, err := io.ReadFull(c.Random, b[:]); err != nil {
			return err
		}
		c.Owner = "cleanup-" + hex.EncodeToString(b[:])
	}
	return nil
}

// Ledger is a handle on an S3 ledger. It is safe for concurrent use.
type Ledger struct {
	// Records runs the single-record operations (ledger.Records) over the store.
	ledger.Records
	s      store
	clock  *storeClock
	cfg    Config
	shards int
	hw     atomic.Int64 // high-water read at open or raised by this handle's cleanup
	hwRead atomic.Int64 // when the root was last read (monotonic nanoseconds since start)
	// rootReadAt is when the root was last read by the store's clock (the estimate just after
	// its answer): the monotonic time above counts nothing while the host is suspended.
	rootReadAt atomic.Int64
	start      time.Time

	mu    sync.Mutex
	cache map[ledger.Key]cachedRow
	// subjects are the subject records each row's verdict asked for through this handle
	// (noteSubject); subjectCache the records as its own last writes left them.
	subjects     map[ledger.Key][]ledger.SubjectKey
	subjectCache map[ledger.SubjectKey]cachedSubject
	// shardCache are the capacity shards as this handle last read or wrote them.
	shardCache map[int]shardVersion
	// cleaning keeps this handle's own cleanups apart: they share one owner name, which the
	// maintenance lease does not tell apart.
	cleaning sync.Mutex
}

var _ ledger.Ledger = (*Ledger)(nil)

const (
	rootName        = "root.json"
	maintenanceName = "maintenance.json"
	batchName       = "batch.json"
	sweepName       = "sweep.json"
	rowsPrefix      = "rows/"
	endedPrefix     = "ended/"
	maxPending      = 512
	maxRetries      = 16
	maxCache        = 4096
)

func rowName(k ledger.Key) string { return rowsPrefix + k.String() + ".json" }

// Open opens the ledger under cfg.Prefix: it checks that the bucket keeps versions, reads the
// root object and checks the limits. A bucket whose versioning is not enabled (suspended, or
// never enabled), a missing or damaged root, or other limits, fail closed with an error naming
// the setting or the object.
func Open(ctx context.Context, cfg Config) (*Ledger, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	clock := newStoreClock(cfg.Clock)
	l := &Ledger{s: store{client: cfg.Client, bucket: cfg.Bucket, prefix: cfg.Prefix, clock: clock}, clock: clock, cfg: cfg,
		cache: map[ledger.Key]cachedRow{}}
	// Every start checks that the bucket keeps versions, not only the creation: an operator
	// may have suspended versioning since, and rows written meanwhile are "null" versions that
	// every later write replaces in place.
	if err := l.s.requireVersioning(ctx); err != nil {
		return nil, err
	}
	root, rootTag, err := l.readRoot(ctx)
	if errors.Is(err, errNotFound) {
		if !cfg.Create {
			return nil, fmt.Errorf("%w: %s is missing: not a ledger (create one first)", ledger.ErrRootMismatch, l.s.key(rootName))
		}
		if err := l.create(ctx); err != nil {
			return nil, err
		}
		root, rootTag, err = l.readRoot(ctx)
	}
	if err != nil {
		return nil, err
	}
	if root, err = l.reconcile(ctx, root, rootTag); err != nil {
		return nil, err
	}
	// The handle decides with the limits the root records (a body-age adoption time
	// included), which Reconcile found equal to the configured ones.
	l.cfg.Limits = root.Limits
	if root.Shards <= 0 || root.Shards > 256 {
		return nil, fmt.Errorf("%w: %s: %d capacity shards", ledger.ErrCorrupt, l.s.key(rootName), root.Shards)
	}
	l.Records = ledger.NewRecords(recordStore{l}, recordStore{l}, l.cfg.Limits)
	l.shards = root.Shards
	l.hw.Store(root.HighWater)
	l.start = time.Now()
	l.rootReadAt.Store(l.clock.Now().UnixNano())
	return l, nil
}

// reconcile checks the root's limits against the configured ones and records an adoption of a
// body-age ceiling (ledger.Limits.Reconcile) with a conditional write of the root it read, so
// that the high-water and batch state written meanwhile by a cleanup are never lost: on a lost
// race it reads the root again and decides again. It returns the root as recorded.
func (l *Ledger) reconcile(ctx context.Context, root rootData, tag string) (rootData, error) {
	for attempt := 0; ; attempt++ {
		if attempt == maxRetries {
			return rootData{}, fmt.Errorf("%w: %s contended while recording body times", ledger.ErrBusy, l.s.key(rootName))
		}
		now := ledger.MaxTime(l.clock.Now(), time.Unix(0, root.HighWater).UTC())
		limits, adopt, err := root.Limits.Reconcile(l.cfg.Limits, now)
		if err != nil {
			return rootData{}, fmt.Errorf("%s: %w", l.s.key(rootName), err)
		}
		if !adopt {
			return root, nil
		}
		adopted := root
		adopted.Limits = limits
		body, token, err := l.encode(kindRoot, adopted)
		if err != nil {
			return rootData{}, err
		}
		if _, err = l.s.put(ctx, rootName, body, token, tag, false); err == nil {
			return adopted, nil
		} else if !errors.Is(err, errRaced) {
			return rootData{}, fmt.Errorf("record body times in %s: %w", l.s.key(rootName), err)
		}
		if root, tag, err = l.readRoot(ctx); err != nil {
			return rootData{}, err
		}
	}
}

// create writes the shards, then the root: a root object always has its shards.
func (l *Ledger) create(ctx context.Context) error {
	l.shards = l.cfg.Shards
	for i := range l.shards {
		body, token, err := l.encode(kindShard, shardData{Quota: l.cfg.Limits.ShardQuota(l.shards, i)})
		if err != nil {
			return err
		}
		if _, err := l.s.put(ctx, capacityName(i), body, token, "", true); err != nil && !errors.Is(err, errRaced) {
			return err
		}
	}
	now := l.clock.Now().UnixNano()
	body, token, err := l.encode(kindRoot, rootData{Limits: l.cfg.Limits, Shards: l.shards, CreatedAt: now, HighWater: now})
	if err != nil {
		return err
	}
	if _, err := l.s.put(ctx, rootName, body, token, "", true); err != nil && !errors.Is(err, errRaced) {
		return err
	}
	return nil
}

// Close implements ledger.Ledger; a handle holds nothing to release.
func (l *Ledger) Close() error { return nil }

func (l *Ledger) token() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(l.cfg.Random, b[:]); err != nil {
		return "", fmt.Errorf("objstore: write token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (l *Ledger) encode(kind string, data any) ([]byte, string, error) {
	tok, err := l.token()
	if err != nil {
		return nil, "", err
	}
	body, err := encode(kind, tok, data)
	return body, tok, err
}

func (l *Ledger) readRoot(ctx context.Context) (rootData, string, error) {
	o, err := l.s.get(ctx, rootName)
	if err != nil {
		return rootData{}, "", err
	}
	var r rootData
	if err := decode(l.s.key(rootName), kindRoot, o.body, &r); err != nil {
		return rootData{}, "", err
	}
	if err := r.Limits.Validate(); err != nil {
		return rootData{}, "", fmt.Errorf("%w: %s holds invalid limits: %v", ledger.ErrCorrupt, l.s.key(rootName), err)
	}
	return r, o.etag, nil
}

func (l *Ledger) highWater() time.Time { return time.Unix(0, l.hw.Load()).UTC() }

// hwRefresh is how often admission re-reads the root's high-water, which another process's
// cleanup may have raised.
const hwRefresh = time.Minute

// refreshHighWater re-reads the root when the last read is older than hwRefresh: one request
// a minute at most, so a high-water persisted elsewhere reaches every handle within a minute.
func (l *Ledger) refreshHighWater(ctx context.Context) error {
	if time.Since(l.start)-time.Duration(l.hwRead.Load()) < hwRefresh {
		return nil
	}
	return l.rereadRoot(ctx)
}

// rootMaxAge is how old, by the store's time, the handle's last read of the root may be when an
// admission takes a slot for a new row. The minute of refreshHighWater is measured on the
// host's monotonic clock, which stops while the host is suspended (a paused VM, a frozen
// Lambda): a handle of an older body-time policy could wake hours after an adoption and admit
// a replay of a body row forgotten meanwhile as a new permanent row. rootMaxAge plus the life
// of a request held in flight stays well inside ledger.BodyPolicyGrace.
const rootMaxAge = 10 * time.Minute

// rootCurrent re-reads the root when its last read is rootMaxAge old at now, a store time
// read from a fresh answer.
func (l *Ledger) rootCurrent(ctx context.Context, now time.Time) error {
	if now.Sub(time.Unix(0, l.rootReadAt.Load())) < rootMaxAge {
		return nil
	}
	return l.rereadRoot(ctx)
}

// rereadRoot reads the root: a handle whose root's recorded policy changed stops; the
// high-water is raised to the root's.
func (l *Ledger) rereadRoot(ctx context.Context) error {
	since := time.Since(l.start)
	root, _, err := l.readRoot(ctx)
	if err != nil {
		return err
	}
	// A root whose recorded policy changed since this handle opened it (another handle
	// adopted body times) is never acted on under the older one: this handle stops.
	if d := root.Limits.Diff(l.cfg.Limits); d != "" {
		return fmt.Errorf("%w: %s changed since this handle opened it (reopen): %s", ledger.ErrRootMismatch, l.s.key(rootName), d)
	}
	l.hwRead.Store(int64(since))
	l.rootReadAt.Store(l.clock.Now().UnixNano())
	l.raiseHighWater(time.Unix(0, root.HighWater))
	return nil
}

// nowFor is the effective now of a decision on row (nil for a new key): the store's time,
// raised by the persisted high-water and the row's own times.
func (l *Ledger) nowFor(row *ledger.Row) time.Time {
	if row == nil {
		return ledger.MaxTime(l.clock.Now(), l.highWater())
	}
	return row.Now(l.clock.Now(), l.highWater())
}
