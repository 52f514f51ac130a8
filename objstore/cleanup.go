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
//  1. checks that the bucket keeps versions (at every pass: while versioning is suspended a
//     write replaces the "null" version in place, so a version judged removable could be a
//     row written after the judgement), and takes the maintenance lease (a fenced object
//     written by compare-and-swap; a live lease of another owner answers ErrBusy);
//  2. finishes the previous batch if it was left unfinished;
//  3. lists the end-time index (with versions), the next page of rows for the sweep and the
//     next page of subject records; if any page fails, the pass removes nothing. The sweep goes round the rows in laps: a pass
//     with an empty cursor starts a lap after the last row the previous pass read (kept in
//     sweep.json), reads to the last row, then from the first row up to where the lap
//     started (Done), so a cleanup cut short by its time limit every time still reaches every
//     row in turn;
//  4. persists its now (the store's time) as the high-water in the root object;
//  5. judges the rows the index names, and the rows the sweep reads, and writes the removable
//     ones (each with the exact version judged) as a new batch by compare-and-swap; then,
//     with the lease checked by fence, removes each judged version with the history below it
//     and releases the slots of the rows the batch really removed, once per shard per batch;
//  6. reports the damaged and the stranded rows the sweep read, and forgets the subject
//     records of its page that no verdict can land on any more (subjects.go).
//
// An index entry is dropped only when its row is gone, or is finished with another end (it is
// indexed again first); the entry of a row that is not finished stays, since that row can
// still become done. A finished row whose entry is missing is found by the sweep.
func (l *Ledger) Cleanup(ctx context.Context, cursor ledger.Cursor) (ledger.CleanupReport, error) {
	var rep ledger.CleanupReport
	if !l.cleaning.TryLock() {
		return rep, fmt.Errorf("cleanup: %w: another cleanup of this handle is running", ledger.ErrBusy)
	}
	defer l.cleaning.Unlock()
	if err := l.s.requireVersioning(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
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
	now := ledger.MaxTime(l.clock.Now(), time.Unix(0, root.HighWater).UTC(), l.highWater())
	ended, err := l.listEnded(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	sw, err := l.readSweep(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	lap := sweepCursor{Lap: sw.After, At: sw.After}
	if cursor != "" {
		if lap, err = parseSweepCursor(cursor); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	sweep, next, err := l.listSweep(ctx, lap)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	subjects, err := l.listSubjects(ctx, sw.Subjects, l.cfg.SweepBatch)
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
	j := &judge{l: l, now: now, tally: &ledger.Tally{Now: now, StrandedAfter: l.cfg.StrandedAfter}, chosen: map[ledger.Key]bool{}}
	// Every pass settles every shard, so that after a pass the capacity shards count exactly
	// the rows and the admissions still in flight.
	if _, err := j.unsettled(ctx, ledger.Key{}); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	for _, group := range ended {
		if err := j.indexed(ctx, group); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	swept, err := j.sweep(ctx, sweep)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	gone := map[ledger.Key]bool{}
	if len(j.batch.Entries) > 0 {
		batch := j.batch
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
	for _, r := range swept {
		if gone[r.key] {
			continue
		}
		if err := j.tally.Add(l.s.key(rowName(r.key)), r.row, r.err); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	// The subject records, a page a pass, round and round (subjects.go).
	var nextSubject string
	rep.Subjects, rep.RemovedSubjects, nextSubject, err = l.cleanSubjects(ctx, subjects, now, j.tally)
	if err != nil {
		return rep, fmt.Errorf("cleanup: subjects: %w", err)
	}
	j.tally.Fill(&rep)
	// Capacity after the pass: the shards as every pass settles them, less the slots this
	// pass released.
	rep.RecordCap = l.cfg.Limits.RecordCap
	rep.CapacityUsed = max(0, j.used-int64(len(rep.Removed)))
	if next != nil {
		rep.Next = next.String()
	}
	rep.Done = next == nil
	// The next lap starts where this pass stopped (a finished lap: where it started).
	stop := lap.Lap
	switch {
	case len(sweep) > 0:
		stop = strings.TrimPrefix(sweep[len(sweep)-1], rowsPrefix)
	case next != nil:
		stop = next.At
	}
	if err := l.writeSweep(ctx, sweepData{After: stop, Subjects: nextSubject}); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	return rep, nil
}

// sweepCursor is a position of the sweep in a lap: the lap starts after the row named Lap
// (from the first row when Lap is empty), goes to the last row, then (Wrapped) from the first
// row up to and including Lap. At is the last row read (from the lap's segment start when
// empty). Names are row object names without the rows prefix.
type sweepCursor struct {
	Lap, At string
	Wrapped bool
}

// String encodes the cursor as "lap|a|at" or "lap|b|at" (b: wrapped).
func (c sweepCursor) String() ledger.Cursor {
	seg := "a"
	if c.Wrapped {
		seg = "b"
	}
	return ledger.Cursor(c.Lap + "|" + seg + "|" + c.At)
}

// parseSweepCursor reads a cursor a pass answered. A cursor without a lap (written before laps)
// is a position in a lap from the first row.
func parseSweepCursor(c ledger.Cursor) (sweepCursor, error) {
	parts := strings.Split(string(c), "|")
	switch {
	case len(parts) == 1:
		return sweepCursor{At: parts[0]}, nil
	case len(parts) == 3 && (parts[1] == "a" || parts[1] == "b"):
		return sweepCursor{Lap: parts[0], At: parts[2], Wrapped: parts[1] == "b"}, nil
	}
	return sweepCursor{}, fmt.Errorf("%w: cleanup cursor %q", ledger.ErrInvalid, c)
}

// listSweep lists the rows of the pass at c, at most SweepBatch, and answers where the next
// pass goes on (nil when this pass ends the lap). A pass that reaches the last row before
// the lap is over goes on from the first row in the same pass.
func (l *Ledger) listSweep(ctx context.Context, c sweepCursor) ([]string, *sweepCursor, error) {
	after := func(name string) string {
		if name == "" {
			return ""
		}
		return rowsPrefix + name
	}
	limit := l.cfg.SweepBatch
	var names []string
	if !c.Wrapped {
		got, more, err := l.s.list(ctx, rowsPrefix, after(c.At), limit)
		if err != nil {
			return nil, nil, err
		}
		names = got
		if more && len(got) > 0 {
			return names, &sweepCursor{Lap: c.Lap, At: strings.TrimPrefix(got[len(got)-1], rowsPrefix)}, nil
		}
		if c.Lap == "" {
			return names, nil, nil // the lap began at the first row: it is over
		}
		c = sweepCursor{Lap: c.Lap, Wrapped: true}
		if limit -= len(got); limit <= 0 {
			return names, &c, nil
		}
	}
	got, more, err := l.s.list(ctx, rowsPrefix, after(c.At), limit)
	if err != nil {
		return nil, nil, err
	}
	for i, n := range got {
		if strings.TrimPrefix(n, rowsPrefix) > c.Lap {
			return append(names, got[:i]...), nil, nil // back where the lap began
		}
	}
	names = append(names, got...)
	if more && len(got) > 0 {
		return names, &sweepCursor{Lap: c.Lap, At: strings.TrimPrefix(got[len(got)-1], rowsPrefix), Wrapped: true}, nil
	}
	return names, nil, nil
}

// readSweep answers where a pass with an empty cursor starts its lap: after the last row the
// previous pass read (a row name without the rows prefix), so that a cleanup cut short by its
// time limit at every invocation still reaches every row in turn; from the first row when no
// pass recorded a position. A damaged record starts from the first row: a sweep repeated is
// harmless, one that never reaches some rows is not.
func (l *Ledger) readSweep(ctx context.Context) (sweepData, error) {
	o, err := l.s.get(ctx, sweepName)
	if errors.Is(err, errNotFound) {
		return sweepData{}, nil
	}
	if err != nil {
		return sweepData{}, err
	}
	var sw sweepData
	if err := decode(l.s.key(sweepName), kindSweep, o.body, &sw); err != nil || strings.Contains(sw.After, "|") {
		return sweepData{}, nil
	}
	return sw, nil
}

// writeSweep records where the next pass with an empty cursor starts, and where the next pass
// goes on judging subject records. A plain write: a late copy of an older one only makes a
// later pass read some rows or records again.
func (l *Ledger) writeSweep(ctx context.Context, sw sweepData) error {
	body, _, err := l.encode(kindSweep, sw)
	if err != nil {
		return err
	}
	if err := l.s.putPlain(ctx, sweepName, body); err != nil {
		return fmt.Errorf("record the sweep's position: %w", err)
	}
	return nil
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

// endedGroup is the index entries of one key whose end is before now.
type endedGroup struct {
	key     ledger.Key
	entries []indexEntry
}

func parseIndexName(name string) (time.Time, ledger.Key, bool) {
	endS, keyS, ok := strings.Cut(strings.TrimPrefix(name, endedPrefix), "-")
	end, err1 := strconv.ParseInt(endS, 10, 64)
	key, err2 := ledger.ParseKey(keyS)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, ledger.Key{}, false
	}
	return time.Unix(0, end).UTC(), key, true
}

// listEnded lists the index entries whose end is before now, oldest first, up to the batch
// size, grouped by key (a row indexed twice, by a Complete repeated after its retention was
// lengthened, is one group).
func (l *Ledger) listEnded(ctx context.Context, now time.Time) ([]endedGroup, error) {
	entries, err := l.s.listIndex(ctx, endedPrefix, l.cfg.CleanupBatch)
	if err != nil {
		return nil, err
	}
	var out []endedGroup
	at := map[ledger.Key]int{}
	for _, e := range entries {
		end, key, ok := parseIndexName(e.name)
		if !ok {
			continue
		}
		if !now.After(end) {
			break // names sort by end time
		}
		if i, ok := at[key]; ok {
			out[i].entries = append(out[i].entries, e)
			continue
		}
		at[key] = len(out)
		out = append(out, endedGroup{key: key, entries: []indexEntry{e}})
	}
	return out, nil
}

// judge decides, for one pass, which rows are removable; it collects them, once each, into a
// batch.
type judge struct {
	l       *Ledger
	now     time.Time
	tally   *ledger.Tally
	batch   batchData
	chosen  map[ledger.Key]bool
	pending map[ledger.Key]bool // keys whose admission is not settled; nil until needed
	used    int64               // slots the shards counted when they were settled
}

// unsettled reports whether key has a pending capacity entry: its row is left for a later
// pass, so that a slot is released by the batch or by settlement, never by both. Every shard
// is settled (thoroughly) once per pass.
func (j *judge) unsettled(ctx context.Context, key ledger.Key) (bool, error) {
	if j.pending == nil {
		p, used, err := j.l.settleAll(ctx, j.now)
		if err != nil {
			return false, err
		}
		j.pending, j.used = p, used
	}
	return j.pending[key], nil
}

// DefaultRequestLife is how long after it was signed a request can still land: S3 refuses a SigV4
// request whose signing time is more than 15 minutes from its own clock. The SDK signs with the
// host's wall clock corrected by the last skew it measured; a host clock that stepped up to 15
// minutes ahead since can sign a request the store still takes 15 minutes later: 30 minutes,
// and a minute for the store's nodes' disagreement (half a minute each way). A row's key is
// not emptied sooner than that after its reservation landed (see Config.RequestLife).
const DefaultRequestLife = 31 * time.Minute

// quiet reports whether no write to an object last written at the given times (the store's
// LastModified of the version judged, and the object's own record of its last write, both on
// the store's clock) can still land at now: every request that wrote it, or a copy of one held
// in the network, was signed more than RequestLife ago. Only such an object may be forgotten:
// once its key is empty, a late copy of its create (If-None-Match: *) would land and bring back
// a version of it, and copies of the writes that followed it would land over that version
// (each attempt of a write carries the same bytes, so the same ETag).
func (l *Ledger) quiet(now time.Time, written ...time.Time) bool {
	return now.Sub(ledger.MaxTime(written...)) > l.cfg.RequestLife
}

// keyAged reports whether every request that could recreate the reservation a row was made
// over has expired.
func (j *judge) keyAged(rd *rowData) bool {
	at := rd.ReservedAt
	if at == 0 {
		at = rd.Row.CreatedAt.UnixNano() // format 1: the row's own creation
	}
	return j.now.Sub(time.Unix(0, at)) > j.l.cfg.RequestLife
}

// choose adds a removable row to the batch, once.
func (j *judge) choose(ctx context.Context, ks keyState, idx []indexEntry) error {
	row := &ks.row.Row
	if j.chosen[row.Key] || !j.keyAged(ks.row) {
		return nil
	}
	if p, err := j.unsettled(ctx, row.Key); err != nil || p {
		return err
	}
	j.chosen[row.Key] = true
	e := batchEntry{Key: row.Key, EvaluationID: row.EvaluationID, Shard: ks.row.Shard, Version: ks.version}
	for _, x := range idx {
		e.Indexes = append(e.Indexes, indexData{Name: x.name, Versions: x.versions})
	}
	j.batch.Entries = append(j.batch.Entries, e)
	return nil
}

// indexed judges the row that a group of index entries names.
func (j *judge) indexed(ctx context.Context, g endedGroup) error {
	l := j.l
	ks, err := l.readKey(ctx, g.key)
	switch {
	case errors.Is(err, ledger.ErrCorrupt):
		j.tally.Damage(l.s.key(rowName(g.key)), err)
		return nil
	case err != nil:
		return err
	case ks.row == nil:
		// The row is gone (an entry that outlived its batch, or the key is reserved anew):
		// a later Complete of the key writes its own entry.
		return j.drop(ctx, g.entries, "")
	}
	row := &ks.row.Row
	switch {
	case !row.State.Terminal():
		return nil // it can still become done: its entry stays
	case row.Removable(j.now):
		return j.choose(ctx, ks, g.entries)
	case row.Permanent:
		return j.drop(ctx, g.entries, "")
	}
	// Finished, with a retention lengthened since it was indexed: index it at its end first.
	keep := indexName(row)
	if err := l.s.putPlain(ctx, keep, nil); err != nil {
		return err
	}
	return j.drop(ctx, g.entries, keep)
}

// drop deletes the listed versions of entries, except the one named keep.
func (j *judge) drop(ctx context.Context, entries []indexEntry, keep string) error {
	for _, e := range entries {
		if e.name == keep {
			continue
		}
		if err := j.l.s.dropIndex(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// sweptRow is one row the sweep read, tallied after the batch.
type sweptRow struct {
	key ledger.Key
	row *ledger.Row
	err error
}

// sweep reads the rows of this pass's slice: a finished row found removable joins the batch
// (its index entry may be missing), and a reservation whose admission is over is tidied away.
func (j *judge) sweep(ctx context.Context, names []string) ([]sweptRow, error) {
	l := j.l
	var out []sweptRow
	for _, name := range names {
		key, ok := keyOf(name)
		if !ok {
			continue
		}
		ks, err := l.readKey(ctx, key)
		switch {
		case err != nil:
			out = append(out, sweptRow{key: key, row: &ledger.Row{}, err: err})
			continue
		case ks.res != nil:
			if err := j.tidyReservation(ctx, key, ks); err != nil {
				return nil, err
			}
			continue
		case ks.row == nil:
			continue
		}
		row := &ks.row.Row
		if row.Removable(j.now) {
			if err := j.choose(ctx, ks, nil); err != nil {
				return nil, err
			}
		}
		out = append(out, sweptRow{key: key, row: row})
	}
	return out, nil
}

// tidyReservation clears away a reservation no admission can use any more. One older than the
// grace with no pending entry is voided (by a conditional write); a void is removed, by version
// (a reservation or row written after it was read survives), only when it says no row write can
// wait on the key (NoRowWrite). Every other void stays until an admission of the key takes it
// over: removed, it would let a late copy of a reservation PUT create the reservation again, and
// a row write held in flight land over it without a slot.
func (j *judge) tidyReservation(ctx context.Context, key ledger.Key, ks keyState) error {
	l := j.l
	if !ks.res.Void {
		if j.now.Sub(time.Unix(0, ks.res.At)) <= l.cfg.PendingGrace {
			return nil
		}
		if p, err := j.unsettled(ctx, key); err != nil || p {
			return err
		}
		void := *ks.res
		void.Void, void.VoidedAt = true, l.nowFor(nil).Add(time.Second).UnixNano()
		body, token, err := l.encode(kindReservation, void)
		if err != nil {
			return err
		}
		if _, err := l.s.put(ctx, rowName(key), body, token, ks.etag, false); err != nil && !errors.Is(err, errRaced) {
			return err
		}
		return nil
	}
	if !ks.res.NoRowWrite {
		return nil
	}
	_, _, err := l.s.removeVersion(ctx, rowName(key), ks.version)
	return err
}

// applyBatch removes the batch's rows and releases their slots, then marks the batch done. The
// maintenance lease is checked by fence before the first delete and again before the release.
// Every step can be repeated: a row counts as removed by the batch when the version it judged
// is gone and the key holds nothing of that evaluation any more, and each shard records the
// last batch it applied, so a batch releases each slot once however often it is applied.
func (l *Ledger) applyBatch(ctx context.Context, b *batchData, tag string, lease maintenanceData, gone map[ledger.Key]bool) (string, error) {
	if gone == nil {
		gone = map[ledger.Key]bool{}
	}
	if err := l.checkMaintenance(ctx, lease); err != nil {
		return tag, err
	}
	released := map[int]int64{}
	for _, e := range b.Entries {
		g, err := l.removeRow(ctx, e)
		if err != nil {
			return tag, err
		}
		if g && !gone[e.Key] {
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

// removeRow removes the version of one batch row that the batch judged, with the history below
// it, and reports whether the batch's row is gone.
//
// Why no DELETE can remove a row it did not judge, however late it lands: every DELETE names a
// version id. The judged version is deleted only while it is the latest, after every older
// version (so none becomes current again); a write that lands after the judgement (a longer
// retention, a new admission of the key) is a newer version, which no DELETE of this batch
// names. A DELETE held in flight past the maintenance lease, past another cleaner finishing
// this batch, past a new row under the same key, can only delete what it names.
func (l *Ledger) removeRow(ctx context.Context, e batchEntry) (bool, error) {
	version := e.Version
	if version == "" {
		// A format 1 batch named no version: judge the row again now, under the lease.
		ks, err := l.readKey(ctx, e.Key)
		if err != nil {
			return false, err
		}
		if ks.row == nil || ks.row.Row.EvaluationID != e.EvaluationID {
			return true, l.dropIndexes(ctx, e)
		}
		if !ks.row.Row.Removable(l.nowFor(nil)) {
			return false, nil
		}
		version = ks.version
	}
	if _, _, err := l.s.removeVersion(ctx, rowName(e.Key), version); err != nil {
		return false, err
	}
	l.forget(e.Key)
	ks, err := l.readKey(ctx, e.Key)
	if err != nil {
		return false, err
	}
	if ks.row != nil && ks.row.Row.EvaluationID == e.EvaluationID {
		return false, nil // it lived on in a newer version (a re-admission lengthened its retention)
	}
	return true, l.dropIndexes(ctx, e)
}

// dropIndexes deletes the index entries the batch listed with a row it removed.
func (l *Ledger) dropIndexes(ctx context.Context, e batchEntry) error {
	for _, x := range e.Indexes {
		if err := l.s.dropIndex(ctx, indexEntry{name: x.Name, versions: x.Versions}); err != nil {
			return err
		}
	}
	if e.Index == "" {
		return nil
	}
	// A format 1 entry names its index entry without versions.
	vs, err := l.s.versions(ctx, e.Index)
	if err != nil {
		return err
	}
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v.id
	}
	return l.s.dropIndex(ctx, indexEntry{name: e.Index, versions: ids})
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

// subjectPage is the page of subject records a cleanup pass judges: listed before the pass
// removes anything (a listing that fails removes nothing), up to max after the one named
// after (from the first when empty).
type subjectPage struct {
	names []string
	more  bool
}

func (l *Ledger) listSubjects(ctx context.Context, after string, max int) (subjectPage, error) {
	names, more, err := l.s.list(ctx, subjectsPrefix, after, max)
	return subjectPage{names: names, more: more}, err
}

// cleanSubjects judges the page's subject records at now, and removes the removable ones by
// the exact version judged (a write that lands after the judgement is a newer version, and
// stays). It answers the counts, and where the next pass goes on ("" once the last record was
// reached).
func (l *Ledger) cleanSubjects(ctx context.Context, page subjectPage, now time.Time, tally *ledger.Tally) (kept, removed int, next string, err error) {
	horizon := l.cfg.Limits.SubjectHorizon()
	for _, name := range page.names {
		k, err := ledger.ParseSubjectKey(strings.TrimSuffix(strings.TrimPrefix(name, subjectsPrefix), ".json"))
		if err != nil {
			continue
		}
		rec, o, exists, err := l.readSubject(ctx, k)
		switch {
		case errors.Is(err, ledger.ErrCorrupt):
			tally.Damage(l.s.key(name), err)
			kept++
			continue
		case err != nil:
			return kept, removed, "", err
		case !exists:
			continue
		}
		var newest *ledger.Row
		rd, _, err := l.getRow(ctx, rec.Newest.Key)
		switch {
		case err == nil:
			newest = &rd.Row
		case !errors.Is(err, ledger.ErrUnknownDelivery):
			kept++ // its newest verdict's row cannot be read: kept, and the row reported by the sweep
			continue
		}
		if !rec.Removable(now, horizon, newest) || !l.quiet(now, rec.UpdatedAt, o.modified) {
			kept++
			continue
		}
		latest, gone, err := l.s.removeVersion(ctx, name, o.version)
		if err != nil {
			return kept, removed, "", err
		}
		if latest || gone {
			removed++
		} else {
			kept++ // changed since it was judged
		}
	}
	if page.more && len(page.names) > 0 {
		next = page.names[len(page.names)-1]
	}
	return kept, removed, next, nil
}
