package localfs

import (
	"context"
	"path/filepath"
	"strings"
)

// The maintenance state (sweepState) and debris collection: temporary files, each removed only
// under the lock its writer holds.

// readSweep reads the maintenance state; a missing one is the default (start at folder 00). A
// damaged one answers the default and an error wrapping ErrCorrupt, for the caller to report
// before going on (it is advisory).
func (r *root) readSweep() (sweepState, error) {
	s, _, err := readFile(r, r.path(SweepFile), decodeSweep)
	if err != nil {
		return sweepState{}, err
	}
	return s, nil
}

// writeSweep replaces the maintenance state, data synced, rename not: losing it only makes a
// later lap or collection start at an older place.
func (r *root) writeSweep(s sweepState) error {
	data, err := encodeJSON(kindSweep, s)
	if err != nil {
		return err
	}
	return r.replace(r.path(SweepFile), data, durableData)
}

// collectRootDebris removes the root folder's temporary files, holding every lock whose holder
// writes them (maintenance: batch and maintenance state; admission: creation; clock: root
// state). A journal probe (vfs.CheckJournal) is made under no lock: taking a live one is
// harmless, its creation already answered.
func (r *root) collectRootDebris(ctx context.Context) error {
	unlockAdm, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlockAdm()
	unlockClock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return err
	}
	defer unlockClock()
	entries, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return unavailable(err, "list", r.dir)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			if err := r.remove(r.path(e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// collectDebris removes the named temporary files of dir, a folder of row shard s (rows or
// subject records), under the shard's lock: only its holder writes one, and renames or removes
// it before letting go. The folder was listed without the lock.
func (r *root) collectDebris(ctx context.Context, s int, dir string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	unlock, err := r.lockShard(ctx, byte(s))
	if err != nil {
		return err
	}
	defer unlock()
	for _, name := range names {
		if err := r.remove(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
