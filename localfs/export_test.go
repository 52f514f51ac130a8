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

// SetAfterSyncForTest runs f after each group-commit round's sync, before its callers are
// answered (f receives the number of requests in the round).
func SetAfterSyncForTest(l *Ledger, f func(n int)) { l.r.sync.afterSync = f }
