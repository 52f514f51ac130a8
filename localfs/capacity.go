package localfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Capacity is sharded like the rows: shard XX's record is rows/XX/capacity.state, guarded by
// row shard XX's lock. An admission (admit.go) takes a slot from its key's home shard under the
// one lock it takes anyway, and looks at the others (reading their records without locks, then
// locking the chosen one) only when that one is full, so Full means every shard is full. A row
// records the shard whose slot it holds; cleanup gives the slot back there.
//
// A count may overstate the rows holding its slots, never understate them: the record, with
// the key pending, is written in place and synced before the row is renamed into place, so a
// crash leaves the count without the row (recounted below), never the row without the count.

// readShard reads capacity shard s's record. A read without the shard's lock can see both
// copies torn by an in-place write in progress, so a record that does not decode is read again
// a few times (a writer holds the lock for one write and one sync) before it is called damaged.
func (r *root) readShard(s int) (shardState, error) {
	p := r.shardCapPath(s)
	for attempt := 0; ; attempt++ {
		sh, exists, err := readFile(r, p, decodeShardFile)
		switch {
		case errors.Is(err, ledger.ErrCorrupt) && attempt < 5:
			time.Sleep(time.Millisecond << attempt)
			continue
		case err != nil:
			return shardState{}, err
		case !exists:
			return shardState{}, fmt.Errorf("%w: %s is missing: the capacity record cannot be rebuilt by guessing", ledger.ErrRootMismatch, p)
		case sh.Shard != s:
			return shardState{}, fmt.Errorf("%s: %w: the record of shard %d holds shard %d", p, ledger.ErrCorrupt, s, sh.Shard)
		}
		return sh, nil
	}
}

// stageShard numbers sh as the next record (sh.Seq is the number written) and writes it over
// the shard's file in place, both copies in one write; the caller syncs it (commitAll) under
// the shard's lock. It is a pure overwrite (staged.inPlace): writeShards synced the file's data
// and size before renaming it into place, and every record is 2*shardSlot bytes at offset 0
// (decodeShardFile refuses any other size), so no write changes the file's size or blocks.
func (r *root) stageShard(sh *shardState) (*staged, error) {
	sh.Seq++
	data, err := shardFile(*sh)
	if err != nil {
		return nil, err
	}
	return r.stageAt(r.shardCapPath(sh.Shard), data)
}

// recount judges the shard's pending slots under the shard's lock (no admission that took one
// is in flight). A pending slot whose row (same evaluation id) holds this shard's slot keeps
// it; any other gives it back (the admission never finished, was repeated and took another
// slot, or a later incarnation's row holds a slot of its own), unless an unfinished cleanup
// batch removed that row (the batch gives it back, once). A row that cannot be read keeps its
// slot (an overstatement). It reports whether sh changed.
//
// A row recounting reads may be in the page cache only (its writer died, or its sync failed,
// before the folder sync), and a record, once written, can reach the disk at any time (the
// kernel writes dirty pages back before any sync): a record decided from such a row could reach
// the disk before it, and a power loss would leave a slot counted that nothing names pending,
// lost for good. So a recounting that decides from a row present (dropped because the row holds
// the slot, or given back because a later incarnation's row is there) either runs after a
// syncfs (syncEverything: the sweep, an admission whose home shard is full or whose pending
// list is long) or, in an admission (cautious), decides only from rows this process saw made
// durable (sawDurable), leaving the others pending. A slot given back because its row is
// missing rests on nothing unsynced: a row never renamed into place is not on disk either, and
// a removed one is the batch's. Every record is thus written from durable decisions, so one
// read from the page cache (its writer died before its sync) is a sound base: at worst its own
// changes are lost with it.
func (r *root) recount(sh *shardState, cautious bool) (changed bool, err error) {
	if len(sh.Pending) == 0 {
		return false, nil
	}
	used := sh.Used
	defer func() {
		if err == nil && sh.Used < used {
			err = r.bumpRoom() // room appears: a cached proof of Full is void from now on
		}
	}()
	readBatch := sync.OnceValues(r.readBatch) // read once, if needed
	keep := sh.Pending[:0:0]
	for _, p := range sh.Pending {
		row, err := r.readRow(p.Key)
		switch {
		case err == nil && row.Shard == sh.Shard && p.is(p.Key, row.EvaluationID):
			if cautious && !r.sawDurable(sh.Shard, p) {
				keep = append(keep, p) // its row may be in the page cache only
			}
			continue // the row holds the slot
		case err == nil && cautious:
			keep = append(keep, p) // a later incarnation's row, maybe in the page cache only
		case err == nil || errors.Is(err, ledger.ErrUnknownDelivery):
			batch, err := readBatch()
			if err != nil {
				return false, err
			}
			if batch != nil && batch.ID > sh.AppliedBatch && batch.has(p, sh.Shard) {
				// The batch's release gives the slot back, so it stays counted. The entry goes
				// when recounting in full (after a syncfs), so an unreleased batch does not
				// lengthen the list; one without an evaluation id stays: the release erases one
				// entry standing for the removed row, never another admission's in its place.
				if cautious || p.EvaluationID == "" {
					keep = append(keep, p)
				}
				continue
			}
			if sh.Used > 0 {
				sh.Used--
			}
		case errors.Is(err, ledger.ErrCorrupt):
			keep = append(keep, p)
		default:
			return false, err
		}
	}
	changed = len(keep) < len(sh.Pending)
	sh.Pending = keep
	return changed, nil
}

// maxCautiousPending is how many pending slots an admission's record may hold, its own
// included, after a cautious recounting; a longer list is recounted in full after a syncfs. 3
// entries keep a record within one 512-byte sector (482 bytes with a 9-digit sequence number,
// 4-digit counts and a 5-digit batch id; about 500 with every number at 10 digits), so each
// half of the file is written whole or not at all (format.go).
const maxCautiousPending = 3

// sawDurable reports whether p is the row this process last admitted with a slot of shard s and
// saw made durable: the common pending slot, the previous admission's.
func (r *root) sawDurable(s int, p pendingSlot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.durableSlot[s]
	return d.EvaluationID != "" && d == p
}

// madeDurable records that the row p stands for, holding a slot of shard s, is durable.
func (r *root) madeDurable(s int, p pendingSlot) {
	r.mu.Lock()
	r.durableSlot[s] = p
	r.mu.Unlock()
}

// writeShards makes the 256 row folders and writes the records rec makes as new files: one
// sync for their data, the renames, one sync for the renames. A crash leaves some records or
// none, never a torn one; the caller writes what depends on them (the root state) only after.
func (r *root) writeShards(rec func(s int) shardState) error {
	var sts []*staged
	defer func() { abortAll(sts) }() // what was staged and not committed
	for s := range shardCount {
		if err := r.mkdir(r.shardDirOf(s)); err != nil {
			return err
		}
		data, err := shardFile(rec(s))
		if err != nil {
			return err
		}
		st, err := r.stage(r.shardCapPath(s), data)
		if err != nil {
			return err
		}
		sts = append(sts, st)
	}
	return r.commitAll(sts)
}

// recountShards recounts the pending keys of the given shards, each under its lock. The sweep calls
// it for the folders it lists, so a lap gives back every slot an interrupted admission left with
// no row, even in a shard no admission comes to again; a shard whose pending admissions all
// finished costs reads only (mayGiveBack), so a lap's syncs do not grow with its shards.
func (r *root) recountShards(ctx context.Context, shards []int) error {
	for _, s := range shards {
		sh, err := r.readShard(s)
		if err == nil && r.mayGiveBack(sh) {
			err = r.recountShard(ctx, s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mayGiveBack reports whether recounting sh could give a slot back: some pending slot's row is
// not (or not yet) there holding it. It reads without the lock, so a missing row may be an
// admission in flight: only recounting under the lock decides.
func (r *root) mayGiveBack(sh shardState) bool {
	for _, p := range sh.Pending {
		row, err := r.readRow(p.Key)
		if err != nil || row.Shard != sh.Shard || !p.is(p.Key, row.EvaluationID) {
			return true
		}
	}
	return false
}

func (r *root) recountShard(ctx context.Context, s int) error {
	unlock, err := r.lockShard(ctx, byte(s))
	if err != nil {
		return err
	}
	defer unlock()
	sh, err := r.readShard(s) // again, under the lock: an admission may have changed it
	if err != nil {
		return err
	}
	used := sh.Used
	changed, err := r.recount(&sh, false)
	if err != nil || !changed {
		return err
	}
	r.sync.enter()
	defer r.sync.exit()
	if err := r.sync.syncEverything(); err != nil { // see recount
		return err
	}
	return r.writeShard(&sh, used)
}

// writeShard writes sh as its shard's next record, durably, and shows the room it gained since
// its count was used; the caller holds the shard's lock.
func (r *root) writeShard(sh *shardState, used int64) error {
	st, err := r.stageShard(sh)
	if err == nil {
		err = r.commitAll([]*staged{st})
	}
	if err == nil {
		err = r.roomShown(used, sh.Used)
	}
	return err
}

// roomShown changes the room epoch again once a record that gained room (its count went from
// before to after) is written: a scan between the first change and the write saw every shard
// full under the changed epoch, and its proof of Full must not outlive the room it missed.
func (r *root) roomShown(before, after int64) error {
	if after < before {
		return r.bumpRoom()
	}
	return nil
}

// has reports whether the batch removes the row whose slot p stands for, in shard.
func (b *batchState) has(p pendingSlot, shard int) bool {
	return slices.ContainsFunc(b.Entries, func(e batchEntry) bool {
		return e.Shard == shard && p.is(e.Key, e.EvaluationID)
	})
}

// FullProofLife is how long a process answers Full on the strength of one scan that read every
// shard full, the room epoch unchanged: at most one scan of the 256 records per process per
// FullProofLife under a sustained full root, and at most that long turning deliveries away
// after a release that died between giving room and showing it.
const FullProofLife = time.Minute

// The room epoch (.amiss-room.epoch) changes to a fresh random value before any capacity shard
// gains room (a batch's release, a pending slot given back) and again once the room is written
// (roomShown), so a scan between the two keeps no proof. A process that read every shard full
// keeps the epoch it saw before and after that scan and answers Full without scanning while
// the epoch is the same: one read instead of 256 per refusal of a full root. The file is not
// synced: it orders what live processes see, and a crash that loses it also ends the processes
// that could have kept a proof (EFS loses nothing). An unreadable one proves nothing (every
// refusal scans); none means no room has appeared since the root was made. A release that
// cannot change it fails before any shard shows the room.

func (r *root) roomEpoch() (uint64, bool) {
	data, err := r.fs.ReadFile(r.path(RoomFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true // no room has appeared since the root was made
	}
	_, payload, derr := decodeFrame(kindRoom, data, 64)
	if err != nil || derr != nil || len(payload) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(payload), true
}

// bumpRoom gives the room epoch a fresh value. The caller gives room only if it succeeds.
func (r *root) bumpRoom() error {
	r.mu.Lock()
	r.fullProof = nil
	r.mu.Unlock()
	v, err := r.random8()
	if err != nil {
		return fmt.Errorf("localfs: room epoch: %w", err)
	}
	v[0] |= 1 // never 0, the value of a root that has none yet
	f, err := r.fs.OpenFile(r.path(RoomFile), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return unavailable(err, "open", r.path(RoomFile))
	}
	_, werr := f.WriteAt(encodeFrame(kindRoom, v[:]), 0)
	return unavailable(errors.Join(werr, f.Close()), "write", r.path(RoomFile))
}

// readAllShards reads every capacity shard's record without locks, a few at a time.
func (r *root) readAllShards(ctx context.Context) ([]shardState, error) {
	out := make([]shardState, shardCount)
	errs := make([]error, shardCount)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for s := range next {
				out[s], errs[s] = r.readShard(s)
			}
		})
	}
	for s := range shardCount {
		if ctx.Err() != nil {
			break
		}
		next <- s
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ledger.ErrBusy, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// capacityUsed sums the shards' counts.
func (r *root) capacityUsed(ctx context.Context) (int64, []shardState, error) {
	states, err := r.readAllShards(ctx)
	if err != nil {
		return 0, nil, err
	}
	total := int64(0)
	for _, sh := range states {
		total += sh.Used
	}
	return total, states, nil
}

func (r *root) shardCapPath(s int) string {
	return filepath.Join(r.shardDirOf(s), ShardCapacityFile)
}

// readBatch returns the cleanup batch record, or nil when there is none.
func (r *root) readBatch() (*batchState, error) {
	b, exists, err := readFile(r, r.path(BatchFile), decodeBatch)
	if !exists || err != nil {
		return nil, err
	}
	return &b, nil
}
