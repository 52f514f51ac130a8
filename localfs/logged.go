package localfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/admlog"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Logged admission (format 3), on local roots only: where vfs.FlushCoversWriteBack holds (one
// host, one kernel, whose page cache outlives any process that dies). The design, its crash
// argument and the designs that fail are in docs/design/file-ledger-format-3.md; this is its
// implementation.
//
// A process that admits takes a log slot, ROOT/logs/NN.log (admlog), and holds an exclusive
// flock on it while it runs: a slot whose lock is free has a dead owner (or none). An
// admission of a new key, under its shard's lock:
//
//  1. appends an entry naming the capacity shard, the key, the evaluation id and the row's
//     bytes, and waits for the log's group commit (one fdatasync for every entry written
//     before it began);
//  2. writes the capacity record in place, Used + 1 and the slot's mark (Applied) raised to
//     the entry, with no sync;
//  3. writes the row to a temporary file and renames it into place, with no sync.
//
// Nothing of the admission reaches the record or the folder before the entry is durable, so
// after a power loss the entry is the admission's evidence: "is the slot counted?" is the
// record's mark, which only this slot's entries raise, in order; "is the row there?" is its
// folder. Replay (replayLog) resolves each entry of a dead log to one row and one slot.
//
// The owner retires its entries with a checkpoint: it holds off appends, waits until every
// admission that appended has renamed its row, runs syncfs, checks every file it wrote for a
// failed write-back and the journal, and then starts the next generation of its log (a
// durable header). A failure anywhere after an append began poisons the log: the process
// lets the slot go (its entries are then a dead log's, replayed) and admits the format 2 way.
//
// Cleanup never forgets a row that a live entry (of any log) names: replay would bring it
// back and it would be published twice (liveLogKeys).

// LogsDir holds the admission logs of a local root.
const LogsDir = "logs"

const (
	// maxLogSlots bounds the logs of a root, and so the marks a capacity record carries
	// (each copy of a record that carries marks must fit one sector). A process that finds
	// every slot taken admits the format 2 way.
	maxLogSlots = 4
	// DefaultLogBytes is the size of an admission log.
	DefaultLogBytes = 256 << 10
	// checkpointAge is how old the oldest live entry of a log may grow before its owner
	// checkpoints; checkpointFiles how many files written unsynced it may hold open.
	checkpointAge   = time.Second
	checkpointFiles = 2048
	// slotRetry is how long a process that could not take a slot admits the format 2 way
	// before it tries again.
	slotRetry = 5 * time.Second
	// entryVersion is the first byte of an entry's payload.
	entryVersion = 1
)

// The slots held by this process, by file system and path: flock(2) excludes the descriptors
// of one process from each other only when they do not share an open file description, and
// test file systems grant every lock, so the process keeps its own table too.
var (
	heldLogsMu sync.Mutex
	heldLogs   = map[logKey]bool{}
	// ownedLogs are the held logs this process admits with (the others are being replayed).
	ownedLogs = map[logKey]*admLog{}
)

type logKey = lockKey

// admLog is the log slot a process owns.
type admLog struct {
	r    *root
	slot int
	path string
	lock File // the descriptor holding the slot's flock
	log  *admlog.Log

	// mu guards what follows. An admission counts itself in inflight from its append to its
	// rename; a checkpoint (retiring) waits until none is, and holds new ones off, so no
	// entry is retired while its rename is still to come; and a slot given up (dead) is let go
	// (released) only once none is, so no replayer decides an entry before its rename.
	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	retiring bool
	dead     bool
	released bool
	held     []heldFile // files written unsynced since the last checkpoint
	first    time.Time  // when the first entry of this generation was appended (zero: none)
	// noRetire, for tests, makes every checkpoint a no-op: the entries stay live, as those
	// of another process that has not checkpointed yet.
	noRetire bool
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

type heldFile struct {
	f    File
	name string
}

// logEntry is the payload of an admission log entry.
type logEntry struct {
	// Stamp is when the entry was appended, on the host's boot clock (CLOCK_BOOTTIME: one
	// clock for every process of the host, never stepped). Two live entries naming one key
	// are ordered by it: the later admission found the row missing after the earlier one's
	// append (each holds the key's home shard lock from its append to its rename), so the
	// earlier one never renamed its row, and the later one is the admission that counts.
	Stamp uint64
	Shard int
	Key   ledger.Key
	ID    string
	Row   []byte
}

// bootClock reads CLOCK_BOOTTIME in nanoseconds.
func bootClock() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return uint64(ts.Nano())
}

func encodeLogEntry(e logEntry) []byte {
	out := make([]byte, 0, 10+len(e.Key)+1+len(e.ID)+len(e.Row))
	out = append(out, entryVersion)
	out = binary.BigEndian.AppendUint64(out, e.Stamp)
	out = append(out, byte(e.Shard))
	out = append(out, e.Key[:]...)
	out = append(out, byte(len(e.ID)))
	out = append(out, e.ID...)
	return append(out, e.Row...)
}

func decodeLogEntry(p []byte) (logEntry, error) {
	var e logEntry
	if len(p) < 10+len(e.Key)+1 || p[0] != entryVersion {
		return e, fmt.Errorf("%w: an admission log entry of %d bytes does not decode", ledger.ErrCorrupt, len(p))
	}
	e.Stamp = binary.BigEndian.Uint64(p[1:])
	p = p[8:]
	e.Shard = int(p[1])
	copy(e.Key[:], p[2:])
	n := int(p[2+len(e.Key)])
	rest := p[3+len(e.Key):]
	if n == 0 || n > len(rest) {
		return e, fmt.Errorf("%w: an admission log entry with an evaluation id of %d bytes", ledger.ErrCorrupt, n)
	}
	e.ID, e.Row = string(rest[:n]), rest[n:]
	return e, nil
}

func (r *root) logPath(slot int) string {
	return filepath.Join(r.dir, LogsDir, fmt.Sprintf("%02d.log", slot))
}

// admissionLog returns the log this process admits with, taking a slot on first use, or nil
// when admissions go the format 2 way: not a local root, every slot taken, or the last attempt
// failed less than slotRetry ago. It waits briefly for the maintenance lock (a slot is taken
// under it, its dead entries replayed first) and never while a shard lock is held.
func (r *root) admissionLog(ctx context.Context) *admLog {
	if !r.sync.writeBack || r.cfg.NoAdmissionLog {
		return nil
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if a := r.alog; a != nil {
		a.mu.Lock()
		dead := a.dead
		a.mu.Unlock()
		if !dead {
			return a
		}
		r.alog = nil
		a.stopRun()
	}
	if r.closing || time.Since(r.logTried) < slotRetry {
		return nil
	}
	r.logTried = time.Now()
	unlock, err := lockFile(ctx, r.maintenance, 20*time.Millisecond)
	if err != nil {
		return nil // a cleanup pass runs: format 2 for now
	}
	defer unlock()
	a, err := r.takeSlot(ctx)
	if err != nil || a == nil {
		// Every slot taken, or a log that cannot be replayed (cleanup and Open report it,
		// failing closed): the format 2 way, until the next try.
		return nil
	}
	r.alog = a
	heldLogsMu.Lock()
	ownedLogs[keyOf(r.fs, a.path)] = a
	heldLogsMu.Unlock()
	go a.run()
	return a
}

// takeSlot takes the lowest free log slot, holding the maintenance lock: it replays what its
// dead owner left and starts the next generation. It answers nil when every slot is taken.
func (r *root) takeSlot(ctx context.Context) (*admLog, error) {
	dir := r.path(LogsDir)
	if _, err := r.fs.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := r.fs.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: mkdir %s: %v", ledger.ErrUnavailable, dir, err)
		}
		// The folder's name is durable before any log in it is trusted.
		if err := r.sync.syncDirs(r.dir); err != nil {
			return nil, err
		}
	}
	if err := r.replayDeadLogs(ctx); err != nil {
		return nil, err
	}
	for slot := range maxLogSlots {
		p := r.logPath(slot)
		if _, err := r.fs.Stat(p); errors.Is(err, fs.ErrNotExist) {
			// A new log's generation starts above every mark any record holds for its slot,
			// so that none of its entries looks counted by an older one's mark.
			gen, err := r.highestGen(ctx, slot)
			if err != nil {
				return nil, err
			}
			if err := admlog.Create(r.fs, p, r.logBytes(), gen+1); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, err
			}
		}
		lock, ok, err := r.lockLog(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		gen, entries, err := r.readLog(p)
		if err == nil && len(entries) > 0 {
			// Its owner died since the replay above: its entries are replayed with every
			// other dead log's (they may name the same keys), by the next replay.
			r.unlockLog(p, lock)
			continue
		}
		if err != nil {
			r.unlockLog(p, lock)
			return nil, err
		}
		// The next generation: above every one the log was used with (its header keeps the
		// last, as the log is never removed), so no mark left by an earlier one covers an
		// entry of this one.
		lg, err := admlog.Open(r.fs, p, gen+1)
		if err != nil {
			r.unlockLog(p, lock)
			return nil, err
		}
		a := &admLog{r: r, slot: slot, path: p, lock: lock, log: lg,
			kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
		a.cond = sync.NewCond(&a.mu)
		return a, nil
	}
	return nil, nil
}

func (r *root) logBytes() int64 {
	if r.cfg.LogBytes > 0 {
		return r.cfg.LogBytes
	}
	return DefaultLogBytes
}

// highestGen is the highest generation any capacity record marks for slot.
func (r *root) highestGen(ctx context.Context, slot int) (uint64, error) {
	states, err := r.readAllShards(ctx)
	if err != nil {
		return 0, err
	}
	var gen uint64
	for _, sh := range states {
		for _, ms := range [][]logMark{sh.Applied, sh.Replayed} {
			if m, ok := markOf(ms, slot); ok {
				gen = max(gen, m.Gen)
			}
		}
	}
	return gen, nil
}

// lockLog takes the flock of the log at p without waiting: ok is false when its owner lives
// (in this process or another).
func (r *root) lockLog(p string) (File, bool, error) {
	heldLogsMu.Lock()
	defer heldLogsMu.Unlock()
	if heldLogs[keyOf(r.fs, p)] {
		return nil, false, nil
	}
	f, err := r.fs.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, false, fmt.Errorf("%w: open %s: %v", ledger.ErrUnavailable, p, err)
	}
	if err := vfs.Flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%w: flock %s: %v", ledger.ErrUnavailable, p, err)
	}
	heldLogs[keyOf(r.fs, p)] = true
	return f, true, nil
}

func (r *root) unlockLog(p string, f File) {
	heldLogsMu.Lock()
	defer heldLogsMu.Unlock()
	_ = vfs.Flock(f, unix.LOCK_UN)
	f.Close()
	delete(heldLogs, keyOf(r.fs, p))
	delete(ownedLogs, keyOf(r.fs, p))
}

// replayAtOpen replays the dead logs of a root that has any, before the handle is used: after
// a host crash, a row whose rename was lost is back before any operation looks for it.
func (r *root) replayAtOpen(ctx context.Context) error {
	if _, err := r.fs.Stat(r.path(LogsDir)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("open %s: replay the admission logs: %w", r.dir, err)
	}
	defer unlock()
	return r.replayDeadLogs(ctx)
}

// replayDeadLogs replays every log whose owner is dead, holding the maintenance lock (so
// that a process holding it knows every log whose lock is held has a live owner). Open, the
// taking of a slot and every cleanup pass run it. The dead logs are replayed together: two
// of them may name one key, and only the later entry is the admission that counts (see
// logEntry.Stamp). A crash anywhere in it leaves the logs as they were, and the next replay
// resolves the same entries again to the same result (the records' Replayed marks).
func (r *root) replayDeadLogs(ctx context.Context) error {
	type deadLog struct {
		slot    int
		path    string
		lock    File
		gen     uint64
		entries []admlog.Entry
		decoded []logEntry
	}
	var dead []*deadLog
	defer func() {
		for _, d := range dead {
			r.unlockLog(d.path, d.lock)
		}
	}()
	latest := map[ledger.Key]uint64{}
	for slot := range maxLogSlots {
		// A stat per slot, not a listing: an admission that takes a slot lists nothing.
		p := r.logPath(slot)
		if _, err := r.fs.Stat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("%w: stat %s: %v", ledger.ErrUnavailable, p, err)
		}
		lock, ok, err := r.lockLog(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		d := &deadLog{slot: slot, path: p, lock: lock}
		dead = append(dead, d)
		if d.gen, d.entries, err = r.readLog(p); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		for _, e := range d.entries {
			le, err := decodeLogEntry(e.Payload)
			if err != nil {
				return fmt.Errorf("replay %s entry %d: %w", p, e.Seq, err)
			}
			d.decoded = append(d.decoded, le)
			latest[le.Key] = max(latest[le.Key], le.Stamp)
		}
	}
	if len(latest) == 0 {
		return nil
	}
	// What the dead owners wrote and never synced is made durable (or found lost) before any
	// decision rests on it; the decisions rewrite, under this process's own syncs, every row
	// and record they keep as a dead process left it.
	if err := r.sync.syncEverything(); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	for _, d := range dead {
		for i, e := range d.entries {
			le := d.decoded[i]
			if err := r.replayEntry(ctx, d.slot, d.gen, e.Seq, le, le.Stamp < latest[le.Key]); err != nil {
				return fmt.Errorf("replay %s entry %d: %w", d.path, e.Seq, err)
			}
		}
	}
	for _, d := range dead {
		if len(d.entries) == 0 {
			continue
		}
		// Retired: the next generation's header, durable, and no entry of it.
		lg, err := admlog.Open(r.fs, d.path, d.gen+1)
		if err == nil {
			err = lg.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readLog reads the log at p: its generation and its live entries.
func (r *root) readLog(p string) (uint64, []admlog.Entry, error) {
	data, err := r.fs.ReadFile(p)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	gen, entries, err := admlog.Read(data)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", p, err)
	}
	return gen, entries, nil
}

// replayEntry resolves one entry to one row and one slot, holding the locks of the key's
// home shard and of the entry's capacity shard from its decision through its last write:
//
//	the row                          | counted | replay
//	decodes, the entry's id          | yes     | nothing
//	decodes, the entry's id          | no      | counts the slot
//	decodes, another id              | yes     | gives the slot back
//	decodes, another id              | no      | nothing
//	missing, or does not decode      | yes     | writes the row
//	missing, or does not decode      | no      | writes the row, counts the slot
//
// A row still holding the entry's bytes is written again, and the record always is (synced,
// with the entry marked replayed): what the dead process left in the page cache becomes
// durable under a sync whose errors this process hears.
//
// An entry superseded by a later live entry of another dead log naming the same key never
// renamed its row (the later admission found it missing): it is resolved as "another id".
func (r *root) replayEntry(ctx context.Context, slot int, gen, seq uint64, e logEntry, superseded bool) error {
	unlock, err := r.lockShards(ctx, []int{int(e.Key[0]), e.Shard})
	if err != nil {
		return err
	}
	defer unlock()
	sh, err := r.readShard(e.Shard)
	if err != nil {
		return err
	}
	if m, ok := markOf(sh.Replayed, slot); ok && m.covers(gen, seq) {
		return nil // resolved by an earlier replay that did not finish
	}
	m, ok := markOf(sh.Applied, slot)
	counted := ok && m.covers(gen, seq)
	path := r.statePath(e.Key)
	row, rerr := r.readRow(e.Key)
	// The entry's row is what the admission renamed into place: it must decode as that row.
	if want, err := decodeRow(e.Row, r.cfg.Limits); err != nil || want.Key != e.Key || want.EvaluationID != e.ID || want.Shard != e.Shard {
		return fmt.Errorf("%w: the entry's row is not the row it names (%v)", ledger.ErrCorrupt, err)
	}
	count, giveBack, write := false, false, false
	switch {
	case superseded && !(rerr == nil && row.EvaluationID == e.ID):
		giveBack = counted
	case rerr == nil && row.EvaluationID == e.ID:
		count = !counted
		raw, err := r.fs.ReadFile(path)
		write = err == nil && bytes.Equal(raw, e.Row)
	case rerr == nil:
		giveBack = counted // the key was admitted again, with a slot of its own
	case errors.Is(rerr, ledger.ErrUnknownDelivery) || errors.Is(rerr, ledger.ErrCorrupt):
		// The admission's rename was lost, or kept without its data: the entry holds the
		// row as it was answered (no later state of a row is written unsynced).
		count, write = !counted, true
	default:
		return rerr
	}
	if write {
		if err := r.mkdir(filepath.Dir(path)); err != nil {
			return err
		}
		if err := r.replace(path, e.Row, durableFull); err != nil {
			return err
		}
	}
	used := sh.Used
	if giveBack {
		if err := r.bumpRoom(); err != nil {
			return err
		}
		if sh.Used > 0 {
			sh.Used--
		}
	}
	if count {
		sh.Used++ // past the quota, if need be: an answered admission is never refused here
		sh.Applied = raiseMark(sh.Applied, logMark{Slot: slot, Gen: gen, Seq: seq})
	}
	sh.Replayed = raiseMark(sh.Replayed, logMark{Slot: slot, Gen: gen, Seq: seq})
	if err := r.writeRecordSynced(&sh); err != nil {
		return err
	}
	return r.roomShown(used, sh.Used)
}

// writeRecordSynced writes sh as the shard's next record, in place, and syncs it. A record
// too large for one sector once marked is settled in full first (the caller holds the
// shard's lock).
func (r *root) writeRecordSynced(sh *shardState) error {
	r.sync.enter()
	defer r.sync.exit()
	if !fitsSector(*sh) && len(sh.Pending) > 0 {
		if err := r.sync.syncEverything(); err != nil {
			return err
		}
		if _, err := r.settle(sh, false); err != nil {
			return err
		}
	}
	st, err := r.stageShard(sh)
	if err != nil {
		return err
	}
	return r.commitAll([]*staged{st})
}

// fitsSector reports whether sh, with a mark for every slot it could gain, is written as one
// sector per copy.
func fitsSector(sh shardState) bool {
	sh.Seq++
	frame, err := encodeJSON(kindShard, sh)
	return err == nil && len(frame) <= recordSector
}

// admitLogged admits row (data its bytes) with a slot of shard s through the log, the caller
// holding the locks of s and of the key's home shard, sh being s's record as read and settled.
// ok is false when the admission must go the format 2 way instead (nothing was written): the
// log is gone or full, or the record would outgrow one sector.
func (a *admLog) admitLogged(sh *shardState, s int, row ledger.Row, data []byte) (ok bool, err error) {
	r := a.r
	next := *sh
	next.Used++
	next.Pending = append([]pendingSlot(nil), sh.Pending...)
	// The largest mark this slot could write (generations and sequences are far below).
	next.Applied = raiseMark(sh.Applied, logMark{Slot: a.slot, Gen: 1 << 40, Seq: 1 << 30})
	if !fitsSector(next) {
		return false, nil
	}
	if !a.enter() {
		return false, nil
	}
	failed := false
	defer func() { a.exit(failed) }()
	gen := a.log.Generation()
	// Stamped under the home shard's lock, which every admission of the key holds.
	payload := encodeLogEntry(logEntry{Stamp: bootClock(), Shard: s, Key: row.Key, ID: row.EvaluationID, Row: data})
	seq, err := a.log.Append(payload)
	switch {
	case errors.Is(err, admlog.ErrFull):
		a.wake()
		return false, nil
	case errors.Is(err, ledger.ErrTooLarge):
		return false, nil
	case err != nil:
		failed = true
		return true, err
	}
	a.mu.Lock()
	if a.first.IsZero() {
		a.first = time.Now()
	}
	a.mu.Unlock()
	next.Applied = raiseMark(sh.Applied, logMark{Slot: a.slot, Gen: gen, Seq: seq})
	// A replay mark of an older generation of this slot is spent: that log was retired.
	next.Replayed = dropMark(sh.Replayed, a.slot, gen)
	capSt, err := r.stageShard(&next)
	if err != nil {
		failed = true
		return true, err
	}
	a.hold(capSt.f, capSt.name())
	capSt.f = nil
	rowSt, err := r.stage(r.statePath(row.Key), data)
	if err != nil {
		failed = true
		return true, err
	}
	f, name := rowSt.f, rowSt.name()
	rowSt.f = nil // kept open until the checkpoint checks its write-back
	a.hold(f, name)
	if err := r.fs.Rename(rowSt.tmp, rowSt.path); err != nil {
		r.fs.Remove(rowSt.tmp)
		failed = true
		return true, fmt.Errorf("%w: rename %s: %v", ledger.ErrUnavailable, rowSt.path, err)
	}
	*sh = next
	return true, nil
}

func (a *admLog) hold(f File, name string) {
	a.mu.Lock()
	a.held = append(a.held, heldFile{f: f, name: name})
	n := len(a.held)
	a.mu.Unlock()
	if n >= checkpointFiles {
		a.wake()
	}
}

func (a *admLog) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// stopRun stops the checkpointer of a given-up slot.
func (a *admLog) stopRun() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

// run checkpoints the log when its oldest live entry is checkpointAge old, when it is three
// quarters full or holds checkpointFiles open files, and when an append found it full.
func (a *admLog) run() {
	defer close(a.done)
	tick := time.NewTicker(checkpointAge / 4)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.kick:
		case <-tick.C:
			a.mu.Lock()
			due := !a.first.IsZero() && time.Since(a.first) >= checkpointAge ||
				len(a.held) >= checkpointFiles || a.log.Used() >= a.log.Size()/4*3
			a.mu.Unlock()
			if !due {
				continue
			}
		}
		if err := a.checkpoint(); err != nil {
			return
		}
	}
}

// enter counts an admission in, waiting while a checkpoint runs; false: the slot is given up.
func (a *admLog) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.retiring && !a.dead {
		a.cond.Wait()
	}
	if a.dead {
		return false
	}
	a.inflight++
	return true
}

// exit counts an admission out; failed gives the slot up (any failure once an append began
// leaves unknown what reached the disk). The last admission out of a given-up slot lets it go.
func (a *admLog) exit(failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	if failed {
		a.dead = true
	}
	a.releaseLocked()
	a.cond.Broadcast()
}

// releaseLocked lets a given-up slot go once no admission is between its append and its
// rename: its entries are then a dead owner's, replayed by the next Open or cleanup pass (or
// by this process, when it takes a slot again).
func (a *admLog) releaseLocked() {
	if !a.dead || a.released || a.inflight > 0 || a.retiring {
		return
	}
	a.released = true
	for _, h := range a.held {
		h.f.Close()
	}
	a.held = nil
	a.log.Close()
	a.r.unlockLog(a.path, a.lock)
}

// checkpoint retires the log's entries once the file system holds what they describe: no
// append runs, every admission that appended has renamed its row, a syncfs has returned, no
// file written since the last checkpoint failed its write-back, and the journal commits. A
// failure gives the slot up.
func (a *admLog) checkpoint() error {
	a.mu.Lock()
	for a.retiring {
		a.cond.Wait()
	}
	if a.dead {
		a.mu.Unlock()
		return errors.New("localfs: the admission log was given up")
	}
	if a.noRetire {
		a.mu.Unlock()
		return nil
	}
	a.retiring = true
	for a.inflight > 0 {
		a.cond.Wait()
	}
	idle := a.first.IsZero() && len(a.held) == 0
	held := a.held
	a.held, a.first = nil, time.Time{}
	a.mu.Unlock()
	var err error
	if !idle {
		err = a.retire(held)
	}
	a.mu.Lock()
	a.retiring = false
	if err != nil {
		a.dead = true
	}
	a.releaseLocked()
	a.cond.Broadcast()
	a.mu.Unlock()
	return err
}

func (a *admLog) retire(held []heldFile) error {
	err := a.r.sync.syncEverything()
	for _, h := range held {
		if err == nil {
			if werr := vfs.CheckWriteback(h.f); werr != nil {
				err = fmt.Errorf("%w: write-back of %s failed: %v", ledger.ErrUnavailable, h.name, werr)
			}
		}
		h.f.Close()
	}
	if err != nil {
		return err
	}
	return a.log.Reset(a.log.Generation() + 1)
}

// shutdown stops the checkpointer, retires the log (a clean shutdown leaves no live entry)
// and lets the slot go.
func (a *admLog) shutdown() {
	a.stopRun()
	a.checkpoint()
	a.mu.Lock()
	a.dead = true
	a.releaseLocked()
	a.mu.Unlock()
}

// checkpointOwn retires the logs this process owns on the root (any handle's), so that their
// rows are not held back from cleanup by entries the process can retire itself. A failure
// gives that slot up (its entries are then replayed).
func (r *root) checkpointOwn() {
	prefix := r.path(LogsDir) + string(filepath.Separator)
	var mine []*admLog
	heldLogsMu.Lock()
	for k, a := range ownedLogs {
		if strings.HasPrefix(k.path, prefix) { // any handle of this process (checkpointing is always safe)
			mine = append(mine, a)
		}
	}
	heldLogsMu.Unlock()
	for _, a := range mine {
		_ = a.checkpoint()
	}
}

// logKeys adds to keys those the live entries of the log at p name. A log whose owner lives
// is read as it is being written (admlog.ReadLive: what the read stops short of names rows
// admitted after it began, or was retired by a durable header); one whose lock this process
// can take (its owner died since the replay) is read whole, and its damage fails the pass.
func (r *root) logKeys(p string, keys map[ledger.Key]bool) error {
	lock, free, err := r.lockLog(p)
	if err != nil {
		return err
	}
	if free {
		defer r.unlockLog(p, lock)
	}
	read := admlog.ReadLive
	if free {
		read = admlog.Read
	}
	var entries []admlog.Entry
	for attempt := 0; ; attempt++ {
		f, err := r.fs.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			return fmt.Errorf("%w: open %s: %v", ledger.ErrUnavailable, p, err)
		}
		data, err := r.fs.ReadFile(p)
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
		}
		if _, entries, err = read(data); err == nil {
			break
		}
		// A live owner's header can be read torn by its checkpoint rewriting it (read(2) is
		// not atomic against a write of the same page): read again before calling it damage.
		if free || attempt >= 5 {
			// A damaged log may name any row: forget nothing until it is dealt with.
			return fmt.Errorf("%s: %w", p, err)
		}
		time.Sleep(time.Millisecond << attempt)
	}
	for _, e := range entries {
		le, err := decodeLogEntry(e.Payload)
		if err != nil {
			return fmt.Errorf("%s entry %d: %w", p, e.Seq, err)
		}
		keys[le.Key] = true
	}
	return nil
}

// liveLogKeys reads every admission log, live and dead, and returns the keys their live
// entries name: cleanup never forgets those rows (a replay would bring one back). Each log
// read is synced afterwards, so a header that retired entries, read from the page cache, is
// durable before any row is removed on its strength.
func (r *root) liveLogKeys() (map[ledger.Key]bool, error) {
	names, err := r.fs.ReadDir(r.path(LogsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.path(LogsDir), err)
	}
	keys := map[ledger.Key]bool{}
	for _, n := range names {
		if !strings.HasSuffix(n.Name(), ".log") {
			continue
		}
		if err := r.logKeys(filepath.Join(r.path(LogsDir), n.Name()), keys); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
