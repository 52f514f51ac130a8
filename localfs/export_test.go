package localfs

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// HoldLockForTest takes the named lock of the root in dir as another holder would, until
// release is called (release may be called more than once).
func HoldLockForTest(ctx context.Context, dir, name string) (func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	l, err := acquireRef(OSFS{}, filepath.Join(abs, name))
	if err != nil {
		return nil, err
	}
	if err := l.lock(ctx, time.Second); err != nil {
		l.unref()
		return nil, err
	}
	released := false
	return func() {
		if !released {
			released = true
			l.unlock()
			l.unref()
		}
	}, nil
}

// HoldMaintenanceForTest takes the maintenance lock.
func HoldMaintenanceForTest(ctx context.Context, dir string) (func(), error) {
	return HoldLockForTest(ctx, dir, MaintenanceLock)
}

// HoldRowLockForTest takes the row-shard lock of key.
func HoldRowLockForTest(ctx context.Context, dir string, key ledger.Key) (func(), error) {
	return HoldLockForTest(ctx, dir, fmt.Sprintf(".amiss-row-%02x.lock", key[0]))
}

// ReframeForTest rewrites a frame's version, with a valid checksum.
func ReframeForTest(data []byte, version uint16) []byte {
	k := kind(data[len(frameMagic)])
	_, payload, err := decodeFrame(k, data, 1<<30)
	if err != nil {
		panic(err)
	}
	return encodeFrameVersion(k, version, payload)
}

// SetSyncGatherForTest makes every group-commit round of l's root wait (up to wait) until n
// requests are in it, so that a round of several is certain.
func SetSyncGatherForTest(l *Ledger, n int, wait time.Duration) {
	l.r.sync.gather, l.r.sync.gatherWait = n, wait
}

// SetWriteBackForTest turns the one-flush round of a lone admission on or off
// (vfs.FlushCoversWriteBack decides it when the root is opened); it reports what it was.
func SetWriteBackForTest(l *Ledger, on bool) (was bool) {
	was, l.r.sync.writeBack = l.r.sync.writeBack, on
	return was
}

// SetAfterSyncForTest runs f after each group-commit round's sync, before its callers are
// answered (f receives the number of requests in the round).
func SetAfterSyncForTest(l *Ledger, f func(n int)) { l.r.sync.afterSync = f }

// FrameVersionForTest returns the format version a file's frame carries.
func FrameVersionForTest(data []byte) uint16 {
	return uint16(data[len(frameMagic)+1])<<8 | uint16(data[len(frameMagic)+2])
}

// ReframeShardForTest rewrites both copies of a capacity shard file with another version.
func ReframeShardForTest(data []byte, version uint16) []byte {
	out := append([]byte(nil), data...)
	for i := range 2 {
		half := out[i*shardSlot : (i+1)*shardSlot]
		n := int(uint32(half[len(frameMagic)+3])<<24 | uint32(half[len(frameMagic)+4])<<16 | uint32(half[len(frameMagic)+5])<<8 | uint32(half[len(frameMagic)+6]))
		copy(half, ReframeForTest(half[:frameOverhead+n], version))
	}
	return out
}

// ShardSlotForTest is the size of one copy of a capacity shard record.
const ShardSlotForTest = shardSlot

// BumpRoomForTest changes the room epoch, as a release does before it gives room.
func BumpRoomForTest(l *Ledger) error { return l.r.bumpRoom() }

// ReleaseWithoutShowingForTest removes key's row and gives its slot back to its shard, durably,
// without changing the room epoch afterwards: what a release leaves when its process dies
// between writing the shard's record and the epoch's second change.
func ReleaseWithoutShowingForTest(ctx context.Context, l *Ledger, key ledger.Key) error {
	r := l.r
	row, err := r.readRow(key)
	if err != nil {
		return err
	}
	unlock, err := r.lockShards(ctx, []int{int(key[0]), row.Shard})
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.fs.Remove(r.statePath(key)); err != nil {
		return err
	}
	if err := r.fs.SyncFS(r.dir); err != nil {
		return err
	}
	sh, err := r.readShard(row.Shard)
	if err != nil {
		return err
	}
	sh.Used--
	st, err := r.stageShard(&sh)
	if err != nil {
		return err
	}
	return r.commitAll([]*staged{st})
}

// RecountAllForTest recounts every capacity shard's pending slots, as admissions into each shard
// would: the records then name none of the rows that exist as pending.
func RecountAllForTest(ctx context.Context, l *Ledger) error {
	for s := range shardCount {
		if err := l.r.recountShard(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// PendingForTest reports how many pending slots capacity shard s's record holds.
func PendingForTest(l *Ledger, s int) (int, error) {
	sh, err := l.r.readShard(s)
	return len(sh.Pending), err
}

// SubjectFileForTest is the file of subject record k in the root at dir.
func SubjectFileForTest(dir string, k ledger.SubjectKey) string {
	return filepath.Join(dir, SubjectsDir, shardName(int(k[0])), k.String()+".state")
}

// EncodeSubjectForTest frames rec as a subject record file, whatever it holds: the file a
// build that wrote such a record would leave.
func EncodeSubjectForTest(rec ledger.SubjectRecord) ([]byte, error) {
	return encodeJSON(kindSubject, &rec)
}
