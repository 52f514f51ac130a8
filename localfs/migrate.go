package localfs

import (
	"context"
	"fmt"
)

// migrate turns a root of format 2 into one of this format, in place, by writing its root state
// as this format: its files are read as they are. It holds the maintenance lock and the
// admission lock. From then on a format 2 process still running refuses the root (a newer
// format).
func (r *root) migrate(ctx context.Context) error {
	unlockM, err := lockFile(ctx, r.maintenance, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	defer unlockM()
	unlockA, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.dir, err)
	}
	defer unlockA()
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
