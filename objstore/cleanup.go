package objstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cleanup implements ledger.Ledger. One pass:
//  1. takes the maintenance lease (a fenced object written by compare-and-swap; a live lease
//     of another owner answers ErrBusy);
//  2. finishes the previous batch if it was left unfinished;
//  3. lists the end-time index and the next page of rows for the sweep, with pagination; if
//     any page fails, the pass removes nothing;
//  4. persists its now as the high-water in the root object;
//  5. writes the removable rows (keys and evaluation ids) as a new batch by compare-and-swap,
//     removes them, and releases their slots once per shard per batch;
//  6. reads the sweep's rows and reports the damaged and the stranded ones.
func (l *Ledger) Cleanup(ctx context.Context, cursor ledger.Cursor) (ledger.CleanupReport, error) {
	var rep ledger.CleanupReport
	if !l.cleaning.TryLock() {
		return rep, fmt.Errorf("cleanup: %w: another cleanup of this handle is running", ledger.ErrBusy)
	}
	defer l.cleaning.Unlock()
	lease, err := l.takeMaintenance(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	defer l.dropMaintenance(context.WithoutCancel(ctx), lease)
	prev, prevTag, err := l.readBatch(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	if prev != nil && !prev.Done {
		if prevTag, err = l.applyBatch(ctx, prev, prevTag, lease, nil); err != nil {
			return rep, fmt.Errorf("cleanup: finish batch %d: %w", prev.ID, err)
		}
	}
	root, rootTag, err := l.readRoot(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	now := ledger.MaxTime(l.cfg.Clock.Now(), time.Unix(0, root.HighWater).UTC(), l.highWater())
	ended, err := l.listEnded(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	after := ""
	if cursor != "" {
		after = rowsPrefix + string(cursor)
	}
	sweep, more, err := l.s.list(ctx, rowsPrefix, after, l.cfg.SweepBatch)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	if now.UnixNano() > root.HighWater {
		root.HighWater = now.UnixNano()
		body, token, err := l.encode(kindRoot, root)
		if err != nil {
			return rep, err
		}
		if _, err := l.s.put(ctx, rootName, body, token, rootTag, false); err != nil {
			return rep, fmt.Errorf("cleanup: persist high-water: %w", err)
		}
	}
	l.raiseHighWater(now)
	rep.HighWater = now
	tally := &ledger.Tally{Now: now, StrandedAfter: l.cfg.StrandedAfter}
	batch, err := l.chooseBatch(ctx, ended, now, tally)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	gone := map[ledger.Key]bool{}
	if len(batch.Entries) > 0 {
		batch.ID = 1
		if prev != nil {
			batch.ID = prev.ID + 1
		}
		batch.Fence = lease.Fence
		body, token, err := l.encode(kindBatch, batch)
		if err != nil {
			return rep, err
		}
		tag, err := l.s.put(ctx, batchName, body, token, prevTag, prev == nil)
		if err != nil {
			return rep, fmt.Errorf("cleanup: write batch: %w", err)
		}
		if _, err := l.applyBatch(ctx, &batch, tag, lease, gone); err != nil {
			return rep, fmt.Errorf("cleanup: batch %d: %w", batch.ID, err)
		}
		for _, e := range batch.Entries {
			if gone[e.Key] {
				rep.Removed = append(rep.Removed, ledger.RemovedRow{Key: e.Key, EvaluationID: e.EvaluationID})
			}
		}
	}
	for _, name := range sweep {
		key, ok := keyOf(name)
		if !ok || gone[key] {
			continue
		}
		rd, _, err := l.getRow(ctx, key)
		if err := tally.Add(l.s.key(name), &rd.Row, err); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	tally.Fill(&rep)
	if more && len(sweep) > 0 {
		rep.Next = ledger.Cursor(strings.TrimPrefix(sweep[len(sweep)-1], rowsPrefix))
	}
	rep.Done = rep.Next == ""
	return rep, nil
}

// keyOf parses the key out of a row object's name.
func keyOf(name string) (ledger.Key, bool) {
	key, err := ledger.ParseKey(strings.TrimSuffix(strings.TrimPrefix(name, rowsPrefix), ".json"))
	return key, err == nil
}

func (l *Ledger) raiseHighWater(t time.Time) {
	for {
		cur := l.hw.Load()
		if t.UnixNano() <= cur || l.hw.CompareAndSwap(cur, t.UnixNano()) {
			return
		}
	}
}

type endedEntry struct {
	name string
	end  time.Time
	key  ledger.Key
}

// listEnded lists index entries whose end is before now, oldest first, up to the batch size.
func (l *Ledger) listEnded(ctx context.Context, now time.Time) ([]endedEntry, error) {
	names, _, err := l.s.list(ctx, endedPrefix, "", l.cfg.CleanupBatch)
	if err != nil {
		return nil, err
	}
	var out []endedEntry
	for _, n := range names {
		endS, keyS, ok := strings.Cut(strings.TrimPrefix(n, endedPrefix), "-")
		end, err1 := strconv.ParseInt(endS, 10, 64)
		key, err2 := ledger.ParseKey(keyS)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		e := endedEntry{name: n, end: time.Unix(0, end).UTC(), key: key}
		if !now.After(e.end) {
			break // names sort by end time
		}
		out = append(out, e)
	}
	return out, nil
}

// chooseBatch reads the rows the index names and keeps the removable ones. Rows pending in a
// capacity shard are left for a later pass, so an absent pending row always means an admission
// that never finished.
func (l *Ledger) chooseBatch(ctx context.Context, ended []endedEntry, now time.Time, tally *ledger.Tally) (batchData, error) {
	var b batchData
	if len(ended) == 0 {
		return b, nil
	}
	pending, err := l.settleAll(ctx, now)
	if err != nil {
		return b, err
	}
	for _, e := range ended {
		rd, _, err := l.getRow(ctx, e.key)
		switch {
		case errors.Is(err, ledger.ErrUnknownDelivery):
			if err := l.s.deleteOnce(ctx, e.name, ""); err != nil && !errors.Is(err, errRaced) {
				return b, err
			}
			continue
		case errors.Is(err, ledger.ErrCorrupt):
			tally.Damage(l.s.key(rowName(e.key)), err)
			continue
		case err != nil:
			return b, err
		}
		row := &rd.Row
		switch {
		case !row.State.Terminal():
			// Written by a Complete whose row write did not land; it writes it again.
			if err := l.s.deleteOnce(ctx, e.name, ""); err != nil && !errors.Is(err, errRaced) {
				return b, err
			}
		case row.Removable(row.Now(now, time.Time{})):
			if !pending[e.key] {
				b.Entries = append(b.Entries, batchEntry{Key: e.key, EvaluationID: row.EvaluationID, Shard: rd.Shard, Index: e.name})
			}
		case !row.Permanent && row.RetainUntil.After(e.end):
			if err := l.s.putPlain(ctx, indexName(row), nil); err != nil {
				return b, err
			}
			if err := l.s.deleteOnce(ctx, e.name, ""); err != nil && !errors.Is(err, errRaced) {
				return b, err
			}
		}
	}
	return b, nil
}

// settleAll settles every shard's pending entries (reading each pending row) and returns the
// keys still pending: admissions whose row does not exist yet.
func (l *Ledger) settleAll(ctx context.Context, now time.Time) (map[ledger.Key]bool, error) {
	pending := map[ledger.Key]bool{}
	for i := range l.shards {
		for attempt := 0; ; attempt++ {
			if attempt == maxRetries {
				return nil, fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
			}
			st, err := l.readShard(ctx, i)
			if err != nil {
				return nil, err
			}
			changed, err := l.settle(ctx, &st.data, now, true)
			if err != nil {
				return nil, err
			}
			if changed {
				if err := l.writeShard(ctx, i, st); errors.Is(err, errRaced) {
					continue
				} else if err != nil {
					return nil, err
				}
			}
			for _, p := range st.data.Pending {
				pending[p.Key] = true
			}
			break
		}
	}
	return pending, nil
}

// applyBatch removes the batch's rows and releases their slots, then marks the batch done.
// Every step can be repeated: the slots released are counted from what the store holds (a
// row gone, or replaced by a row of another evaluation), and each shard records the last batch
// it applied, so a batch releases each slot once however often it is applied.
func (l *Ledger) applyBatch(ctx context.Context, b *batchData, tag string, lease maintenanceData, gone map[ledger.Key]bool) (string, error) {
	if gone == nil {
		gone = map[ledger.Key]bool{}
	}
	released := map[int]int64{}
	for _, e := range b.Entries {
		g, err := l.removeRow(ctx, e)
		if err != nil {
			return tag, err
		}
		if g {
			gone[e.Key] = true
			released[e.Shard]++
		}
	}
	// A pass that lost its lease while removing stops here: the next holder applies the
	// batch again and releases the slots (an unreleased slot is an overstatement, the safe
	// direction; a slot released twice would not be).
	if err := l.checkMaintenance(ctx, lease); err != nil {
		return tag, err
	}
	for shard, n := range released {
		if err := l.release(ctx, shard, n, b.ID); err != nil {
			return tag, err
		}
	}
	b.Done = true
	body, token, err := l.encode(kindBatch, *b)
	if err != nil {
		return tag, err
	}
	return l.s.put(ctx, batchName, body, token, tag, false)
}

// removeRow deletes one batch row if it is still the row the batch chose and still
// removable. It reports whether the batch's row is gone.
//
// Why the DELETE is safe, although MinIO ignores If-Match on DeleteObject:
//   - Only one cleanup holds the fenced maintenance lease, and the rows it deletes were
//     written into the batch object by compare-and-swap before the first delete.
//   - The row was just read done or abandoned, not permanent, with its retention ended at
//     the ledger's now, which was persisted as the high-water before. Such a row can no
//     longer change in a way that matters: Claim answers Duplicate without writing, Complete
//     and Abandon repeat without writing, and a re-admission can only lengthen retention with
//     a signed time that is itself still fresh. Deleting a row in that race loses nothing a
//     later admission of that signature would not also see: the verdict was published, and
//     the sender's retry schedule is bounded by the queue ceiling the retention already
//     covered. If-Match is still sent, so AWS closes even that window.
//   - A new row under the same key can exist only after the delete landed (it is created with
//     If-None-Match) and carries a new evaluation id. So the DELETE is sent once, without SDK
//     retries (a retried DELETE could land on that new row), and an ambiguous answer is
//     settled by reading back: absent, or another evaluation id, means ours landed.
//   - Slots are released per shard with the batch id recorded in the shard by compare-and-
//     swap, so a repeated or resumed pass never releases a slot twice.
func (l *Ledger) removeRow(ctx context.Context, e batchEntry) (bool, error) {
	rd, etag, err := l.getRow(ctx, e.Key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true, l.dropIndex(ctx, e)
	}
	if err != nil {
		return false, err
	}
	if rd.Row.EvaluationID != e.EvaluationID {
		return true, l.dropIndex(ctx, e)
	}
	if !rd.Row.Removable(rd.Row.Now(l.nowFor(nil), time.Time{})) {
		return false, nil
	}
	derr := l.s.deleteOnce(ctx, rowName(e.Key), etag)
	if errors.Is(derr, errRaced) {
		return false, nil // changed since it was read (AWS): keep it
	}
	if derr != nil {
		back, _, err := l.getRow(ctx, e.Key)
		switch {
		case errors.Is(err, ledger.ErrUnknownDelivery):
		case err != nil:
			return false, errors.Join(derr, err)
		case back.Row.EvaluationID == e.EvaluationID:
			return false, derr
		}
	}
	l.forget(e.Key)
	return true, l.dropIndex(ctx, e)
}

func (l *Ledger) dropIndex(ctx context.Context, e batchEntry) error {
	if e.Index == "" {
		return nil
	}
	if err := l.s.deleteOnce(ctx, e.Index, ""); err != nil && !errors.Is(err, errRaced) {
		return err
	}
	return nil
}

// release gives back n slots of a shard for batch id, once.
func (l *Ledger) release(ctx context.Context, shard int, n int64, id uint64) error {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, err := l.readShard(ctx, shard)
		if err != nil {
			return err
		}
		if st.data.AppliedBatch >= id {
			return nil
		}
		st.data.Used -= n
		if st.data.Used < 0 {
			st.data.Used = 0
		}
		st.data.AppliedBatch = id
		err = l.writeShard(ctx, shard, st)
		if !errors.Is(err, errRaced) {
			return err
		}
	}
	return fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, shard)
}

func (l *Ledger) readBatch(ctx context.Context) (*batchData, string, error) {
	o, err := l.s.get(ctx, batchName)
	if errors.Is(err, errNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var b batchData
	if err := decode(l.s.key(batchName), kindBatch, o.body, &b); err != nil {
		return nil, "", err
	}
	return &b, o.etag, nil
}

// takeMaintenance takes the maintenance lease with the next fence, unless another owner's
// lease is live.
func (l *Ledger) takeMaintenance(ctx context.Context) (maintenanceData, error) {
	now := l.nowFor(nil)
	o, err := l.s.get(ctx, maintenanceName)
	var cur maintenanceData
	create := errors.Is(err, errNotFound)
	if err != nil && !create {
		return cur, err
	}
	if !create {
		if err := decode(l.s.key(maintenanceName), kindMaintenance, o.body, &cur); err != nil {
			return cur, err
		}
		if cur.Owner != l.cfg.Owner && now.Before(time.Unix(0, cur.Until)) {
			return cur, fmt.Errorf("%w: maintenance held by %s until %s", ledger.ErrBusy, cur.Owner,
				time.Unix(0, cur.Until).UTC().Format(time.RFC3339))
		}
	}
	next := maintenanceData{Owner: l.cfg.Owner, Fence: cur.Fence + 1, Until: now.Add(l.cfg.MaintenanceLease).UnixNano()}
	body, token, err := l.encode(kindMaintenance, next)
	if err != nil {
		return next, err
	}
	if _, err := l.s.put(ctx, maintenanceName, body, token, o.etag, create); err != nil {
		if errors.Is(err, errRaced) {
			return next, fmt.Errorf("%w: another cleanup took maintenance", ledger.ErrBusy)
		}
		return next, err
	}
	return next, nil
}

// checkMaintenance confirms the lease is still ours and live.
func (l *Ledger) checkMaintenance(ctx context.Context, lease maintenanceData) error {
	o, err := l.s.get(ctx, maintenanceName)
	if err != nil {
		return err
	}
	var cur maintenanceData
	if err := decode(l.s.key(maintenanceName), kindMaintenance, o.body, &cur); err != nil {
		return err
	}
	if cur.Fence != lease.Fence || !l.nowFor(nil).Before(time.Unix(0, cur.Until)) {
		return fmt.Errorf("%w: maintenance lease (fence %d) lost", ledger.ErrLeaseLost, lease.Fence)
	}
	return nil
}

// dropMaintenance ends our lease early so the next pass need not wait for it.
func (l *Ledger) dropMaintenance(ctx context.Context, lease maintenanceData) {
	o, err := l.s.get(ctx, maintenanceName)
	if err != nil {
		return
	}
	var cur maintenanceData
	if decode(l.s.key(maintenanceName), kindMaintenance, o.body, &cur) != nil || cur.Fence != lease.Fence {
		return
	}
	cur.Until = 0
	if body, token, err := l.encode(kindMaintenance, cur); err == nil {
		l.s.put(ctx, maintenanceName, body, token, o.etag, false)
	}
}

// Stats implements ledger.Ledger. It lists and reads every row.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	st := ledger.Stats{ByState: map[ledger.State]int64{}, Limits: l.cfg.Limits}
	root, _, err := l.readRoot(ctx)
	if err != nil {
		return st, err
	}
	st.HighWater = time.Unix(0, root.HighWater).UTC()
	for i := range l.shards {
		sh, err := l.readShard(ctx, i)
		if err != nil {
			return st, err
		}
		st.CapacityUsed += sh.data.Used
	}
	after := ""
	for {
		names, more, err := l.s.list(ctx, rowsPrefix, after, 1000)
		if err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
		for _, n := range names {
			key, ok := keyOf(n)
			if !ok {
				continue
			}
			rd, _, err := l.getRow(ctx, key)
			if err := st.Count(&rd.Row, err); err != nil {
				return st, fmt.Errorf("stats: %w", err)
			}
		}
		if !more || len(names) == 0 {
			return st, nil
		}
		after = names[len(names)-1]
	}
}
