package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// The root state (.amiss-root.state): format, limits, persisted high-water clock and last cleanup
// batch id. Every decision by time reads it; it is written under the clock lock.

// readRoot reads the root state, which must be of this format.
func (r *root) readRoot() (rootState, error) {
	st, version, err := r.readRootVersion()
	if err == nil && version < FormatVersion {
		err = fmt.Errorf("%w: %s is of format %d: it must be migrated (open it again)", ledger.ErrRootMismatch, r.path(RootFile), version)
	}
	return st, err
}

// readRootVersion reads the root state and the format that wrote it. A missing one is
// ErrRootMismatch, and matches fs.ErrNotExist too.
func (r *root) readRootVersion() (rootState, uint16, error) {
	p := r.path(RootFile)
	data, err := r.fs.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return rootState{}, 0, fmt.Errorf("%w: %s is missing: not a ledger root (%w)", ledger.ErrRootMismatch, p, err)
	}
	if err != nil {
		return rootState{}, 0, unavailable(err, "read", p)
	}
	st, version, err := decodeRoot(data)
	if err != nil {
		return rootState{}, 0, fmt.Errorf("%s: %w", p, err)
	}
	return st, version, nil
}

// highWater returns the persisted high-water clock.
func (r *root) highWater() (time.Time, error) {
	st, err := r.readRoot()
	if err != nil {
		return time.Time{}, err
	}
	// A root whose recorded policy changed since this handle opened it (another process
	// adopted body times) is never acted on under the older one: the handle stops.
	if d := st.Limits.Diff(r.cfg.Limits); d != "" {
		return time.Time{}, fmt.Errorf("%w: %s changed since this handle opened it (reopen): %s", ledger.ErrRootMismatch, r.path(RootFile), d)
	}
	return time.Unix(0, st.HighWater).UTC(), nil
}

// persistRoot raises the persisted high-water to at least t and, when newBatch is set,
// reserves the next cleanup batch id, under the clock lock. It returns the id reserved.
func (r *root) persistRoot(ctx context.Context, t time.Time, newBatch bool) (uint64, error) {
	unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
	if err != nil {
		return 0, err
	}
	defer unlock()
	st, err := r.readRoot()
	if err != nil {
		return 0, err
	}
	if t.UnixNano() <= st.HighWater && !newBatch {
		return 0, nil
	}
	st.HighWater = max(st.HighWater, t.UnixNano())
	if newBatch {
		st.LastBatch++
	}
	// Durably: the high-water must be on disk before cleanup deletes anything, and a batch id
	// must never be handed out twice.
	return st.LastBatch, r.writeRoot(st)
}

// writeRoot replaces the root state with st, durably (data and folder entry); the caller holds
// the clock lock, or the admission lock while it creates the root.
func (r *root) writeRoot(st rootState) error {
	data, err := encodeJSON(kindRoot, st)
	if err != nil {
		return err
	}
	return r.replace(r.path(RootFile), data, durableFull)
}

// now returns the effective now for a row: the clock, the persisted high-water, the row's times.
func (r *root) now(row *ledger.Row) (time.Time, error) {
	hw, err := r.highWater()
	if err != nil {
		return time.Time{}, err
	}
	if row == nil {
		return ledger.MaxTime(r.cfg.Clock.Now(), hw), nil
	}
	return row.Now(r.cfg.Clock.Now(), hw), nil
}
