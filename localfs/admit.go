package localfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/amiss-ci/amiss/ledger"
)

// Admit implements ledger.Ledger. A key that already has a row is answered from it under its
// row-shard lock alone. A new key takes a slot in its home capacity shard (capacity.go) under
// that same lock, or in another shard when that one is full (borrow): the shard record (count
// plus one, the key pending) and the row are made durable together, the row renamed into place
// last. A crash in between leaves the count one too high with the key pending, recounted by the
// next admission in that shard.
func (l *Ledger) Admit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Admission{}, err
	}
	defer l.r.end()
	if err := l.r.cfg.Limits.CheckDelivery(d); err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", d.Key().Short(), err)
	}
	a, err := l.admitNew(ctx, d)
	if err == nil && a.Outcome == ledger.Full {
		// A crashed cleanup's batch leaves counts high until finished: finish it before
		// refusing, so Full means the whole cap is in use.
		if recovered, rerr := l.r.recoverBatchIfAny(ctx); rerr == nil && recovered {
			return l.admitNew(ctx, d)
		}
	}
	return a, err
}

func (r *root) readmitLocked(row *storedRow, d ledger.Delivery) (ledger.Admission, error) {
	now, err := r.now(&row.Row)
	if err != nil {
		return ledger.Admission{}, err
	}
	o, changed := row.Readmit(d, r.cfg.Limits, now)
	switch {
	case changed:
		// Synced before the answer: the sender was answered for a signed time the row must
		// now outlive.
		err = r.writeRow(row, durableFull)
	case o == ledger.Pending || o == ledger.Duplicate:
		// The sender is told the delivery is held and stops sending, so the row read must be on
		// disk, and a process that died between renaming it into place and syncing its folder
		// (an admission, a lengthening re-admission, a Save) left it in the page cache only. Its
		// data was synced before the rename; a folder sync makes the name durable
		// (TestPowerCutAfterAProcessCrash...).
		err = r.sync.syncDirs(filepath.Dir(r.statePath(row.Key)))
	}
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", row.Key.Short(), err)
	}
	return row.Admission(o), nil
}

// admitNew admits a key that had no row when last looked at, holding only its home shard's lock
// on the common path.
func (l *Ledger) admitNew(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	r := l.r
	key := d.Key()
	home := int(key[0])
	unlock, err := r.lockShard(ctx, byte(home))
	if err != nil {
		return ledger.Admission{}, err
	}
	a, full, err := l.admitIn(ctx, d, home, home)
	unlock()
	if err != nil || !full {
		return a, err
	}
	return l.borrow(ctx, d)
}

// admitIn decides the admission of d with a slot of shard s, holding the locks of s and of
// the key's home shard. full reports that s has no room (nothing was written).
func (l *Ledger) admitIn(ctx context.Context, d ledger.Delivery, s, home int) (ledger.Admission, bool, error) {
	r := l.r
	key := d.Key()
	// Another admission may have created the row while no lock was held.
	if row, err := r.readRow(key); err == nil {
		a, err := r.readmitLocked(&row, d)
		return a, false, err
	} else if !errors.Is(err, ledger.ErrUnknownDelivery) {
		return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	// Only freshness needs the persisted high-water (later decisions on the row use it anyway).
	now := r.cfg.Clock.Now()
	if d.Timed() {
		var err error
		if now, err = r.now(nil); err != nil {
			return ledger.Admission{}, false, err
		}
	}
	id, err := r.evaluationID()
	if err != nil {
		return ledger.Admission{}, false, err
	}
	row, outcome, err := ledger.NewRow(d, r.cfg.Limits, now, id)
	if err != nil {
		return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if outcome != ledger.Admitted {
		return ledger.Admission{Outcome: outcome, Key: key}, false, nil
	}
	rec := storedRow{Row: row, Shard: s}
	data, err := encodeRow(&rec, r.cfg.Limits) // refuse an oversized state before any write
	if err != nil {
		return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	sh, err := r.readShard(s)
	if err != nil {
		return ledger.Admission{}, false, err
	}
	used := sh.Used
	changed, err := r.recount(&sh, true)
	if err != nil {
		return ledger.Admission{}, false, err
	}
	r.sync.enter()
	defer r.sync.exit()
	if len(sh.Pending) >= maxCautiousPending || sh.Used >= sh.Quota && len(sh.Pending) > 0 {
		// A long pending list, or a full shard that finished admissions' slots might free:
		// recount in full, from rows made durable first (see recount).
		if err := r.sync.syncEverything(); err != nil {
			return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
		}
		full, err := r.recount(&sh, false)
		if err != nil {
			return ledger.Admission{}, false, err
		}
		changed = changed || full
	}
	if sh.Used >= sh.Quota {
		if changed {
			// Keep what recounting found (slots given back), durably: every borrowing admission
			// reads a full shard again. What it relied on was made durable first (see recount).
			if err := r.writeShard(&sh, used); err != nil {
				return ledger.Admission{}, false, err
			}
		}
		return ledger.Admission{}, true, nil
	}
	sh.Used++
	mine := pendingSlot{Key: key, EvaluationID: row.EvaluationID}
	sh.Pending = append(sh.Pending, mine)
	capSt, err := r.stageShard(&sh)
	if err != nil {
		return ledger.Admission{}, false, err
	}
	rowSt, err := r.stage(r.statePath(key), data)
	if err != nil {
		abortAll([]*staged{capSt})
		return ledger.Admission{}, false, err
	}
	// The record is written in place and the row to a temporary file; one sync makes both
	// durable (one flush, see syncer), and only then is the row renamed into place (its folder
	// synced): the count covers the row before the row exists, whichever shard the slot is of.
	if err := r.commitAll([]*staged{capSt, rowSt}); err != nil {
		return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	r.madeDurable(s, mine)
	if err := r.roomShown(used, sh.Used); err != nil {
		return ledger.Admission{}, false, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	return row.Admission(ledger.Admitted), false, nil
}

// borrow admits d with a slot of another shard, the home shard being full. It reads every record
// without locks to find candidates (room, or pending keys recounting may free), then tries each
// under its lock and the home shard's, in ascending order; Full when no shard has room.
func (l *Ledger) borrow(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	r := l.r
	key := d.Key()
	home := int(key[0])
	// A refusal proved by an earlier scan stands while no shard has gained room since, for
	// FullProofLife at most.
	epoch, known := r.roomEpoch()
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	proved, provedAt := r.fullProof, r.fullProofAt
	r.mu.Unlock()
	if known && proved != nil && *proved == epoch && now.Before(provedAt.Add(FullProofLife)) && !now.Before(provedAt) {
		return ledger.Admission{Outcome: ledger.Full, Key: key}, nil
	}
	states, err := r.readAllShards(ctx)
	if err != nil {
		return ledger.Admission{}, err
	}
	var mine, roomy, pending []int
	for s, sh := range states {
		switch {
		case slices.ContainsFunc(sh.Pending, func(p pendingSlot) bool { return p.Key == key }):
			// An interrupted admission of this key took a slot here: recounting gives it
			// back, and this admission takes it again.
			mine = append(mine, s)
		case sh.Used < sh.Quota:
			roomy = append(roomy, s)
		case len(sh.Pending) > 0:
			pending = append(pending, s)
		}
	}
	// Start at a shard that depends on the key, so borrowers spread over the shards.
	rotate := func(xs []int) []int {
		if len(xs) == 0 {
			return xs
		}
		i := int(key[1]) % len(xs)
		return append(xs[i:len(xs):len(xs)], xs[:i]...)
	}
	for _, s := range slices.Concat(mine, rotate(roomy), pending) {
		unlock, err := r.lockShards(ctx, []int{home, s})
		if err != nil {
			return ledger.Admission{}, err
		}
		a, full, err := l.admitIn(ctx, d, s, home)
		unlock()
		if err != nil || !full {
			return a, err
		}
	}
	// Every shard was full when read, and none gained room between the two readings of the
	// epoch (a release changes it first): Full is proved for this epoch.
	if after, ok := r.roomEpoch(); known && ok && after == epoch {
		r.mu.Lock()
		r.fullProof, r.fullProofAt = &epoch, now
		r.mu.Unlock()
	}
	return ledger.Admission{Outcome: ledger.Full, Key: key}, nil
}
