// Package objstore is the S3 ledger: the ledger contract over one bucket and prefix, with
// conditional writes (If-None-Match: * to create, If-Match on the ETag read to change) as the
// only coordination. It works with AWS S3 and with S3-compatible stores that honour
// conditional PUTs (MinIO from RELEASE.2025-09-07T16-13-09Z), in a versioned bucket.
//
// Layout under the prefix:
//
//	root.json              limits, shard count, creation time, high-water clock
//	capacity/NN.json       capacity shards: quota, slots used, pending admissions, last batch
//	rows/<key>.json        one object per row: the row, and its report while it may be
//	                       published; or, before the row exists, the reservation of its key
//	ended/<end>-<key>      empty index entries of finished rows with a retention end
//	maintenance.json       the fenced maintenance lease (one cleanup at a time)
//	batch.json             the last cleanup batch
//
// Every object carries a format version, a CRC-32C of its data and a unique write token, so a
// write whose answer was lost is recognised as one's own when read back.
//
// Clock: the store's. Every answer carries a Date; every decision (lease liveness, freshness,
// retention, the high-water) uses the store's time estimated from the latest Date, raised by
// the persisted high-water and the row's own times. Hosts' clocks decide nothing. The
// resolution is one second: a lease may be honoured up to a second (plus one answer's transit)
// past its end, so lease windows are tens of seconds.
//
// Deletion names the exact version it judged: cleanup deletes a removable row's older versions,
// then the judged version by its version id, never by key. A write that landed after the
// judgement is a newer version and survives any late DELETE. The bucket must keep versions;
// a lifecycle rule expires the noncurrent ones.
//
// Capacity is exact: an admission writes a reservation at its key, takes a slot naming that
// reservation, and creates the row only over the reservation (If-Match). Settling an entry
// whose admission is over voids the reservation first, so a row write held in flight can
// never land once its slot was given back.
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
	// StrandedAfter, CleanupBatch and SweepBatch are as for the FileLedger (defaults 15
	// minutes, 1000, 1000).
	StrandedAfter time.Duration
	CleanupBatch  int
	SweepBatch    int
	// MaintenanceLease is how long one cleanup pass may hold maintenance (default 15 minutes,
	// three times the cleanup function's timeout). It is checked by fence before every batch
	// of deletes; safety never rests on it (deletes name versions), only progress.
	MaintenanceLease time.Duration
	// PendingGrace is how old, by the store's clock, an unfinished admission must be before
	// another one settles it (default 2 minutes). Settling early only makes that admission
	// retry; it never costs a slot or lets a row in without one.
	PendingGrace time.Duration
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
	if c.MaintenanceLease <= 0 {
		c.MaintenanceLease = 15 * time.Minute
	}
	if c.PendingGrace <= 0 {
		c.PendingGrace = 2 * time.Minute
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
	s      store
	clock  *storeClock
	cfg    Config
	shards int
	hw     atomic.Int64 // high-water read at open or raised by this handle's cleanup
	hwRead atomic.Int64 // when the root was last read (monotonic nanoseconds since start)
	start  time.Time

	mu    sync.Mutex
	cache map[ledger.Key]cachedRow
	// cleaning keeps this handle's own cleanups apart: they share one owner name, which the
	// maintenance lease does not tell apart.
	cleaning sync.Mutex
	// versioned is set once the bucket was seen to keep versions.
	versioned atomic.Bool
}

var _ ledger.Ledger = (*Ledger)(nil)

type cachedRow struct {
	etag string
	data rowData
}

const (
	rootName        = "root.json"
	maintenanceName = "maintenance.json"
	batchName       = "batch.json"
	rowsPrefix      = "rows/"
	endedPrefix     = "ended/"
	maxPending      = 512
	maxRetries      = 16
	maxCache        = 4096
)

func shardName(i int) string                 { return fmt.Sprintf("capacity/%02d.json", i) }
func rowName(k ledger.Key) string            { return rowsPrefix + k.String() + ".json" }
func (l *Ledger) homeShard(k ledger.Key) int { return int(k[1]) % l.shards }

func (l *Ledger) quota(i int) int64 {
	c := l.cfg.Limits.RecordCap
	q := c / int64(l.shards)
	if int64(i) < c%int64(l.shards) {
		q++
	}
	return q
}

// Open opens the ledger under cfg.Prefix: it reads the root object and checks the limits. A
// missing or damaged root, or other limits, fail closed with an error naming the object.
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
	root, _, err := l.readRoot(ctx)
	if errors.Is(err, errNotFound) {
		if !cfg.Create {
			return nil, fmt.Errorf("%w: %s is missing: not a ledger (create one first)", ledger.ErrRootMismatch, l.s.key(rootName))
		}
		if err := l.requireVersioning(ctx); err != nil {
			return nil, err
		}
		if err := l.create(ctx); err != nil {
			return nil, err
		}
		root, _, err = l.readRoot(ctx)
	}
	if err != nil {
		return nil, err
	}
	if d := root.Limits.Diff(cfg.Limits); d != "" {
		return nil, fmt.Errorf("%w: %s: %s", ledger.ErrRootMismatch, l.s.key(rootName), d)
	}
	if root.Shards <= 0 || root.Shards > 256 {
		return nil, fmt.Errorf("%w: %s: %d capacity shards", ledger.ErrCorrupt, l.s.key(rootName), root.Shards)
	}
	l.shards = root.Shards
	l.hw.Store(root.HighWater)
	l.start = time.Now()
	return l, nil
}

// create writes the shards, then the root: a root object always has its shards.
func (l *Ledger) create(ctx context.Context) error {
	l.shards = l.cfg.Shards
	for i := range l.shards {
		body, token, err := l.encode(kindShard, shardData{Quota: l.quota(i)})
		if err != nil {
			return err
		}
		if _, err := l.s.put(ctx, shardName(i), body, token, "", true); err != nil && !errors.Is(err, errRaced) {
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
	since := time.Since(l.start)
	if since-time.Duration(l.hwRead.Load()) < hwRefresh {
		return nil
	}
	root, _, err := l.readRoot(ctx)
	if err != nil {
		return err
	}
	l.hwRead.Store(int64(since))
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

// requireVersioning checks, once per handle, that the bucket keeps versions.
func (l *Ledger) requireVersioning(ctx context.Context) error {
	if l.versioned.Load() {
		return nil
	}
	if err := l.s.requireVersioning(ctx); err != nil {
		return err
	}
	l.versioned.Store(true)
	return nil
}

// keyState is what the store holds at a row's key: nothing, a reservation, or a row.
type keyState struct {
	row      *rowData
	res      *reservationData
	etag     string
	version  string
	modified time.Time
}

func (k keyState) absent() bool { return k.row == nil && k.res == nil }

// readKey reads whatever the store holds at key, fresh. Only a row is remembered.
func (l *Ledger) readKey(ctx context.Context, key ledger.Key) (keyState, error) {
	o, err := l.s.get(ctx, rowName(key))
	if errors.Is(err, errNotFound) {
		l.forget(key)
		return keyState{}, nil
	}
	if err != nil {
		return keyState{}, err
	}
	ks := keyState{etag: o.etag, version: o.version, modified: o.modified}
	if kindOf(o.body) == kindReservation {
		l.forget(key)
		var res reservationData
		if err := decode(l.s.key(rowName(key)), kindReservation, o.body, &res); err != nil {
			return keyState{}, err
		}
		ks.res = &res
		return ks, nil
	}
	rd, err := l.decodeRow(key, o.body)
	if err != nil {
		return keyState{}, err
	}
	l.remember(key, o.etag, rd)
	ks.row = &rd
	return ks, nil
}

// getRow reads a row fresh from the store. A key that holds no row (nothing, or only the
// reservation of an admission) is ErrUnknownDelivery.
func (l *Ledger) getRow(ctx context.Context, key ledger.Key) (rowData, string, error) {
	ks, err := l.readKey(ctx, key)
	if err != nil {
		return rowData{}, "", err
	}
	if ks.row == nil {
		return rowData{}, "", fmt.Errorf("%w: %s", ledger.ErrUnknownDelivery, key)
	}
	return *ks.row, ks.etag, nil
}

func (l *Ledger) decodeRow(key ledger.Key, body []byte) (rowData, error) {
	name := l.s.key(rowName(key))
	var rd rowData
	if err := decode(name, kindRow, body, &rd); err != nil {
		return rowData{}, err
	}
	if err := rd.Row.Check(); err != nil {
		return rowData{}, fmt.Errorf("%s: %w", name, err)
	}
	if rd.Row.Key != key {
		return rowData{}, fmt.Errorf("%w: %s holds row %s", ledger.ErrCorrupt, name, rd.Row.Key)
	}
	if len(rd.Report) > l.cfg.Limits.MaxReportBytes || len(rd.Row.Subject) > l.cfg.Limits.MaxSubjectBytes {
		return rowData{}, fmt.Errorf("%w: %s holds data over its ceilings", ledger.ErrCorrupt, name)
	}
	kept := rd.Row.State == ledger.StateSaved || (rd.Row.State == ledger.StateAbandoned && len(rd.Report) > 0)
	if kept && ledger.SumBody(rd.Report) != rd.Row.Report.Digest {
		return rowData{}, fmt.Errorf("%w: %s: the saved report does not match its digest", ledger.ErrCorrupt, name)
	}
	return rd, nil
}

func (l *Ledger) remember(key ledger.Key, etag string, rd rowData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cache) >= maxCache {
		for k := range l.cache {
			delete(l.cache, k)
			break
		}
	}
	l.cache[key] = cachedRow{etag: etag, data: rd}
}

func (l *Ledger) forget(key ledger.Key) {
	l.mu.Lock()
	delete(l.cache, key)
	l.mu.Unlock()
}

func (l *Ledger) cached(key ledger.Key) (cachedRow, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.cache[key]
	return c, ok
}

// putRow writes a row over the version read (etag).
func (l *Ledger) putRow(ctx context.Context, rd rowData, etag string) error {
	body, token, err := l.encode(kindRow, rd)
	if err != nil {
		return err
	}
	newTag, err := l.s.put(ctx, rowName(rd.Row.Key), body, token, etag, false)
	if err != nil {
		l.forget(rd.Row.Key)
		return err
	}
	l.remember(rd.Row.Key, newTag, rd)
	return nil
}

// step is one decision on a row: it changes rd in place and says whether to write it; err is
// the answer when the decision refuses.
type step func(rd *rowData, now time.Time) (write bool, err error)

// update runs a decision as an optimistic transaction: read (from this handle's cache when it
// has the row), decide, write with If-Match. A write that loses, or any answer decided on
// cached data that is not a successful write, is decided again on a fresh read, so no answer
// ever rests on a stale copy.
//
// Every decision that depends on time (all but complete and release) is made on a fresh read,
// at the store's time of its answer: on a cached copy it would be made at the store time
// estimated from the last answer plus the host's elapsed time, and a host that was suspended
// (whose monotonic clock stopped) would find an ended lease live, or grant a lease that ends
// sooner than it says.
func (l *Ledger) update(ctx context.Context, op string, key ledger.Key, fn step) error {
	fresh := op != "complete" && op != "release"
	for attempt := 0; attempt < maxRetries; attempt++ {
		var rd rowData
		var etag string
		if c, ok := l.cached(key); ok && !fresh {
			rd, etag = cloneRow(c.data), c.etag
		} else {
			var err error
			if rd, etag, err = l.getRow(ctx, key); err != nil {
				return fmt.Errorf("%s %s: %w", op, key.Short(), err)
			}
			fresh = true
		}
		now := l.nowFor(&rd.Row)
		write, ferr := fn(&rd, now)
		if !write {
			if !fresh {
				fresh = true
				continue
			}
			if ferr != nil {
				return fmt.Errorf("%s %s: %w", op, key.Short(), ferr)
			}
			return nil
		}
		if err := l.putRow(ctx, rd, etag); err != nil {
			if errors.Is(err, errRaced) {
				fresh = true
				continue
			}
			return fmt.Errorf("%s %s: %w", op, key.Short(), err)
		}
		// The write's If-Match proves the data decided on was current, cached or not.
		if ferr != nil {
			return fmt.Errorf("%s %s: %w", op, key.Short(), ferr)
		}
		return nil
	}
	return fmt.Errorf("%s %s: %w: %d conflicting writers in a row", op, key.Short(), ledger.ErrBusy, maxRetries)
}

func cloneRow(rd rowData) rowData {
	out := rd
	out.Row.Subject = append([]byte(nil), rd.Row.Subject...)
	out.Report = append([]byte(nil), rd.Report...)
	return out
}
