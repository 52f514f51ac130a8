package localfs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cleanup implements ledger.Ledger.
//
// One pass, under the maintenance lock:
//  1. finish a batch a crashed pass left behind;
//  2. list the end-time index up to now, the sweep's next slice of rows and the subject
//     records of the folders it lists (a listing that fails ends the pass, nothing removed);
//  3. persist the effective now as the high-water (and reserve the batch's id);
//  4. pick the removable rows from the index (finished rows with a retention end only), write
//     them as one batch record, remove them, make the removals durable with one syncfs, and
//     release their slots in the shards that held them, each shard once per batch (its record
//     notes the batch applied), with one sync for the records' data and one for the renames;
//  5. read the sweep's rows and report the damaged and the stranded ones; a row met past its
//     retention gets its index entry again (Complete does not sync it); collect the debris
//     found in the folders listed;
//  6. forget the subject records of those folders that no verdict can land on any more
//     (ledger.SubjectRecord.Removable; subjects.go).
//
// The sweep goes round the 256 row folders in laps. An empty cursor starts a lap where the last
// pass stopped (.amiss-maintenance.state), so a cleanup cut short by its time limit every time
// still reaches every row; a lap ends back where it started (Done), every row covered once.
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
	sweepState, sweepErr := r.readSweep()
	if sweepErr != nil && !errors.Is(sweepErr, ledger.ErrCorrupt) {
		return rep, fmt.Errorf("cleanup: %w", sweepErr)
	}
	lap := position{shard: sweepState.LapShard, name: sweepState.LapRow}
	sweep, err := r.listRows(lap, cursor, r.cfg.SweepBatch)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	subjectsListed, err := r.listSubjectShards(sweep.shards)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	batchID, err := r.persistRoot(ctx, now, len(entries) > 0)
	if err != nil {
		return rep, fmt.Errorf("cleanup: persist high-water: %w", err)
	}
	rep.HighWater = now
	tally := &ledger.Tally{Now: now, StrandedAfter: r.cfg.StrandedAfter}
	if sweepErr != nil {
		tally.Damage(r.path(SweepFile), sweepErr) // reported; the lap started at the first folder
	}
	removed, err := r.removeEnded(ctx, entries, now, batchID, tally)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	rep.Removed = removed
	gone := map[ledger.Key]bool{}
	for _, x := range removed {
		gone[x.Key] = true
	}
	for _, key := range sweep.keys {
		if gone[key] {
			continue
		}
		row, err := r.readRow(key)
		if err := tally.Add(r.statePath(key), &row.Row, err); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
		if err == nil && row.Removable(row.Now(now, time.Time{})) {
			// Past its retention and still here: its index entry may have been lost with a
			// crash (Complete does not sync it). Creating it again is harmless if it exists.
			if err := r.addIndex(&row.Row); err != nil {
				return rep, fmt.Errorf("cleanup: %w", err)
			}
		}
	}
	for s, names := range sweep.debris {
		if err := r.collectDebris(ctx, s, r.shardDirOf(s), names); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	subjects, err := r.cleanSubjects(ctx, subjectsListed, now, tally)
	if err != nil {
		return rep, fmt.Errorf("cleanup: subjects: %w", err)
	}
	rep.Subjects, rep.RemovedSubjects = subjects.kept, subjects.removed
	if err := r.recountShards(ctx, sweep.shards); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	// Capacity after the pass, for the operator's metrics (256 small reads, no lock).
	if rep.CapacityUsed, _, err = r.capacityUsed(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	rep.RecordCap = r.cfg.Limits.RecordCap
	// The next lap starts where this pass stopped (a finished lap: where it started).
	next := sweepState
	if sweep.next != "" {
		_, at, _ := parseCursor(sweep.next)
		next.LapShard, next.LapRow = at.shard, at.name
	} else if cursor != "" {
		l, _, _ := parseCursor(cursor)
		next.LapShard, next.LapRow = l.shard, l.name
	}
	if err := r.writeSweep(next); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	tally.Fill(&rep)
	rep.Next = sweep.next
	rep.Done = sweep.next == ""
	return rep, nil
}

// removeEnded removes the removable rows among entries as one batch with the given id.
func (r *root) removeEnded(ctx context.Context, entries []indexEntry, now time.Time, id uint64, tally *ledger.Tally) ([]ledger.RemovedRow, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	batch := batchState{ID: id}
	// A row can be indexed under two ends (a Complete interrupted after its index entry, then
	// repeated after a re-admission lengthened the retention). It enters the batch once, so its
	// slot is released once; a later pass drops its other entry, the row gone.
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
	// Synced before the first removal: after a crash it says what to finish.
	if err := r.replace(r.path(BatchFile), data, durableFull); err != nil {
		return nil, err
	}
	return r.applyBatch(ctx, batch, now)
}

// classify looks at one index entry under its row lock: it returns the batch entry of a
// removable row, and otherwise tidies the index (a stale entry is removed, a lengthened
// retention is re-indexed).
func (r *root) classify(ctx context.Context, e indexEntry, now time.Time, tally *ledger.Tally) (*batchEntry, error) {
	unlock, err := r.lockShard(ctx, e.key[0])
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
	case !row.State.Terminal():
		// An entry written by a Complete that crashed before its done state: that Complete
		// writes it again when it is repeated.
		return nil, r.removeIndex(e)
	case row.Removable(now):
		return &batchEntry{Key: e.key, EvaluationID: row.EvaluationID, Index: e.bucket + "/" + e.name, Shard: row.Shard}, nil
	case !row.Permanent && row.RetainUntil.After(e.end):
		if err := r.addIndex(&row.Row); err != nil {
			return nil, err
		}
		return nil, r.removeIndex(e)
	}
	return nil, nil
}

// applyBatch removes the batch's rows, makes the removals durable, and releases their slots in
// the shards that held them, each once; the caller holds the maintenance lock. It also finishes
// a crashed pass: every step is repeatable, the slots released are counted from what the store
// holds, not from what this run removed, and a shard whose record notes the batch is left alone.
func (r *root) applyBatch(ctx context.Context, b batchState, now time.Time) ([]ledger.RemovedRow, error) {
	var removed []ledger.RemovedRow
	released := map[int][]batchEntry{}
	for _, e := range b.Entries {
		gone, err := r.removeRow(ctx, e, now)
		if err != nil {
			return nil, err
		}
		if gone {
			released[e.Shard] = append(released[e.Shard], e)
			removed = append(removed, ledger.RemovedRow{Key: e.Key, EvaluationID: e.EvaluationID})
		}
	}
	// One syncfs makes every removal of the batch durable before any count goes down: a lost
	// removal must never bring back a row whose slot was released.
	if err := r.sync.syncEverything(); err != nil {
		return nil, err
	}
	if err := r.release(ctx, b.ID, released); err != nil {
		return nil, err
	}
	return removed, r.remove(r.path(BatchFile))
}

// release gives back the slots of the rows batch id removed. It holds the locks of every shard
// concerned (in ascending order) while it reads and writes their records, with one sync.
func (r *root) release(ctx context.Context, id uint64, released map[int][]batchEntry) error {
	if len(released) == 0 {
		return nil
	}
	shards := slices.Sorted(maps.Keys(released))
	unlock, err := r.lockShards(ctx, shards)
	if err != nil {
		return err
	}
	defer unlock()
	// Before any shard shows the room: a proof of Full is void from now on.
	if err := r.bumpRoom(); err != nil {
		return err
	}
	var sts []*staged
	defer func() { abortAll(sts) }() // what was staged and not committed
	for _, s := range shards {
		sh, err := r.readShard(s)
		if err != nil {
			return err
		}
		if sh.AppliedBatch >= id {
			continue
		}
		rows := released[s]
		// A removed row still pending (no admission in the shard recounted it) is released here,
		// once, not again by recounting. Only its entry goes: a later admission of the same key
		// keeps its own (another evaluation id) until recounted.
		sh.Pending = deletePending(sh.Pending, rows)
		n := int64(len(rows))
		if n > sh.Used {
			// The count may overstate use, never understate it: below zero, the record is wrong,
			// and guessing would overfill the root.
			return fmt.Errorf("%w: %s counts %d slots, batch %d removed %d rows", ledger.ErrCorrupt,
				r.shardCapPath(s), sh.Used, id, n)
		}
		sh.Used -= n
		sh.AppliedBatch = id
		st, err := r.stageShard(&sh)
		if err != nil {
			return err
		}
		sts = append(sts, st)
	}
	if err := r.commitAll(sts); err != nil {
		return err
	}
	if len(sts) == 0 {
		return nil
	}
	// And again once the room shows (roomShown).
	return r.bumpRoom()
}

// deletePending removes, for each removed row, one pending entry that stands for it (an entry
// of a later admission of the same key names another evaluation id and stays).
func deletePending(ps []pendingSlot, rows []batchEntry) []pendingSlot {
	out := slices.Clone(ps)
	for _, e := range rows {
		if i := slices.IndexFunc(out, func(p pendingSlot) bool { return p.is(e.Key, e.EvaluationID) }); i >= 0 {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}

// removeRow removes one batch row if it is still the row the batch named and still
// removable. It reports whether the batch's row is gone (removed now or before).
func (r *root) removeRow(ctx context.Context, e batchEntry, now time.Time) (bool, error) {
	unlock, err := r.lockShard(ctx, e.Key[0])
	if err != nil {
		return false, err
	}
	defer unlock()
	switch row, err := r.readRow(e.Key); {
	case errors.Is(err, ledger.ErrUnknownDelivery): // removed before
	case err != nil:
		return false, err
	case row.EvaluationID != e.EvaluationID: // removed before, and the key was admitted again
	case !row.Removable(now):
		return false, nil // re-admitted with a later signed time since the batch was chosen
	default:
		if err := r.remove(r.statePath(e.Key)); err != nil {
			return false, err
		}
	}
	return true, r.removeIndexNamed(e)
}

// removeIndexNamed removes the index entry a batch entry names ("<bucket>/<name>"), if any.
func (r *root) removeIndexNamed(e batchEntry) error {
	if e.Index == "" {
		return nil
	}
	return r.remove(filepath.Join(r.dir, EndedDir, e.Index))
}

// recoverBatch finishes a batch a crashed cleanup left behind. The caller holds the
// maintenance lock.
func (r *root) recoverBatch(ctx context.Context) (bool, error) {
	b, err := r.readBatch()
	if err != nil || b == nil {
		return false, err
	}
	// The batch's rows are judged at the persisted high-water, never this process's clock: the
	// pass that chose them persisted its now first, and a row re-admitted since with a later
	// signed time must not be removed at a now nobody persisted (a replay of its signature
	// would then be fresh, and admitted again).
	now, err := r.highWater()
	if err == nil {
		_, err = r.applyBatch(ctx, *b, now)
	}
	return err == nil, err
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
