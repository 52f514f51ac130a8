package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/amiss-ci/amiss/ledger"
)

// The maintenance state (.amiss-maintenance.state: where the next sweep lap and debris collection
// start) and debris collection: temporary files, each removed only under the lock its writer
// holds.

// readSweep reads the maintenance state; a missing one is the default (start at folder 00).
// A damaged one is returned with the default and an error wrapping ErrCorrupt: it is advisory,
// so the caller reports it and goes on.
func (r *root) readSweep() (sweepState, error) {
	data, err := r.fs.ReadFile(r.path(SweepFile))
	if errors.Is(err, fs.ErrNotExist) {
		return sweepState{}, nil
	}
	if err != nil {
		return sweepState{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, r.path(SweepFile), err)
	}
	s, err := decodeSweep(data)
	if err != nil {
		return sweepState{}, fmt.Errorf("%s: %w", r.path(SweepFile), err)
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

// collectRootDebris removes temporary files of the root folder; it holds every lock whose
// holder writes them (maintenance: batch and maintenance state; admission: creation; clock:
// root state). A journal probe (vfs.CheckJournal) is made and removed under no lock: taking a
// live one is harmless, its creation already answered.
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
		return fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, r.dir, err)
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

// collectDebris removes the named temporary files of dir, a folder of row shard s (its rows
// or its subject records): only a holder of the shard's lock writes one, and it renames or
// removes it before letting go. The folder was listed without a lock; it is locked only to
// remove what was found.
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
