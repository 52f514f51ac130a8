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
// start) and debris collection: temporary files and dead format 1 reports, each removed only under
// the lock its writer holds.

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

// collectRootDebris removes temporary files and format 1 leftovers of the root folder; it
// holds every lock whose holder writes them (maintenance: batch and maintenance state;
// admission: creation and migration; clock: root state). A journal probe (vfs.CheckJournal)
// is made and removed under no lock: taking a live one is harmless, its creation already
// answered.
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
		if strings.Contains(e.Name(), tmpMarker) || strings.HasPrefix(e.Name(), CapacityFile) {
			if err := r.remove(r.path(e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// collectDebris removes, for each folder, the named candidates that are still debris: a
// temporary file (only a holder of the folder's lock writes one, and it renames or removes it
// before letting go), or a report no format 1 saved or abandoned row names. The folders were
// listed without a lock; each folder with candidates is locked only to remove them.
func (r *root) collectDebris(ctx context.Context, debris map[int][]string) error {
	for s, names := range debris {
		if len(names) == 0 {
			continue
		}
		unlock, err := r.lockShard(ctx, byte(s))
		if err != nil {
			return err
		}
		err = r.collectLocked(s, names)
		unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *root) collectLocked(s int, names []string) error {
	dir := r.shardDirOf(s)
	for _, name := range names {
		dead := strings.Contains(name, tmpMarker)
		if k, ok := strings.CutSuffix(name, ".report"); ok {
			dead = r.deadReport(k)
		}
		if dead {
			if err := r.remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// deadReport reports whether the report file of the named key is no saved or abandoned row's
// result: its row is gone, done or unfinished, keeps its report inline (format 2), or holds
// another report (a Save that crashed before its state was written and was then superseded).
// A report beside a damaged row, or one that does not decode beside a format 1 saved row, is
// kept: it may be the only copy of a verdict, and Claim reports it as corrupt.
func (r *root) deadReport(keyName string) bool {
	key, err := ledger.ParseKey(keyName)
	if err != nil {
		return false
	}
	row, err := r.readRow(key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true
	}
	if err != nil {
		return false
	}
	if row.State != ledger.StateSaved && row.State != ledger.StateAbandoned {
		return true
	}
	if !row.v1 {
		return true
	}
	data, err := r.fs.ReadFile(r.reportPath(row.Key))
	if err != nil {
		return false
	}
	rep, err := decodeReport(data, r.cfg.Limits)
	return err == nil && ledger.SumBody(rep) != row.Report.Digest
}
