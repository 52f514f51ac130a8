package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/amiss-ci/amiss/ledger"
)

// The root's locks, all fileLocks (filelock.go): maintenance, admission and clock, and the
// row-shard locks, opened on first use. The lock order is maintenance, admission, row shards
// ascending, clock.

func (r *root) openLocks() error {
	if r.cfg.Create {
		if err := r.fs.Mkdir(r.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return unavailable(err, "create root folder", r.dir)
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

// lockShard takes the lock of row shard s, which guards its rows and its capacity shard.
func (r *root) lockShard(ctx context.Context, s byte) (func(), error) {
	l, err := r.rowLock(s)
	if err != nil {
		return nil, err
	}
	return lockFile(ctx, l, r.cfg.LockWait)
}

// lockShards takes the locks of the given shards in ascending order (the lock order); the
// function it returns releases them all.
func (r *root) lockShards(ctx context.Context, shards []int) (func(), error) {
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, s := range slices.Compact(slices.Sorted(slices.Values(shards))) {
		u, err := r.lockShard(ctx, byte(s))
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}
