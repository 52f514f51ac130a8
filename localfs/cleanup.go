package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cleanup implements ledger.Ledger.
//
// One pass, under the maintenance lock:
//  1. finish a batch a crashed pass left behind;
//  2. list what the pass will look at: the end-time index up to now, and the next slice of
//     rows for the sweep. A listing that fails ends the pass with nothing removed;
//  3. persist the effective now as the high-water;
//  4. pick the removable rows from the index (reading only finished rows with a retention
//     end, never the permanent ones), write them as one batch record, remove them, make the
//     removals durable with one syncfs, and release their capacity in one write that also
//     records the batch as applied. A repeated or resumed pass releases capacity once;
//  5. read the sweep's rows and report the damaged and the stranded ones.
func (l *Ledger) Cleanup(ctx context.Context, cursor ledger.Cursor) (ledger.CleanupReport, error) {
	if err := l.r.begin(); err != nil {
		return ledger.CleanupReport{}, err
	}
	defer l.r.end()
	r := l.r
	var rep ledger.CleanupReport
	unlock, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	defer unlock()
	if _, err := r.recoverBatch(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: finish previous batch: %w", err)
	}
	now, err := r.now(nil)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	entries, err := r.listEnded(now, r.cfg.CleanupBatch)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	sweep, next, err := r.listSweep(cursor, r.cfg.SweepBatch)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	if err := r.persistHighWater(ctx, now); err != nil {
		return rep, fmt.Errorf("cleanup: persist high-water: %w", err)
	}
	rep.HighWater = now
	tally := &ledger.Tally{Now: now, StrandedAfter: r.cfg.StrandedAfter}
	removed, err := r.removeEnded(ctx, entries, now, tally)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	rep.Removed = removed
	gone := map[ledger.Key]bool{}
	for _, x := range removed {
		gone[x.Key] = true
	}
	for _, key := range sweep {
		if gone[key] {
			continue
		}
		row, err := r.readRow(key)
		if err := tally.Add(r.statePath(key), &row, err); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	tally.Fill(&rep)
	rep.Next = next
	rep.Done = next == ""
	return rep, nil
}

// indexEntry is one name in the end-time index.
type indexEntry struct {
	bucket, name string
	end          time.Time
	key          ledger.Key
}

func (e indexEntry) path(r *root) string { return filepath.Join(r.dir, EndedDir, e.bucket, e.name) }

func parseIndexName(bucket, name string) (indexEntry, bool) {
	endS, keyS, ok := strings.Cut(name, "-")
	if !ok {
		return indexEntry{}, false
	}
	end, err := strconv.ParseInt(endS, 10, 64)
	if err != nil {
		return indexEntry{}, false
	}
	key, err := ledger.ParseKey(keyS)
	if err != nil {
		return indexEntry{}, false
	}
	return indexEntry{bucket: bucket, name: name, end: time.Unix(0, end).UTC(), key: key}, true
}

// listEnded lists up to limit index entries whose end is before now, oldest first.
func (r *root) listEnded(now time.Time, limit int) ([]indexEntry, error) {
	dir := filepath.Join(r.dir, EndedDir)
	buckets, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, dir, err)
	}
	nowBucket := fmt.Sprintf("%012d", now.UnixNano()/int64(time.Hour))
	var out []indexEntry
	for _, b := range buckets {
		if !b.IsDir() || b.Name() > nowBucket {
			continue
		}
		names, err := r.fs.ReadDir(filepath.Join(dir, b.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, filepath.Join(dir, b.Name()), err)
		}
		for _, n := range names {
			e, ok := parseIndexName(b.Name(), n.Name())
			if !ok || !now.After(e.end) {
				continue
			}
			out = append(out, e)
			if len(out) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// listSweep lists up to limit row keys after cursor, in shard and name order. The cursor is
// "XX/<key>" (the last key read); the next cursor is empty when the lap is finished.
func (r *root) listSweep(cursor ledger.Cursor, limit int) ([]ledger.Key, ledger.Cursor, error) {
	afterShard, afterName := "", ""
	if cursor != "" {
		var ok bool
		afterShard, afterName, ok = strings.Cut(string(cursor), "/")
		if !ok || len(afterShard) != 2 {
			return nil, "", fmt.Errorf("%w: cleanup cursor %q", ledger.ErrInvalid, cursor)
		}
	}
	dir := filepath.Join(r.dir, RowsDir)
	shards, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, dir, err)
	}
	var out []ledger.Key
	for _, s := range shards {
		if !s.IsDir() || s.Name() < afterShard {
			continue
		}
		names, err := r.fs.ReadDir(filepath.Join(dir, s.Name()))
		if err != nil {
			return nil, "", fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, filepath.Join(dir, s.Name()), err)
		}
		for _, n := range names {
			name, ok := strings.CutSuffix(n.Name(), ".state")
			if !ok || (s.Name() == afterShard && name <= afterName) {
				continue
			}
			key, err := ledger.ParseKey(name)
			if err != nil {
				continue
			}
			out = append(out, key)
			if len(out) >= limit {
				return out, ledger.Cursor(s.Name() + "/" + name), nil
			}
		}
	}
	return out, "", nil
}

// removeEnded removes the removable rows among entries as one batch.
func (r *root) removeEnded(ctx context.Context, entries []indexEntry, now time.Time, tally *ledger.Tally) ([]ledger.RemovedRow, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	unlockAdm, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return nil, err
	}
	defer unlockAdm()
	c, err := r.readCapacity()
	if err != nil {
		return nil, err
	}
	var batch batchState
	batch.ID = c.AppliedBatch + 1
	// The pending key is settled in the capacity write that ends the batch. If its row exists
	// now, the batch records it, so that nobody gives its slot back when the row is gone
	// before that write lands (this batch may remove it).
	if c.Pending != nil {
		exists, err := r.rowExists(*c.Pending)
		if err != nil {
			return nil, err
		}
		if exists {
			k := *c.Pending
			batch.Pending = &k
		}
	}
	// A row can be indexed under two ends (a Complete interrupted after its index entry, then
	// repeated after a re-admission lengthened the retention). It enters the batch once, so
	// its slot is released once; its other entry is dropped by a later pass, when the row is
	// gone.
	chosen := map[ledger.Key]bool{}
	for _, e := range entries {
		if chosen[e.key] {
			continue
		}
		keep, err := r.classify(ctx, e, now, tally)
		if err != nil {
			return nil, err
		}
		if keep != nil {
			chosen[e.key] = true
			batch.Entries = append(batch.Entries, *keep)
		}
	}
	if len(batch.Entries) == 0 {
		return nil, nil
	}
	data, err := encodeJSON(kindBatch, batch)
	if err != nil {
		return nil, err
	}
	if err := r.writeAtomic(r.path(BatchFile), data); err != nil {
		return nil, err
	}
	return r.applyBatch(ctx, batch, &c, now)
}

// classify looks at one index entry under its row lock: it returns the batch entry of a
// removable row, and otherwise tidies the index (a stale entry is removed, a lengthened
// retention is re-indexed).
func (r *root) classify(ctx context.Context, e indexEntry, now time.Time, tally *ledger.Tally) (*batchEntry, error) {
	unlock, err := r.lockRow(ctx, e.key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	row, err := r.readRow(e.key)
	switch {
	case errors.Is(err, ledger.ErrUnknownDelivery):
		return nil, r.removeIndex(e)
	case errors.Is(err, ledger.ErrCorrupt):
		tally.Damage(r.statePath(e.key), err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	if !row.State.Terminal() {
		// An entry written by a Complete that crashed before its done state: that Complete
		// writes it again when it is repeated.
		return nil, r.removeIndex(e)
	}
	if row.Removable(now) {
		return &batchEntry{Key: e.key, EvaluationID: row.EvaluationID, Index: e.bucket + "/" + e.name}, nil
	}
	if !row.Permanent && row.RetainUntil.After(e.end) {
		if err := r.addIndex(&row); err != nil {
			return nil, err
		}
		return nil, r.removeIndex(e)
	}
	return nil, nil
}

func (r *root) removeIndex(e indexEntry) error {
	if err := r.fs.Remove(e.path(r)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, e.path(r), err)
	}
	return nil
}

// applyBatch removes the batch's rows, makes the removals durable, and releases their
// capacity once. The caller holds the maintenance and admission locks and has read c. It is
// also how a crashed pass is finished: every step is repeatable, and the slots released are
// counted from what the store holds, not from what this run removed.
func (r *root) applyBatch(ctx context.Context, b batchState, c *capacityState, now time.Time) ([]ledger.RemovedRow, error) {
	if c.AppliedBatch >= b.ID {
		return nil, r.dropBatchFile()
	}
	var removed []ledger.RemovedRow
	released := int64(0)
	for _, e := range b.Entries {
		gone, err := r.removeRow(ctx, e, now)
		if err != nil {
			return nil, err
		}
		if gone {
			released++
			removed = append(removed, ledger.RemovedRow{Key: e.Key, EvaluationID: e.EvaluationID})
		}
	}
	// One syncfs makes every removal of the batch durable before the count goes down: a lost
	// removal must never bring back a row whose slot was released.
	if err := r.fs.SyncFS(r.dir); err != nil {
		return nil, fmt.Errorf("%w: syncfs %s: %v", ledger.ErrUnavailable, r.dir, err)
	}
	if err := r.settleLocked(c); err != nil {
		return nil, err
	}
	if released > c.Used {
		// The count may overstate use, never understate it: a batch that would take it
		// below zero means the record is wrong, and guessing would overfill the root.
		return nil, fmt.Errorf("%w: %s counts %d slots, batch %d removed %d rows", ledger.ErrCorrupt,
			r.path(CapacityFile), c.Used, b.ID, released)
	}
	c.Used -= released
	c.AppliedBatch = b.ID
	if err := r.writeCapacity(*c); err != nil {
		return nil, err
	}
	return removed, r.dropBatchFile()
}

// removeRow removes one batch row if it is still the row the batch named and still
// removable. It reports whether the batch's row is gone (removed now or before).
func (r *root) removeRow(ctx context.Context, e batchEntry, now time.Time) (bool, error) {
	unlock, err := r.lockRow(ctx, e.Key)
	if err != nil {
		return false, err
	}
	defer unlock()
	row, err := r.readRow(e.Key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true, r.removeIndexNamed(e)
	}
	if err != nil {
		return false, err
	}
	if row.EvaluationID != e.EvaluationID {
		return true, r.removeIndexNamed(e) // removed before, and the key was admitted again
	}
	if !row.Removable(now) {
		return false, nil // re-admitted with a later signed time since the batch was chosen
	}
	if err := r.fs.Remove(r.statePath(e.Key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, r.statePath(e.Key), err)
	}
	if err := r.fs.Remove(r.reportPath(e.Key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, r.reportPath(e.Key), err)
	}
	return true, r.removeIndexNamed(e)
}

func (r *root) removeIndexNamed(e batchEntry) error {
	if e.Index == "" {
		return nil
	}
	bucket, name, _ := strings.Cut(e.Index, "/")
	return r.removeIndex(indexEntry{bucket: bucket, name: name})
}

func (r *root) dropBatchFile() error {
	if err := r.fs.Remove(r.path(BatchFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, r.path(BatchFile), err)
	}
	return nil
}

// recoverBatch finishes a batch a crashed cleanup left behind. The caller holds the
// maintenance lock.
func (r *root) recoverBatch(ctx context.Context) (bool, error) {
	b, err := r.readBatch()
	if err != nil || b == nil {
		return false, err
	}
	unlockAdm, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return false, err
	}
	defer unlockAdm()
	c, err := r.readCapacity()
	if err != nil {
		return false, err
	}
	now, err := r.now(nil)
	if err != nil {
		return false, err
	}
	if _, err := r.applyBatch(ctx, *b, &c, now); err != nil {
		return false, err
	}
	return true, nil
}

// recoverBatchIfAny finishes a leftover batch when one exists and maintenance is free.
func (r *root) recoverBatchIfAny(ctx context.Context) (bool, error) {
	if _, err := r.fs.Stat(r.path(BatchFile)); err != nil {
		return false, nil
	}
	unlock, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return false, err
	}
	defer unlock()
	return r.recoverBatch(ctx)
}

// prepare finishes a leftover batch and collects debris.
func (r *root) prepare(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := r.recoverBatch(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := r.collectRootDebris(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	dir := filepath.Join(r.dir, RowsDir)
	shards, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prepare: %w: list %s: %v", ledger.ErrUnavailable, dir, err)
	}
	for _, s := range shards {
		shard, err := strconv.ParseUint(s.Name(), 16, 8)
		if !s.IsDir() || err != nil || len(s.Name()) != 2 {
			continue
		}
		if err := r.collectShardDebris(ctx, byte(shard)); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	return nil
}

// collectRootDebris removes temporary files of the root-level records; it holds every lock
// whose holder writes them (maintenance: batch; admission: capacity; clock: root state).
func (r *root) collectRootDebris(ctx context.Context) error {
	unlockAdm, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlockAdm()
	unlockClock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlockClock()
	entries, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.dir, err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			if err := r.fs.Remove(r.path(e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, r.path(e.Name()), err)
			}
		}
	}
	return nil
}

// collectShardDebris removes, under the shard's row lock, temporary files and reports no
// saved row names.
func (r *root) collectShardDebris(ctx context.Context, shard byte) error {
	var key ledger.Key
	key[0] = shard
	unlock, err := r.lockRow(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	dir := r.shardDir(key)
	names, err := r.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, dir, err)
	}
	for _, n := range names {
		name := n.Name()
		dead := strings.Contains(name, tmpMarker)
		if k, ok := strings.CutSuffix(name, ".report"); ok {
			dead = r.deadReport(k)
		}
		if dead {
			p := filepath.Join(dir, name)
			if err := r.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, p, err)
			}
		}
	}
	return nil
}

// deadReport reports whether the report file of the named key is no saved or abandoned row's
// result: its row is gone, done or unfinished, or holds another report (a Save that crashed before its state
// was written and was then superseded). A report beside a damaged row, or one that does not
// decode beside a saved row, is kept: it may be the only copy of a verdict, and Claim reports
// it as corrupt.
func (r *root) deadReport(keyName string) bool {
	key, err := ledger.ParseKey(keyName)
	if err != nil {
		return false
	}
	row, err := r.readRow(key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true
	}
	if err != nil {
		return false
	}
	if row.State != ledger.StateSaved && row.State != ledger.StateAbandoned {
		return true
	}
	data, err := r.fs.ReadFile(r.reportPath(row.Key))
	if err != nil {
		return false
	}
	rep, err := decodeReport(data, r.cfg.Limits)
	return err == nil && ledger.SumBody(rep) != row.Report.Digest
}

// Stats implements ledger.Ledger. It reads every row.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Stats{}, err
	}
	defer l.r.end()
	r := l.r
	st := ledger.Stats{ByState: map[ledger.State]int64{}, Limits: r.cfg.Limits}
	rs, err := r.readRoot()
	if err != nil {
		return st, err
	}
	st.HighWater = time.Unix(0, rs.HighWater).UTC()
	c, err := r.readCapacity()
	if err != nil {
		return st, err
	}
	st.CapacityUsed = c.Used
	cursor := ledger.Cursor("")
	for {
		keys, next, err := r.listSweep(cursor, 4096)
		if err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
		for _, k := range keys {
			row, err := r.readRow(k)
			if err := st.Count(&row, err); err != nil {
				return st, fmt.Errorf("stats: %w", err)
			}
		}
		if next == "" {
			return st, nil
		}
		cursor = next
	}
}
