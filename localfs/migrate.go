package localfs

import (
	"context"
	"fmt"
)

// migrate turns a format 2 root into this format by writing its root state as this format (its
// files are read as they are), from when on a format 2 process refuses it. It holds the clock
// lock, as every writer of the root state does (format 2's too), so nothing written is lost.
func (r *root) migrate(ctx context.Context) error {
	unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	defer unlock()
	st, version, err := r.readRootVersion()
	if err != nil || version >= FormatVersion {
		return err // or migrated by another process meanwhile
	}
	return r.writeRoot(st)
}
