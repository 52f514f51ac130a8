package localfs

import (
	"context"
	"fmt"
)

// migrate turns a root of format 2 into one of this format, in place, by writing its root state
// as this format: its files are read as they are. It holds the clock lock, which every writer
// of the root state holds (format 2's too), so no high-water or body-time adoption written
// meanwhile is lost. From then on a format 2 process still running refuses the root (a newer
// format).
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
	out, err := encodeJSON(kindRoot, st)
	if err != nil {
		return err
	}
	return r.replace(r.path(RootFile), out, durableFull)
}
