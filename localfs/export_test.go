package localfs

import (
	"context"
	"path/filepath"
	"time"
)

// HoldMaintenanceForTest takes the maintenance lock of the root in dir as another holder
// would, until release is called.
func HoldMaintenanceForTest(ctx context.Context, dir string) (func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	l, err := acquireRef(OSFS{}, filepath.Join(abs, MaintenanceLock))
	if err != nil {
		return nil, err
	}
	if err := l.lock(ctx, time.Second); err != nil {
		l.unref()
		return nil, err
	}
	return func() { l.unlock(); l.unref() }, nil
}
