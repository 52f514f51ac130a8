package objstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cleanup's cost follows the work, not what is kept. A pass reads what can be due now, found
// through an index ordered by when cleanup must next look at each object (due/), never every
// kept object:
//
//	due/<time>-r<key>   a look at a row's key, written by the admission that reserved the key
//	                    (before its slot and its row), for PendingGrace later: is the row
//	                    finished (or when will it be), a reservation to tidy? The same read
//	                    recounts the admission's pending capacity entry.
//	due/<time>-p<id>    a part of cleanup's own schedule (kindSchedule): keys and subject
//	                    records to look at again, all due by the part's time: a finished row at
//	                    the end of its retention, an unfinished one StrandedAfter later, a void
//	                    at the end of its life, a subject record once no verdict or write can
//	                    land on it
//
// An index entry is dropped only once what it points to was looked at and, if it can still
// become removable, scheduled again (the new part written first): an entry dropped while its
// object can still become removable would leave that object kept for ever. An entry is a hint:
// whatever a look finds (the object changed, gone, or written again by a late copy of a
// request), it judges the object itself, on a fresh read, before anything is removed.
//
// A safety net goes round every row and subject record in laps (sweep.json), a page a pass,
// once a month and once after an upgrade: it finds what no entry points to (objects written
// by format 5, which kept no due/ entries, or a row whose admission died between its
// reservation and its entry) and schedules it. Before a lap starts, every capacity shard
// still written by an older format is written in this one (upgradeShards): a build of that
// format still running refuses it, so it makes no row, indexed nowhere, behind the lap.

const (
	duePrefix = "due/"
	// schedulePeriod gathers the looks a pass schedules into parts: one part per period.
	schedulePeriod = 10 * time.Minute
	// lookEvery is how long the look an admission asked for may come late (a pass every 5
	// minutes).
	lookEvery = 5 * time.Minute
	// voidLife is how long a void reservation stays at its key after it was written (see
	// reservationData).
	voidLife = 7 * 24 * time.Hour
	// lapEvery is how long after a lap of the safety net the next one starts.
	lapEvery = 30 * 24 * time.Hour
	// recheck is when a look that could decide nothing (a damaged object, a subject record
	// whose newest verdict's row is not finished) comes again.
	recheck = time.Hour
	// lapDone marks a listing of the lap that reached its last name.
	lapDone = "~"
)

// dueLookName names the index entry of a look at key at t.
func dueLookName(t time.Time, key ledger.Key) string {
	return fmt.Sprintf("%s%020d-r%s", duePrefix, max(t.UnixNano(), 0), key)
}

// parseDueName reads an index entry's name: its time, and the key of a look (r) or the id of a
// schedule part (p).
func parseDueName(name string) (at time.Time, kind byte, rest string, ok bool) {
	tS, tail, found := strings.Cut(strings.TrimPrefix(name, duePrefix), "-")
	n, err := strconv.ParseInt(tS, 10, 64)
	if !found || err != nil || len(tail) < 2 || (tail[0] != 'r' && tail[0] != 'p') {
		return time.Time{}, 0, "", false
	}
	return time.Unix(0, n).UTC(), tail[0], tail[1:], true
}

// Cleanup implements ledger.Ledger. One pass:
//  1. checks that the bucket keeps versions (at every pass: while versioning is suspended a
//     write replaces the "null" version in place, so a version judged removable could be a
//     row written after the judgement), and takes the maintenance lease (a fenced object
//     written by compare-and-swap; a live lease of another owner answers ErrBusy);
//  2. finishes the previous batch if it was left unfinished;
//  3. lists what is due (due/, and the end-time index ended/ of rows written by format 5) and,
//     while a lap of the safety net is under way, the next page of rows and of subject
//     records; if any page fails, the pass removes nothing;
//  4. recounts every capacity shard (writing only those that change);
//  5. looks at what is due: rows finished past their retention (and key age) join a batch;
//     unfinished rows are tallied (stranded ones reported) and looked at again later; voids
//     past their life and subject records nothing can land on are removed by the version read;
//     everything else is scheduled for when it can be due, and written into schedule parts
//     before anything is removed;
//  6. when the batch holds rows: persists its now as the high-water in the root and in every
//     capacity shard, writes the batch by compare-and-swap, then, with the lease checked by
//     fence, removes each judged version with the history below it and releases the slots of
//     the rows the batch really removed, once per shard per batch;
//  7. writes the looks the removals left to come, then drops the index entries it looked at;
//  8. reads the rows its looks did not read from cleanup's list of the oldest unfinished rows
//     (unfinished.go), oldest first up to the first found unfinished, and reports the oldest
//     unfinished row it read.
//
// Done reports that everything due was looked at and no lap is under way; Next is where the lap
// goes on.
func (l *Ledger) Cleanup(ctx context.Context, cursor ledger.Cursor) (ledger.CleanupReport, error) {
	var rep ledger.CleanupReport
	if !l.cleaning.TryLock() {
		return rep, fmt.Errorf("cleanup: %w: another cleanup of this handle is running", ledger.ErrBusy)
	}
	defer l.cleaning.Unlock()
	if err := l.s.requireVersioning(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	lease, leaseTag, err := l.takeMaintenance(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	defer l.dropMaintenance(context.WithoutCancel(ctx), lease, leaseTag)
	prev, prevTag, err := l.readBatch(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	refused := map[string]error{} // rows whose versions the store would not delete
	if prev != nil && !prev.Done {
		if prevTag, err = l.applyBatch(ctx, prev, prevTag, lease, nil, refused); err != nil {
			return rep, fmt.Errorf("cleanup: finish batch %d: %w", prev.ID, err)
		}
	}
	root, rootTag, err := l.readRoot(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	now := ledger.MaxTime(l.clock.Now(), time.Unix(0, root.HighWater).UTC(), l.highWater())
	p := &pass{l: l, now: now, tally: &ledger.Tally{Now: now, StrandedAfter: l.cfg.StrandedAfter},
		chosen: map[ledger.Key]bool{}, looked: map[string]bool{}, highWater: time.Unix(0, root.HighWater).UTC()}

	// Every listing before anything is removed: a listing that fails removes nothing.
	due, complete, err := l.listDue(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	ended, err := l.listEnded(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	sw, err := l.readSweep(ctx)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	lap, sweepChanged := sw, false
	known := sw.Unfinished // the oldest unfinished rows found before (unfinished.go)
	if c, ok := parseLapCursor(cursor); ok {
		lap, sweepChanged = c, true
	} else if !lap.InLap && now.Sub(time.Unix(0, lap.LapEnded)) >= lapEvery {
		lap, sweepChanged = sweepData{InLap: true}, true // a new lap, from the first row
	}
	var rows, subjects []string
	if lap.InLap && lap.After == "" && lap.Subjects == "" {
		// A lap from the first row: first every capacity shard is written in this format, so
		// that no build of an older format still running (a fleet rolling forward), which
		// indexes nothing in due/, can take a slot and make a row behind the lap.
		if err := l.upgradeShards(ctx); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	if lap.InLap {
		if rows, lap.After, err = l.listLap(ctx, rowsPrefix, lap.After); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
		if subjects, lap.Subjects, err = l.listLap(ctx, subjectsPrefix, lap.Subjects); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
		sweepChanged = true
	}

	// What is due: looks the admissions asked for, then cleanup's own schedule, within the
	// batch size.
	budget := l.cfg.CleanupBatch
	var consumed []indexEntry
	for _, e := range due {
		_, kind, rest, _ := parseDueName(e.name)
		if budget <= 0 {
			complete = false
			break
		}
		switch kind {
		case 'r':
			key, err := ledger.ParseKey(rest)
			if err != nil {
				continue
			}
			budget--
			if err := p.lookRow(ctx, "look", key, nil); err != nil {
				return rep, fmt.Errorf("cleanup: %w", err)
			}
		case 'p':
			part, err := l.readPart(ctx, e.name)
			if errors.Is(err, ledger.ErrCorrupt) {
				p.tally.Damage(l.s.key(e.name), err)
				continue // kept, and reported: an operator removes it
			}
			if err != nil {
				return rep, fmt.Errorf("cleanup: %w", err)
			}
			if len(part.Items) > budget && budget < l.cfg.CleanupBatch {
				complete = false
				budget = 0
				continue
			}
			budget -= len(part.Items)
			for _, it := range part.Items {
				if time.Unix(0, it.At).After(now) {
					p.schedule(it) // not due yet: into a part of its own time
					continue
				}
				if err := p.item(ctx, it); err != nil {
					return rep, fmt.Errorf("cleanup: %w", err)
				}
			}
		}
		consumed = append(consumed, e)
	}
	for _, group := range ended {
		if err := p.lookRow(ctx, "look", group.key, group.entries); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	for _, name := range rows {
		if key, ok := keyOf(name); ok {
			if err := p.lookRow(ctx, "look", key, nil); err != nil {
				return rep, fmt.Errorf("cleanup: %w", err)
			}
		}
	}
	for _, name := range subjects {
		if k, err := ledger.ParseSubjectKey(strings.TrimSuffix(strings.TrimPrefix(name, subjectsPrefix), ".json")); err == nil {
			if err := p.subject(ctx, k); err != nil {
				return rep, fmt.Errorf("cleanup: subjects: %w", err)
			}
		}
	}
	// Every pass recounts every shard, judging the admissions whose keys it read without
	// reading them again; then what waited on it is decided.
	if err := p.recountAndDecide(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}

	rep.HighWater = p.highWater
	gone := map[ledger.Key]bool{}
	if err := p.listBatch(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	// What the looks scheduled is written before anything is removed: a row this pass
	// removes may be all that named what its look scheduled (the subject records its verdict
	// was published to), and a pass cut after the removal would leave those to the next lap.
	if err := p.writeSchedule(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	if len(p.batch.Entries) > 0 {
		// The high-water before anything is deleted, in every capacity shard, then the root:
		// a request stale when its row is forgotten stays stale, whatever the clocks do.
		if err := l.raiseShards(ctx, now, p.shards); err != nil {
			return rep, fmt.Errorf("cleanup: persist high-water: %w", err)
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
		batch := p.batch
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
		if _, err := l.applyBatch(ctx, &batch, tag, lease, gone, refused); err != nil {
			return rep, fmt.Errorf("cleanup: batch %d: %w", batch.ID, err)
		}
		for _, e := range batch.Entries {
			if gone[e.Key] {
				rep.Removed = append(rep.Removed, ledger.RemovedRow{Key: e.Key, EvaluationID: e.EvaluationID})
				continue
			}
			at := now // it lived on in a newer version: judged again
			if refused[rowName(e.Key)] != nil {
				at = now.Add(recheck) // the store would not delete it: tried again a while later
			}
			p.later("look", e.Key.String(), at)
		}
	}
	for name, e := range refused {
		p.tally.Damage(l.s.key(name), e) // kept, reported, and looked at again
	}
	for _, r := range p.read {
		if gone[r.key] || refused[rowName(r.key)] != nil {
			continue
		}
		if err := p.tally.Add(l.s.key(rowName(r.key)), r.row, nil); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	if err := p.removeAll(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	// What was looked at is dropped only once what it can still become is scheduled (what
	// the removals left to look at again, too).
	if err := p.writeSchedule(ctx); err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	var drop []versionRef
	for _, e := range append(consumed, p.dropEnded...) {
		for _, v := range e.versions {
			drop = append(drop, versionRef{e.name, v})
		}
	}
	if _, err := l.s.deleteVersions(ctx, drop); err != nil { // an entry not dropped is looked at again
		return rep, fmt.Errorf("cleanup: drop index entries: %w", err)
	}
	rep.Subjects, rep.RemovedSubjects = p.subjectsKept, p.subjectsRemoved
	unfinished, err := p.refreshUnfinished(ctx, known)
	if err != nil {
		return rep, fmt.Errorf("cleanup: unfinished rows: %w", err)
	}
	p.tally.Fill(&rep)
	rep.OldestUnfinished = ledger.Earliest(rep.OldestUnfinished, p.oldestUnfinished)
	if p.counted { // capacity is reported by a pass that read every shard
		rep.RecordCap = l.cfg.Limits.RecordCap
		rep.CapacityUsed = max(0, p.used-int64(len(rep.Removed)))
	}
	if lap.InLap && lap.After == lapDone && lap.Subjects == lapDone {
		lap = sweepData{LapEnded: now.UnixNano()}
	}
	lap.Unfinished = unfinished
	if !sameUnfinished(known, unfinished) {
		sweepChanged = true
	}
	if sweepChanged {
		if err := l.writeSweep(ctx, lap); err != nil {
			return rep, fmt.Errorf("cleanup: %w", err)
		}
	}
	if lap.InLap {
		rep.Next = lapCursor(lap)
	}
	rep.Done = complete && !lap.InLap
	return rep, nil
}

// lapCursor encodes where a lap under way goes on; parseLapCursor reads it back (a cursor of
// another form, such as one format 5 answered, is not one: the lap goes on from sweep.json).
func lapCursor(s sweepData) ledger.Cursor {
	return ledger.Cursor("lap|" + s.After + "|" + s.Subjects)
}

func parseLapCursor(c ledger.Cursor) (sweepData, bool) {
	parts := strings.Split(string(c), "|")
	if len(parts) != 3 || parts[0] != "lap" {
		return sweepData{}, false
	}
	return sweepData{InLap: true, After: parts[1], Subjects: parts[2]}, true
}

// listLap lists the next page of the lap under prefix after the name after (without the
// prefix; "" from the first, lapDone when the listing is over), and answers where it goes on.
func (l *Ledger) listLap(ctx context.Context, prefix, after string) ([]string, string, error) {
	if after == lapDone {
		return nil, lapDone, nil
	}
	start := ""
	if after != "" {
		start = prefix + after
	}
	names, more, err := l.s.list(ctx, prefix, start, l.cfg.SweepBatch)
	if err != nil {
		return nil, "", err
	}
	if !more || len(names) == 0 {
		return names, lapDone, nil
	}
	return names, strings.TrimPrefix(names[len(names)-1], prefix), nil
}

// readSweep reads the safety net's state. A damaged record starts a new lap: a lap repeated is
// harmless, one that never comes is not.
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

// writeSweep records the safety net's state. A plain write: a late copy of an older one only
// makes a later pass read some rows or records again.
func (l *Ledger) writeSweep(ctx context.Context, sw sweepData) error {
	body, _, err := l.encode(kindSweep, sw)
	if err != nil {
		return err
	}
	if err := l.s.putPlain(ctx, sweepName, body); err != nil {
		return fmt.Errorf("record the sweep's state: %w", err)
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

// listDue lists the index entries due by now, oldest first, at most CleanupBatch of them;
// complete reports that no entry due by now was left out.
func (l *Ledger) listDue(ctx context.Context, now time.Time) (out []indexEntry, complete bool, err error) {
	entries, err := l.s.listIndex(ctx, duePrefix, l.cfg.CleanupBatch)
	if err != nil {
		return nil, false, err
	}
	for _, e := range entries {
		at, _, _, ok := parseDueName(e.name)
		if !ok {
			continue
		}
		if at.After(now) {
			return out, true, nil // names sort by time
		}
		out = append(out, e)
	}
	return out, len(entries) < l.cfg.CleanupBatch, nil
}

// readPart reads one part of the schedule.
func (l *Ledger) readPart(ctx context.Context, name string) (scheduleData, error) {
	var part scheduleData
	o, err := l.s.get(ctx, name)
	if errors.Is(err, errNotFound) {
		return part, nil // dropped since it was listed
	}
	if err != nil {
		return part, err
	}
	return part, decode(l.s.key(name), kindSchedule, o.body, &part)
}

// endedGroup is the index entries (format 5's end-time index) of one key whose end is before
// now.
type endedGroup struct {
	key     ledger.Key
	entries []indexEntry
}

// listEnded lists the end-time index entries (rows finished by format 5) whose end is before
// now, oldest first, up to the batch size, grouped by key (a row indexed twice, by a Complete
// repeated after its retention was lengthened, is one group).
func (l *Ledger) listEnded(ctx context.Context, now time.Time) ([]endedGroup, error) {
	entries, err := l.s.listIndex(ctx, endedPrefix, l.cfg.CleanupBatch)
	if err != nil {
		return nil, err
	}
	var out []endedGroup
	at := map[ledger.Key]int{}
	for _, e := range entries {
		end, key, ok := ledger.ParseEndIndexName(strings.TrimPrefix(e.name, endedPrefix))
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

// pass is one cleanup pass: what it decided, collected, and scheduled.
type pass struct {
	l       *Ledger
	now     time.Time
	tally   *ledger.Tally
	batch   batchData
	chosen  map[ledger.Key]bool
	pending map[ledger.Key]bool // keys whose admission the recount left pending
	used    int64               // slots the shards counted when they were all recounted (counted)
	counted bool
	shards  []shardVersion // the shards as they were recounted
	// states are the keys read by the pass's looks; removable are the rows found removable and
	// voidable the reservations found abandoned, decided once the shards are recounted.
	states    map[ledger.Key]keyState
	removable []candidate
	voidable  []ledger.Key
	// looked keeps a key from being read twice in a pass; read is the rows read, tallied after
	// the batch (a row the batch removed is not counted as kept).
	looked map[string]bool
	read   []seenRow
	// damagedKeys are the keys whose look found the object damaged.
	damagedKeys map[ledger.Key]bool
	// oldestUnfinished is the admission time of the oldest row the pass read unfinished
	// (refreshUnfinished).
	oldestUnfinished time.Time
	// highWater is the high-water the root and every shard hold.
	highWater time.Time
	// parts is the looks to come, by the period of the part they go in.
	parts map[time.Time][]scheduleItem
	// dropEnded is the format 5 end-time entries of rows gone or never to be removed.
	dropEnded []indexEntry
	// removals are the voids and subject records judged removable (removeAll).
	removals []removal

	subjectsKept, subjectsRemoved int
}

// seenRow is a row a cleanup pass read, tallied once its batch is applied (a row the batch
// removed is not counted as kept).
type seenRow struct {
	key ledger.Key
	row *ledger.Row
}

// removal is an object judged removable from the version read; done is told whether it was
// removed, or written again since (and kept).
type removal struct {
	name, version string
	done          func(removed bool)
}

// removeAll removes what the pass judged removable besides rows, each by the version judged,
// with the history below it: every object's versions are listed; where the judged version is
// still the latest, the older ones are deleted first (so that none becomes current again), then
// the judged ones, a request for each round whatever their number. A version written after the
// judgement is newer, and no delete names it.
func (p *pass) removeAll(ctx context.Context) error {
	var older, judged []versionRef
	var removed []removal
	for _, r := range p.removals {
		vs, err := p.l.s.versions(ctx, r.name)
		if err != nil {
			return err
		}
		found, latest := false, false
		for _, v := range vs {
			if v.id == r.version {
				found, latest = true, v.latest
			}
		}
		switch {
		case !found:
			r.done(true) // removed before
			continue
		case !latest:
			r.done(false)
			continue
		}
		for _, v := range vs {
			if v.id != r.version {
				older = append(older, versionRef{r.name, v.id})
			}
		}
		judged = append(judged, versionRef{r.name, r.version})
		removed = append(removed, r)
	}
	refused, err := p.l.s.deleteVersions(ctx, older)
	if err != nil {
		return err
	}
	// An object some older version of which the store would not delete keeps its judged
	// version too: that older one would become current.
	more, err := p.l.s.deleteVersions(ctx, without(judged, refused))
	if err != nil {
		return err
	}
	for _, r := range removed {
		if e := cmp.Or(refused[r.name], more[r.name]); e != nil {
			p.tally.Damage(p.l.s.key(r.name), e) // kept, reported, and looked at again
			r.done(false)
			continue
		}
		r.done(true)
	}
	return nil
}

// listBatch lists the versions of each row the batch is to remove: a row whose judged version
// is not the latest any more (written again since, or removed) leaves the batch, and one that
// was written again is looked at again. What is left can be removed: the versions below the
// judged one are deleted first (listed now: no older version appears later).
func (p *pass) listBatch(ctx context.Context) error {
	kept := p.batch.Entries[:0]
	for _, e := range p.batch.Entries {
		vs, err := p.l.s.versions(ctx, rowName(e.Key))
		if err != nil {
			return err
		}
		found, latest := false, false
		for _, v := range vs {
			if v.id == e.Version {
				found, latest = true, v.latest
			}
		}
		if !found || !latest {
			for _, x := range e.Indexes {
				p.dropEnded = append(p.dropEnded, indexEntry{name: x.Name, versions: x.Versions})
			}
			if found {
				p.later("look", e.Key.String(), p.now)
			}
			continue
		}
		e.Listed = true
		for _, v := range vs {
			if v.id != e.Version {
				e.Older = append(e.Older, v.id)
			}
		}
		kept = append(kept, e)
	}
	p.batch.Entries = kept
	return nil
}

// candidate is a row found removable: the version judged, its evaluation, shard and retention
// end, with the format 5 end-time entries that named it.
type candidate struct {
	key     ledger.Key
	version string
	eval    string
	shard   int
	end     time.Time
	idx     []indexEntry
}

// recountAndDecide recounts every shard (judging the admissions whose keys the pass read from what it
// read), then decides what waited on it: a removable row joins the batch unless an admission of
// its key is not recounted (its slot is recountAndDecide's to give back: a slot is released by the
// batch or by recountAndDecide, never by both), and a reservation found abandoned is voided unless
// its admission is still pending.
func (p *pass) recountAndDecide(ctx context.Context) error {
	l := p.l
	removable := p.removable
	// Before a row is removed or a reservation voided, whether an admission of the key is
	// pending is known from every shard. Otherwise only the shards of the keys the pass read
	// are recounted (an admission's entry is in its key's home shard unless that one was full; an
	// entry elsewhere is recounted by the next full recount, or by admissions).
	var only map[int]bool
	if len(removable) == 0 && len(p.voidable) == 0 {
		only = map[int]bool{}
		for key := range p.states {
			only[l.homeShard(key)] = true
		}
	}
	if only == nil || len(only) > 0 {
		pend, used, shards, err := l.recountAll(ctx, p.now, p.states, only)
		if err != nil {
			return err
		}
		p.pending, p.shards = pend, shards
		if only == nil {
			p.used, p.counted = used, true
		}
	}
	for _, c := range removable {
		key := c.key
		if p.pending[key] {
			p.dropEnded = append(p.dropEnded, c.idx...)
			p.later("remove", key.String(), p.now.Add(l.cfg.PendingGrace))
			continue
		}
		p.chosen[key] = true
		e := batchEntry{Key: key, EvaluationID: c.eval, Shard: c.shard, Version: c.version}
		for _, x := range c.idx {
			e.Indexes = append(e.Indexes, indexData{Name: x.name, Versions: x.versions})
		}
		p.batch.Entries = append(p.batch.Entries, e)
	}
	for _, key := range p.voidable {
		ks := p.states[key]
		if p.pending[key] {
			p.later("look", key.String(), p.now.Add(l.cfg.PendingGrace))
			continue
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
		p.later("look", key.String(), p.now) // the void is judged by the next pass
	}
	return nil
}

// later schedules a look of kind at key (a row's key, or a subject record's) no sooner than at.
func (p *pass) later(kind, key string, at time.Time) {
	p.schedule(scheduleItem{Kind: kind, Key: key, At: at.UnixNano()})
}

// schedule adds a look to the schedule. Looks are gathered into parts by period
// (schedulePeriod), so that a pass writes few parts.
func (p *pass) schedule(it scheduleItem) {
	bucket := time.Unix(0, it.At).Truncate(schedulePeriod)
	if p.parts == nil {
		p.parts = map[time.Time][]scheduleItem{}
	}
	p.parts[bucket] = append(p.parts[bucket], it)
}

// writeSchedule writes the looks to come that are not written yet, one part per period (at
// most CleanupBatch looks a part), each under a name of its own, due at its earliest look: the
// pass that reads it does what is due then, and schedules the rest again.
func (p *pass) writeSchedule(ctx context.Context) error {
	defer func() { p.parts = nil }() // written, or the pass ends with an error
	buckets := make([]time.Time, 0, len(p.parts))
	for b := range p.parts {
		buckets = append(buckets, b)
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].Before(buckets[j]) })
	for _, b := range buckets {
		items := p.parts[b]
		sort.Slice(items, func(i, j int) bool { return items[i].At < items[j].At })
		for len(items) > 0 {
			n := min(len(items), p.l.cfg.CleanupBatch)
			id, err := p.l.token()
			if err != nil {
				return err
			}
			body, _, err := p.l.encode(kindSchedule, scheduleData{Items: items[:n]})
			if err != nil {
				return err
			}
			name := fmt.Sprintf("%s%020d-p%s", duePrefix, max(items[0].At, 0), id)
			if err := p.l.s.putPlain(ctx, name, body); err != nil {
				return fmt.Errorf("schedule: %w", err)
			}
			items = items[n:]
		}
	}
	return nil
}

// item carries out one look of the schedule.
func (p *pass) item(ctx context.Context, it scheduleItem) error {
	switch it.Kind {
	case "look", "remove":
		key, err := ledger.ParseKey(it.Key)
		if err != nil {
			return nil
		}
		if it.Kind == "remove" && it.Version != "" && !p.looked["r"+it.Key] {
			// Judged removable from then on, if the version judged is still the latest: the
			// batch lists its versions before it is written.
			p.looked["r"+it.Key] = true
			p.removable = append(p.removable, candidate{key: key, version: it.Version, eval: it.Evaluation, shard: it.Shard,
				end: time.Unix(0, it.End).UTC()})
			return nil
		}
		return p.lookRow(ctx, it.Kind, key, nil)
	case "subject":
		k, err := ledger.ParseSubjectKey(it.Key)
		if err != nil {
			return nil
		}
		return p.subject(ctx, k)
	}
	return nil
}

// keyAged reports whether every request that could recreate the reservation a row was made
// over has expired.
func (p *pass) keyAged(rd *rowData) bool {
	return !p.now.Before(p.keyAgedAt(rd))
}

// keyAgedAt is when keyAged becomes true.
func (p *pass) keyAgedAt(rd *rowData) time.Time {
	at := rd.ReservedAt
	if at == 0 {
		at = rd.Row.CreatedAt.UnixNano() // format 1: the row's own creation
	}
	return time.Unix(0, at).Add(p.l.cfg.RequestLife + time.Nanosecond)
}

// DefaultRequestLife is how long after it was signed a request can still land: S3 refuses a SigV4
// request whose signing time is more than 15 minutes from its own clock. The SDK signs with the
// host's wall clock corrected by the last skew it measured; a host clock that stepped up to 15
// minutes ahead since can sign a request the store still takes 15 minutes later: 30 minutes,
// and a minute of margin for the store's nodes' disagreement (which the ledger assumes within
// 10 seconds: docs/s3-ledger.md). Nothing is forgotten sooner than that after a write to it
// (see Config.RequestLife, ledger.SubjectRecord.Forgettable).
const DefaultRequestLife = 31 * time.Minute

// readingsApart is how far behind cleanup's reading of the store's clock another handle's
// reading may be, through another node: a record forgotten at cleanup's now may be made anew
// by a handle reading up to this much earlier (ledger.SubjectRecord.Forgettable's behind). The
// nodes agree within 10 seconds (docs/s3-ledger.md); a handle's estimate lags its node by up
// to a second and the answer's transit, and one whose node stepped back is ahead by the step:
// a minute, the margin DefaultRequestLife also carries for two readings of the store's clock.
const readingsApart = time.Minute

// lookRow looks at key: a finished row past its retention joins the batch; an unfinished one is
// tallied (a stranded one reported) and looked at again StrandedAfter later; a reservation is
// tidied; anything that can still become removable is scheduled for when it can. idx are the
// format 5 end-time entries that named the key. kind is "look" for a first look or one at an
// unfinished row ("remove" looks at a row finished before): a first look at a finished row
// schedules the subject records it was published to.
func (p *pass) lookRow(ctx context.Context, kind string, key ledger.Key, idx []indexEntry) error {
	l := p.l
	if p.looked["r"+key.String()] {
		p.dropEnded = append(p.dropEnded, idx...) // looked at once in this pass already
		return nil
	}
	p.looked["r"+key.String()] = true
	ks, err := l.readKey(ctx, key)
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		return err
	}
	// Unless the row joins the batch (its end-time entries go with it), what the schedule
	// says from here on is all that points to it.
	chosen := false
	defer func() {
		if !chosen {
			p.dropEnded = append(p.dropEnded, idx...)
		}
	}()
	if err != nil {
		p.tally.Damage(l.s.key(rowName(key)), err)
		if p.damagedKeys == nil {
			p.damagedKeys = map[ledger.Key]bool{}
		}
		p.damagedKeys[key] = true
		p.later("look", key.String(), p.now.Add(recheck))
		return nil
	}
	if p.states == nil {
		p.states = map[ledger.Key]keyState{}
	}
	p.states[key] = ks
	switch {
	case ks.absent():
		return nil // gone: a later admission of the key writes its own entry
	case ks.res != nil:
		return p.reservation(ctx, key, ks)
	}
	rd := ks.row
	row := &rd.Row
	p.read = append(p.read, seenRow{key: key, row: row})
	if !row.State.Terminal() {
		// It can still become done: looked at again when it would be stranded, or, stranded
		// now (and reported), StrandedAfter later.
		at := ledger.MaxTime(row.UpdatedAt, row.NotBefore, row.LeaseUntil).Add(l.cfg.StrandedAfter)
		if !at.After(p.now) {
			at = p.now.Add(l.cfg.StrandedAfter)
		}
		p.later("look", key.String(), at)
		return nil
	}
	if kind == "look" {
		for _, s := range rd.Subjects {
			order := ledger.Order{Key: key, EventAt: row.EventAt, AdmittedAt: row.CreatedAt}
			p.later("subject", s.String(), ledger.MaxTime(p.now, order.At().Add(l.cfg.Limits.SubjectHorizon()+readingsApart)))
		}
	}
	switch {
	case row.Permanent:
		return nil // never removed: nothing more to look at
	case !row.Removable(p.now) || !p.keyAged(rd):
		// Removed at the end of its retention (and of its key's age) if this version is still
		// the latest then: nothing is read again but the list of its versions. Removals are
		// gathered at whole periods of HighWaterEvery, so that the high-water, persisted before
		// any row goes, is written about once a period.
		at := ledger.MaxTime(row.RetainUntil.Add(time.Nanosecond), p.keyAgedAt(rd))
		if every := l.cfg.HighWaterEvery; every > 0 {
			at = at.Add(every - 1).Truncate(every)
		}
		p.schedule(scheduleItem{Kind: "remove", Key: key.String(), At: at.UnixNano(),
			Version: ks.version, Evaluation: row.EvaluationID, Shard: rd.Shard, End: row.RetainUntil.UnixNano()})
		return nil
	}
	chosen = true // its entries go with it, into the batch or back to dropEnded (recount)
	p.removable = append(p.removable, candidate{key: key, version: ks.version, eval: row.EvaluationID, shard: rd.Shard,
		end: row.RetainUntil, idx: idx})
	return nil
}

// reservation tidies away a reservation no admission can use any more. One older than the
// grace with no pending entry is voided (by a conditional write) and looked at again; a void is
// removed, by version (a reservation or row written after it was read survives), when it says
// no row write can wait on the key (NoRowWrite), or voidLife after it was written; until then
// it is looked at again then.
func (p *pass) reservation(ctx context.Context, key ledger.Key, ks keyState) error {
	l := p.l
	res := ks.res
	if !res.Void {
		if grace := time.Unix(0, res.At).Add(l.cfg.PendingGrace); !p.now.After(grace) {
			p.later("look", key.String(), grace.Add(time.Second))
			return nil
		}
		p.voidable = append(p.voidable, key) // unless its admission is pending (recount)
		return nil
	}
	if end := ledger.MaxTime(time.Unix(0, res.VoidedAt), ks.modified).Add(voidLife); !res.NoRowWrite && !p.now.After(end) {
		p.later("look", key.String(), end.Add(time.Second))
		return nil
	}
	p.removals = append(p.removals, removal{name: rowName(key), version: ks.version, done: func(removed bool) {
		if !removed {
			p.later("look", key.String(), p.now) // written again since it was read
		}
	}})
	return nil
}

// subject judges one subject record: removed by the version read when no verdict and no write
// can land on it any more, else looked at again when it can be.
func (p *pass) subject(ctx context.Context, k ledger.SubjectKey) error {
	l := p.l
	if p.looked["s"+k.String()] {
		return nil
	}
	p.looked["s"+k.String()] = true
	name := subjectName(k)
	rec, o, exists, err := l.readSubject(ctx, k)
	switch {
	case errors.Is(err, ledger.ErrCorrupt):
		p.tally.Damage(l.s.key(name), err)
		p.subjectsKept++
		p.later("subject", k.String(), p.now.Add(recheck))
		return nil
	case err != nil:
		return err
	case !exists:
		return nil
	}
	// The newest verdict's row matters only while it may still post: once that verdict is
	// known to stand, its row has nothing to post that a record made anew would not let it
	// (it reads back, and finds itself standing), and is not read.
	var newest *ledger.Row
	if rec.NewestMatters() {
		rd, _, err := l.getRow(ctx, rec.Newest.Key)
		switch {
		case err == nil:
			newest = &rd.Row
		case !errors.Is(err, ledger.ErrUnknownDelivery):
			// Its newest verdict's row cannot be read: kept, and the row reported by its
			// own look.
			p.subjectsKept++
			p.later("subject", k.String(), p.now.Add(recheck))
			return nil
		}
	}
	horizon := l.cfg.Limits.SubjectHorizon()
	if rec.Forgettable(p.now, horizon, newest, readingsApart, l.cfg.RequestLife, rec.UpdatedAt, o.modified) {
		p.removals = append(p.removals, removal{name: name, version: o.version, done: func(removed bool) {
			if removed {
				p.subjectsRemoved++
				return
			}
			p.subjectsKept++ // changed since it was judged: judged again
			p.later("subject", k.String(), p.now)
		}})
		return nil
	}
	p.subjectsKept++
	// When it can be removed, unless its newest verdict's row holds it (not finished, or
	// abandoned and revivable): then it is looked at again a while later.
	at, ok := rec.ForgettableAfter(horizon, readingsApart, l.cfg.RequestLife, rec.UpdatedAt, o.modified)
	if at = at.Add(time.Second); !ok || !at.After(p.now) {
		at = p.now.Add(recheck)
	}
	p.later("subject", k.String(), at)
	return nil
}

// applyBatch removes the batch's rows and releases their slots, then marks the batch done. The
// maintenance lease is checked by fence before the first delete and again before the release.
// Every step can be repeated: a row counts as removed by the batch when the version it judged
// is gone and the key holds nothing of that evaluation any more, and each shard records the
// last batch it applied, so a batch releases each slot once however often it is applied.
func (l *Ledger) applyBatch(ctx context.Context, b *batchData, tag string, lease maintenanceData, gone map[ledger.Key]bool,
	refused map[string]error) (string, error) {
	if gone == nil {
		gone = map[ledger.Key]bool{}
	}
	if err := l.checkMaintenance(ctx, lease); err != nil {
		return tag, err
	}
	released := map[int]int64{}
	// Rows listed when the batch was written: every older version first, then every judged
	// one, a request for each round whatever their number.
	var older, judged []versionRef
	for _, e := range b.Entries {
		if !e.Listed {
			continue
		}
		for _, v := range e.Older {
			older = append(older, versionRef{rowName(e.Key), v})
		}
		judged = append(judged, versionRef{rowName(e.Key), e.Version})
	}
	// A row some version of which the store will not delete is kept as it is (an older
	// version left would become current were the judged one deleted), and found not gone
	// below: the rest of the batch goes on.
	notDeleted, err := l.s.deleteVersions(ctx, older)
	if err != nil {
		return tag, err
	}
	more, err := l.s.deleteVersions(ctx, without(judged, notDeleted))
	if err != nil {
		return tag, err
	}
	for _, m := range []map[string]error{notDeleted, more} {
		for name, e := range m {
			if refused != nil {
				refused[name] = e
			}
		}
	}
	for _, e := range b.Entries {
		var g bool
		var err error
		if e.Listed {
			g, err = l.removedRow(ctx, e)
		} else {
			g, err = l.removeRow(ctx, e)
		}
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

// removedRow reports whether a batch row whose versions were deleted is gone: nothing of its
// evaluation left at the key (a re-admission that lengthened its retention after the listing
// wrote a newer version, which no delete named), and drops its index entries then.
func (l *Ledger) removedRow(ctx context.Context, e batchEntry) (bool, error) {
	l.forget(e.Key)
	ks, err := l.readKey(ctx, e.Key)
	if err != nil {
		return false, err
	}
	if ks.row != nil && ks.row.Row.EvaluationID == e.EvaluationID {
		return false, nil
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
