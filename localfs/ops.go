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

// step is one decision on a row (the shape objstore's update takes too): it changes row at the
// row's effective now and answers a value and how the row is written: not at all (0), with
// durableData or durableFull, or not at all but with its folder synced (asRead). A refusal may
// still ask for a write (it recorded the effective now, so a clock stepping back cannot undo
// it); the caller then sees the refusal, joined with the write's error if that fails.
type step[T any] func(row *storedRow, now time.Time) (out T, write durability, err error)

// withRow runs fn (an operation named op) on key's row under its row-shard lock, at the row's
// effective now, and writes the row as fn says.
func withRow[T any](ctx context.Context, l *Ledger, op string, key ledger.Key, fn step[T]) (T, error) {
	var zero T
	r := l.r
	return operation(r, op+" "+key.Short(), func() (T, error) {
		unlock, err := r.lockShard(ctx, key[0])
		if err != nil {
			return zero, err
		}
		defer unlock()
		row, err := r.readRow(key)
		if err != nil {
			return zero, err
		}
		now, err := r.now(&row.Row)
		if err != nil {
			return zero, err
		}
		out, write, err := fn(&row, now)
		switch write {
		case 0:
		case asRead:
			err = errors.Join(err, r.sync.syncDirs(filepath.Dir(r.statePath(key))))
		default:
			err = errors.Join(err, r.writeRow(&row, write))
		}
		return out, err
	})
}

// refusalWrite is how a refusal that recorded the effective now in the row (observed) is
// written: data sync only, since a forgotten refusal means the host crashed, and the persisted
// high-water still bounds how far back the clock can go.
func refusalWrite(observed bool) durability {
	if observed {
		return durableData
	}
	return 0
}

// Claim implements ledger.Ledger. An Execute grant is written with its data synced, its rename
// left to the folder's next sync (see the note at the top); a Publish grant's folder is synced.
func (l *Ledger) Claim(ctx context.Context, key ledger.Key, bindingDigest ledger.Digest, owner string, leaseFor time.Duration) (ledger.Claim, error) {
	return withRow(ctx, l, "claim", key, func(row *storedRow, now time.Time) (ledger.Claim, durability, error) {
		c, err := row.Claim(bindingDigest, owner, leaseFor, now)
		if err != nil {
			return c, 0, err
		}
		switch c.Outcome {
		case ledger.Execute:
			return c, durableData, nil
		case ledger.Publish:
			rep, err := l.r.report(row)
			if err != nil {
				return c, 0, err
			}
			c.Staged.Report = rep
			// The verdict is published next, so the saved row must be on disk whoever saved
			// it: a Save that died between its rename and folder sync left it in the page
			// cache only, and a power loss after the publication would bring it back to be
			// evaluated again. So the grant syncs its folder (one more sync, on a publication's
			// retry only: the first one runs under the Save's lease).
			return c, durableFull, nil
		}
		return c, 0, nil
	})
}

// Renew implements ledger.Ledger (data synced, rename left to the folder's next sync).
func (l *Ledger) Renew(ctx context.Context, lease ledger.Lease, leaseFor time.Duration) (ledger.Lease, error) {
	return withRow(ctx, l, "renew", lease.Key, func(row *storedRow, now time.Time) (ledger.Lease, durability, error) {
		nl, changed, err := row.Renew(lease, leaseFor, now)
		if err != nil {
			return nl, refusalWrite(changed), err
		}
		return nl, durableData, nil
	})
}

// Save implements ledger.Ledger. The report is frozen inside the row's state file, so saving
// is one replacement, synced before the answer (the verdict is published next).
func (l *Ledger) Save(ctx context.Context, lease ledger.Lease, report []byte) (ledger.Staged, error) {
	if err := l.r.cfg.Limits.CheckReport(report); err != nil {
		return ledger.Staged{}, fmt.Errorf("save %s: %w", lease.Key.Short(), err)
	}
	return withRow(ctx, l, "save", lease.Key, func(row *storedRow, now time.Time) (ledger.Staged, durability, error) {
		ref := ledger.ReportRef{Digest: ledger.SumBody(report), Size: len(report)}
		pl, changed, err := row.Save(lease, ref, now)
		if err != nil {
			return ledger.Staged{}, refusalWrite(changed), err
		}
		out := ledger.Staged{Lease: pl, Report: append([]byte(nil), report...)}
		if !changed {
			// A repeated Save (its first answer was lost) is answered again, and its verdict
			// published next: the saved row must be on disk, and the first call's folder sync
			// may have failed (TestPowerCutKeepsASaveRepeatedAfterAFailedFolderSync).
			return out, asRead, nil
		}
		row.Frozen = append([]byte(nil), report...)
		return out, durableFull, nil
	})
}

// Complete implements ledger.Ledger. It creates the end-time index entry (for rows with a
// retention end), then writes the done state, which keeps no report; neither synced (see the
// note at the top): a forgotten done state leaves the row saved, published again with the same
// bytes; a forgotten index entry is made again by the sweep meeting the row past its retention.
func (l *Ledger) Complete(ctx context.Context, s ledger.Staged) error {
	return l.end(ctx, "complete", s.Lease.Key, func(row *ledger.Row, now time.Time) (bool, error) { return row.Complete(s, now) })
}

// Abandon implements ledger.Ledger, with the write order of Complete.
func (l *Ledger) Abandon(ctx context.Context, s ledger.Staged, reason string) error {
	return l.end(ctx, "abandon", s.Lease.Key, func(row *ledger.Row, now time.Time) (bool, error) { return row.Abandon(s, reason, now) })
}

// Supersede implements ledger.Ledger, with the write order of Complete (no report kept).
func (l *Ledger) Supersede(ctx context.Context, s ledger.Staged, by ledger.Key) error {
	return l.end(ctx, "supersede", s.Lease.Key, func(row *ledger.Row, now time.Time) (bool, error) { return row.Supersede(s, by, now) })
}

// end runs fn, which finishes the row (done, abandoned or superseded), then writes the row's
// end-time index entry and the row (data synced). An abandoned row keeps its report, for Revive
// to publish again; a done or superseded one drops it. A refusal that recorded the effective
// now in a row not finished yet is written as refusalWrite says.
func (l *Ledger) end(ctx context.Context, op string, key ledger.Key, fn func(*ledger.Row, time.Time) (bool, error)) error {
	_, err := withRow(ctx, l, op, key, func(row *storedRow, now time.Time) (struct{}, durability, error) {
		changed, err := fn(&row.Row, now)
		if err != nil {
			return struct{}{}, refusalWrite(changed && !row.State.Terminal()), err
		}
		if !changed {
			return struct{}{}, 0, nil
		}
		if !row.Permanent {
			if err := l.r.addIndex(&row.Row); err != nil {
				return struct{}{}, 0, err
			}
		}
		if row.State == ledger.StateDone || row.State == ledger.StateSuperseded {
			row.Frozen = nil
		}
		return struct{}{}, durableData, nil
	})
	return err
}

// Revive implements ledger.Ledger. The row goes back to saved only with its report kept, matching
// the digest it recorded.
func (l *Ledger) Revive(ctx context.Context, key ledger.Key, evaluationID string) (ledger.Row, error) {
	return withRow(ctx, l, "revive", key, func(row *storedRow, now time.Time) (ledger.Row, durability, error) {
		if row.State == ledger.StateAbandoned {
			if _, err := l.r.report(row); err != nil {
				return ledger.Row{}, 0, fmt.Errorf("%w: the report of the abandoned row is not available: %v", ledger.ErrInvalid, err)
			}
		}
		changed, err := row.Revive(evaluationID, now)
		if err != nil {
			return ledger.Row{}, 0, err
		}
		if changed {
			return row.Row, durableFull, nil
		}
		// Already revived: the operator is told the row is saved, to be published; the Revive
		// that saved it may have died before its folder sync
		// (TestPowerCutAfterAProcessCrashKeepsARetriedRevive).
		return row.Row, asRead, nil
	})
}

// Report implements ledger.Ledger. It reads without locking, as Inspect does (the report is inline).
func (l *Ledger) Report(ctx context.Context, key ledger.Key) ([]byte, error) {
	return operation(l.r, "report "+key.Short(), func() ([]byte, error) {
		row, err := l.r.readRow(key)
		if err == nil {
			err = reportKept(&row.Row)
		}
		if err == nil && row.State == ledger.StateAbandoned && len(row.Frozen) == 0 {
			err = fmt.Errorf("%w: abandoned by a version that did not keep its report", ledger.ErrInvalid)
		}
		if err != nil {
			return nil, err
		}
		return l.r.report(&row)
	})
}

// reportKept refuses a row that holds no report: one not saved yet, or done.
func reportKept(row *ledger.Row) error {
	if (row.State != ledger.StateSaved && row.State != ledger.StateAbandoned) || row.Report.IsZero() {
		return fmt.Errorf("%w: a %v row keeps no report", ledger.ErrInvalid, row.State)
	}
	return nil
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

// Release implements ledger.Ledger (data synced, rename left to the folder's next sync).
func (l *Ledger) Release(ctx context.Context, lease ledger.Lease, notBefore time.Time) error {
	return l.giveBack(ctx, "release", lease, notBefore, (*ledger.Row).Release)
}

// Unclaim implements ledger.Ledger, written as Release is.
func (l *Ledger) Unclaim(ctx context.Context, lease ledger.Lease, notBefore time.Time) error {
	return l.giveBack(ctx, "unclaim", lease, notBefore, (*ledger.Row).Unclaim)
}

func (l *Ledger) giveBack(ctx context.Context, op string, lease ledger.Lease, notBefore time.Time,
	fn func(*ledger.Row, ledger.Lease, time.Time, time.Time) error) error {
	_, err := withRow(ctx, l, op, lease.Key, func(row *storedRow, now time.Time) (struct{}, durability, error) {
		if err := fn(&row.Row, lease, notBefore, now); err != nil {
			return struct{}{}, 0, err
		}
		return struct{}{}, durableData, nil
	})
	return err
}

// Inspect implements ledger.Ledger. It reads without locking: a row is replaced atomically.
func (l *Ledger) Inspect(ctx context.Context, key ledger.Key) (ledger.Row, error) {
	return operation(l.r, "inspect "+key.Short(), func() (ledger.Row, error) {
		row, err := l.r.readRow(key)
		return row.Row, err
	})
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
