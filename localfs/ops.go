package localfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// What each write makes durable, and why (see also durable.go and capacity.go):
//
//   - A row's new state is written to a temporary file whose data is synced before it is
//     renamed over the old one: a crash never leaves a name pointing at lost bytes.
//   - The rename is synced (its folder's sync) before the answer only where someone outside the
//     host relies on it surviving a host crash: an admission (the sender, told 202, will not
//     send again), a Save (the verdict is published next and must never be evaluated again), a
//     re-admission that lengthens retention (the sender was answered for a signed time the row
//     must outlive) and a Revive (an operator's act).
//   - Claim, Renew, Release, Complete and Abandon leave their rename to the folder's next sync
//     (or the file system's writeback). It is lost only if the host crashes first (on EFS every
//     namespace operation is stable when it returns), and that crash also ends every process
//     that held or was granted a lease on this root. What comes back is the row as its last
//     synced write left it: a claim or renewal forgotten (its holder died with the host; a
//     fence is only used by a Save, which is synced and carries it), a release forgotten (the
//     lease runs out instead), a Complete or Abandon forgotten (the row is saved again and
//     publishes the same frozen bytes, or is abandoned again: never a second verdict).
//   - A process can also die alone between a rename and its folder sync (killed, out of
//     memory), leaving the row in the page cache only, for the others to read. So an answer
//     given from a row read, not written, syncs the row's folder first, promising nothing a
//     power loss could undo: a re-admission answered Pending or Duplicate (the sender stops
//     sending), a Save or a Revive answered again with nothing to change, and a Publish grant
//     (the verdict goes out next). An Execute grant needs none: nothing leaves the host before
//     its Save, which syncs the folder, and whatever it depended on with it.

// UpdateRow maps each ledger.Write of a row decision to the writes above: WriteNothing to none,
// WriteLossy to durableData, WriteDurable to durableFull, ReadDurable to a sync of the row's
// folder, and WriteEnd to the row's end-time index entry (for a row with a retention end)
// followed by the row with durableData: a forgotten done state leaves the row saved, published
// again with the same bytes; a forgotten index entry is made again by the sweep meeting the row
// past its retention.

// ReadRow implements ledger.RowStore. It reads without locking: a row is replaced atomically.
func (r *root) ReadRow(ctx context.Context, key ledger.Key) (ledger.StoredRow, error) {
	if err := r.begin(); err != nil {
		return ledger.StoredRow{}, err
	}
	defer r.end()
	row, err := r.readRow(key)
	if err != nil {
		return ledger.StoredRow{}, err
	}
	return ledger.StoredRow{Row: row.Row, Report: row.Frozen}, nil
}

// UpdateRow implements ledger.RowStore: it runs decide on key's row under its row-shard lock,
// at the row's effective now, and writes the row as the decision asks (see rows above). A
// refusal that asks for a write is answered joined with the write's error if that fails.
func (r *root) UpdateRow(ctx context.Context, key ledger.Key, _ bool, decide func(*ledger.StoredRow, time.Time) (ledger.Write, error)) error {
	if err := r.begin(); err != nil {
		return err
	}
	defer r.end()
	unlock, err := r.lockShard(ctx, key[0])
	if err != nil {
		return err
	}
	defer unlock()
	row, err := r.readRow(key)
	if err != nil {
		return err
	}
	now, err := r.now(&row.Row)
	if err != nil {
		return err
	}
	sr := ledger.StoredRow{Row: row.Row, Report: row.Frozen}
	write, err := decide(&sr, now)
	row.Row, row.Frozen = sr.Row, sr.Report
	switch write {
	case ledger.WriteNothing:
		return err
	case ledger.ReadDurable:
		return errors.Join(err, r.sync.syncDirs(filepath.Dir(r.statePath(key))))
	case ledger.WriteEnd:
		if !row.Permanent {
			if ierr := r.addIndex(&row.Row); ierr != nil {
				return errors.Join(err, ierr)
			}
		}
		return errors.Join(err, r.writeRow(&row, durableData))
	case ledger.WriteLossy:
		return errors.Join(err, r.writeRow(&row, durableData))
	case ledger.WriteDurable:
		return errors.Join(err, r.writeRow(&row, durableFull))
	}
	return errors.Join(err, fmt.Errorf("%w: unknown write %d", ledger.ErrInvalid, write))
}

// Rows implements ledger.Ledger: up to limit rows in shard and key order after cursor.
func (l *Ledger) Rows(ctx context.Context, cursor ledger.Cursor, limit int) (ledger.RowPage, error) {
	if err := l.r.begin(); err != nil {
		return ledger.RowPage{}, err
	}
	defer l.r.end()
	var page ledger.RowPage
	if limit <= 0 {
		return page, fmt.Errorf("%w: rows: limit must be positive", ledger.ErrInvalid)
	}
	res, err := l.r.listRows(position{}, cursor, limit)
	if err != nil {
		return page, fmt.Errorf("rows: %w", err)
	}
	for _, k := range res.keys {
		row, err := l.r.readRow(k)
		switch {
		case errors.Is(err, ledger.ErrUnknownDelivery):
		case errors.Is(err, ledger.ErrCorrupt):
			page.Damaged = append(page.Damaged, ledger.DamagedRow{Name: l.r.statePath(k), Err: err})
		case err != nil:
			return page, fmt.Errorf("rows: %w", err)
		default:
			page.Rows = append(page.Rows, row.Row)
		}
	}
	page.Next = res.next
	return page, nil
}

// Stats implements ledger.Ledger. It reads every row and every capacity shard.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Stats{}, err
	}
	defer l.r.end()
	r := l.r
	st := ledger.Stats{ByState: map[ledger.State]int64{}, Limits: r.cfg.Limits}
	rs, err := r.readRoot()
	if err != nil {
		return st, err
	}
	st.HighWater = time.Unix(0, rs.HighWater).UTC()
	if st.Now, err = r.now(nil); err != nil {
		return st, err
	}
	if st.CapacityUsed, _, err = r.capacityUsed(ctx); err != nil {
		return st, err
	}
	if st.Subjects, err = r.countSubjects(); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	cursor := ledger.Cursor("")
	for {
		res, err := r.listRows(position{}, cursor, 4096)
		if err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
		for _, k := range res.keys {
			row, err := r.readRow(k)
			if err := st.Count(&row.Row, err); err != nil {
				return st, fmt.Errorf("stats: %w", err)
			}
		}
		if res.next == "" {
			return st, nil
		}
		cursor = res.next
	}
}
