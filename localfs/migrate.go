package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/amiss-ci/amiss/ledger"
)

// migrate turns a root of an older format into one of this format, in place: a format 2 root
// by writing its root state as this format; a format 1 root as follows. Format 1 kept one capacity
// record (.amiss-capacity.state) for the whole root, taken under the admission lock; format 2
// keeps one per row folder. The migration holds the maintenance lock and the admission lock,
// so no format 1 admission or cleanup is in flight, and no format 2 process admits anything
// before the root state says format 2. Under them it:
//
//  1. reads the format 1 capacity record (missing or damaged: fail closed, as format 1 did);
//  2. counts the row files of each row folder: every format 1 row holds a slot of its home
//     shard, and with no admission or removal in flight the count is exact (an interrupted
//     format 1 admission or cleanup batch is thereby settled: its row exists or it does not);
//  3. writes every folder's capacity shard (quotas shared out so that no shard starts over
//     its quota and they add up to the cap), removes the format 1 batch, writes the root
//     state as format 2 (carrying the last batch id), then removes the format 1 record.
//
// A crash before step 3's root state leaves a format 1 root (a format 1 process may go on
// admitting: the next migration counts again). Once the root state says format 2, a format 1
// process fails closed on its next operation (every file it reads is of a newer format, and
// the record it admits with is gone). This lists every row folder once: on a large root,
// migrate ahead of traffic (any `amiss ledger` command opens, and so migrates, the root).
func (r *root) migrate(ctx context.Context) error {
	unlockM, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	defer unlockM()
	unlockA, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	defer unlockA()
	st, version, err := r.readRootVersion()
	if err != nil {
		return err
	}
	if version >= FormatVersion {
		return nil // migrated by another process meanwhile
	}
	if version >= shardedFormat {
		// Format 2: its files are read as they are; the root state says the format now.
		out, err := encodeJSON(kindRoot, st)
		if err != nil {
			return err
		}
		return r.replace(r.path(RootFile), out, durableFull)
	}
	c, err := r.readCapacityV1()
	if err != nil {
		return err
	}
	counts := make([]int64, shardCount)
	for s := range shardCount {
		dir := r.shardDirOf(s)
		if err := r.mkdir(dir); err != nil {
			return err
		}
		names, err := r.fs.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, dir, err)
		}
		for _, e := range names {
			if k, ok := strings.CutSuffix(e.Name(), ".state"); ok {
				if _, err := ledger.ParseKey(k); err == nil {
					counts[s]++
				}
			}
		}
	}
	quotas, err := shareQuotas(r.cfg.Limits.RecordCap, counts)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	if err := r.writeShards(false, func(s int) shardState {
		return shardState{Seq: 1, Shard: s, Quota: quotas[s], Used: counts[s]}
	}); err != nil {
		return err
	}
	if b, err := r.readBatchV1(); err != nil {
		return err
	} else {
		st.LastBatch = max(st.LastBatch, b)
	}
	// The format 1 batch goes before the root state says format 2: its rows were counted as
	// they stand, and format 2 must never apply it (it names no shards). A crash before this
	// removal leaves a format 1 root that the next open migrates again.
	if err := r.remove(r.path(BatchFile)); err != nil {
		return err
	}
	if err := r.sync.syncDirs(r.dir); err != nil {
		return err
	}
	st.LastBatch = max(st.LastBatch, c.AppliedBatch)
	out, err := encodeJSON(kindRoot, st)
	if err != nil {
		return err
	}
	if err := r.replace(r.path(RootFile), out, durableFull); err != nil {
		return err
	}
	if err := r.remove(r.path(CapacityFile)); err != nil {
		return err
	}
	return r.sync.syncDirs(r.dir)
}

// shareQuotas shares the record cap out among the shards of a migrated root: each shard gets
// at least the rows it holds, the rest of the cap goes to the shards below their usual share,
// so the quotas add up to the cap and no shard starts over its quota.
func shareQuotas(recordCap int64, counts []int64) ([]int64, error) {
	quotas := make([]int64, len(counts))
	total := int64(0)
	for s, n := range counts {
		quotas[s] = max(n, quota(recordCap, s))
		total += quotas[s]
	}
	// Take the excess back from shards holding more quota than rows, largest spare first.
	for excess := total - recordCap; excess > 0; {
		best := -1
		for s := range quotas {
			if quotas[s] > counts[s] && (best < 0 || quotas[s]-counts[s] > quotas[best]-counts[best]) {
				best = s
			}
		}
		if best < 0 {
			rows := int64(0)
			for _, n := range counts {
				rows += n
			}
			return nil, fmt.Errorf("%w: the root holds %d rows, over its record cap of %d", ledger.ErrCorrupt, rows, recordCap)
		}
		take := min(excess, quotas[best]-counts[best])
		quotas[best] -= take
		excess -= take
	}
	return quotas, nil
}

// readCapacityV1 reads the format 1 capacity record.
func (r *root) readCapacityV1() (capacityState, error) {
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

// readBatchV1 returns the id of a format 1 cleanup batch left behind (0 when there is none).
// Its rows are counted as they stand; the index entries of those it removed are dropped by a
// later pass when it finds the rows gone.
func (r *root) readBatchV1() (uint64, error) {
	data, err := r.fs.ReadFile(r.path(BatchFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, r.path(BatchFile), err)
	}
	b, _, err := decodeBatch(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r.path(BatchFile), err)
	}
	return b.ID, nil
}
