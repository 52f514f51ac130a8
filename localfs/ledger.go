package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

var _ ledger.Ledger = (*Ledger)(nil)

// Open opens the root in dir: it reads the root state (one file, no listing: cheap enough for
// every Lambda cold start) and checks the limits, migrating a format 2 root first (migrate.go).
// A missing or damaged root state, or limits that differ from cfg.Limits, fail closed with an
// error naming the file; a missing or damaged capacity shard fails closed when an admission or
// Prepare reads it. With cfg.Create, a folder that holds no root yet gets a new one.
func Open(ctx context.Context, dir string, cfg Config) (*Ledger, error) {
	cfg.defaults()
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: root %s: %w", dir, err)
	}
	r := &root{dir: abs, cfg: cfg, fs: cfg.FS, durableDirs: map[string]bool{}}
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
	return &Ledger{Records: ledger.NewRecords(r, r, r.cfg.Limits), r: r}, nil
}

// Prepare opens the root, checks every capacity shard, finishes an interrupted cleanup batch and
// collects debris: leftover temporary files, each removed only under the lock its writer holds,
// so another process's write in progress is never taken for debris. Its work is bounded: it
// lists the root folder and at most Config.DebrisBudget entries of row folders, going on where
// the previous Prepare stopped (the cleanup sweep collects debris in the folders it lists). A
// long-running process prepares once and then hands out sessions.
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

// Session returns a handle sharing this one's root, locks and settings, with no I/O. Closing a
// session leaves the root open; closing the handle that opened the root ends every session.
func (l *Ledger) Session() *Ledger { return &Ledger{Records: l.Records, r: l.r, session: true} }

// Dir returns the root folder.
func (l *Ledger) Dir() string { return l.r.dir }

// Close releases the handle's locks and descriptors; it writes nothing. Closing the handle that
// opened the root waits for every operation on it or its sessions, and none starts afterwards
// (ErrUnavailable): a lock is never released under an operation that holds it.
func (l *Ledger) Close() error {
	if !l.session {
		l.r.close()
	}
	return nil
}

// load reads the root state, creating the root or migrating it from format 2 when needed.
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
	// Limits that differ fail closed before anything is written; a body-age ceiling to adopt is
	// recorded after a migration, in a root state of this format.
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
	// The handle decides with the limits the root records (body times' adoption included).
	st, err = r.readRoot()
	if err != nil {
		return err
	}
	r.cfg.Limits = st.Limits
	return nil
}

// adoptBodyTimes records a configured body-age ceiling, adopted at the root's effective now, in
// a root created without one (ledger.Limits.Reconcile), durably, before the root is used. It
// holds the clock lock, as every writer of the root state does, so nothing written is lost.
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
	if err := r.writeRoot(st); err != nil {
		return fmt.Errorf("record body times in %s: %w", r.path(RootFile), err)
	}
	return nil
}

// create writes a new root under the admission lock: the 256 row folders with their capacity
// shards, durable first, then the root state, which thus always has every shard beside it.
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
	if err := r.writeShards(func(s int) shardState {
		return shardState{Seq: 1, Shard: s, Quota: r.cfg.Limits.ShardQuota(shardCount, s)}
	}); err != nil {
		return err
	}
	now := r.cfg.Clock.Now().UnixNano()
	return r.writeRoot(rootState{Limits: r.cfg.Limits, CreatedAt: now, HighWater: now})
}

// checkEmptyForCreate refuses to create a root over ledger data: the folder may hold lock files,
// temporary files and what an interrupted creation left (capacity shards), nothing else.
func (r *root) checkEmptyForCreate() error {
	entries, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return unavailable(err, "list", r.dir)
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
				return unavailable(err, "list", r.path(RowsDir))
			}
			for _, s := range shards {
				names, err := r.fs.ReadDir(filepath.Join(r.path(RowsDir), s.Name()))
				if err != nil {
					return unavailable(err, "list", filepath.Join(r.path(RowsDir), s.Name()))
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

// prepare does Prepare's work under the maintenance lock (see Prepare).
func (r *root) prepare(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := r.recoverBatch(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if _, err := r.readAllShards(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := r.collectRootDebris(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	st, err := r.readSweep()
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		return fmt.Errorf("prepare: %w", err)
	}
	listed := 0
	s := st.DebrisShard
	for i := 0; i < shardCount && listed < r.cfg.DebrisBudget; i++ {
		dir := r.shardDirOf(s)
		names, err := r.fs.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("prepare: %w", unavailable(err, "list", dir))
		}
		listed += len(names)
		var debris []string
		for _, n := range names {
			if strings.Contains(n.Name(), tmpMarker) {
				debris = append(debris, n.Name())
			}
		}
		if err := r.collectDebris(ctx, s, dir, debris); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		s = (s + 1) % shardCount
	}
	st.DebrisShard = s
	if err := r.writeSweep(st); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}
