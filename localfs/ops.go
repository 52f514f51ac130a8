package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Admit implements ledger.Ledger. A key that already has a row is answered under its row-shard
// lock alone. A new key also takes the admission lock and consults only the capacity record:
// it writes the record (count plus one, the key as pending) and then the row. A crash between
// the two leaves a count one too high with the key pending, settled by the next admission or
// open.
func (l *Ledger) Admit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Admission{}, err
	}
	defer l.r.end()
	if err := d.Validate(); err != nil {
		return ledger.Admission{}, err
	}
	if len(d.Subject) > l.r.cfg.Limits.MaxSubjectBytes {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w: subject of %d bytes, ceiling %d", d.Key().Short(),
			ledger.ErrTooLarge, len(d.Subject), l.r.cfg.Limits.MaxSubjectBytes)
	}
	a, err, done := l.readmit(ctx, d)
	if done {
		return a, err
	}
	a, err = l.admitNew(ctx, d)
	if err == nil && a.Outcome == ledger.Full {
		// A cleanup that crashed after removing rows leaves the count high until its batch is
		// finished; finish it before refusing, so Full means the whole cap is in use.
		if recovered, rerr := l.r.recoverBatchIfAny(ctx); rerr == nil && recovered {
			return l.admitNew(ctx, d)
		}
	}
	return a, err
}

// readmit answers a key that has a row. done is false when the key has none.
func (l *Ledger) readmit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error, bool) {
	r := l.r
	key := d.Key()
	unlock, err := r.lockRow(ctx, key)
	if err != nil {
		return ledger.Admission{}, err, true
	}
	defer unlock()
	row, err := r.readRow(key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return ledger.Admission{}, nil, false
	}
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err), true
	}
	a, err := r.readmitLocked(&row, d)
	return a, err, true
}

func (r *root) readmitLocked(row *ledger.Row, d ledger.Delivery) (ledger.Admission, error) {
	now, err := r.now(row)
	if err != nil {
		return ledger.Admission{}, err
	}
	o, changed := row.Readmit(d, r.cfg.Limits, now)
	if changed {
		if err := r.writeRow(row); err != nil {
			return ledger.Admission{}, fmt.Errorf("admit %s: %w", row.Key.Short(), err)
		}
	}
	return row.Admission(o), nil
}

func (l *Ledger) admitNew(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	r := l.r
	key := d.Key()
	unlockAdm, err := lockFile(ctx, r.admission, r.cfg.LockWait)
	if err != nil {
		return ledger.Admission{}, err
	}
	defer unlockAdm()
	unlock, err := r.lockRow(ctx, key)
	if err != nil {
		return ledger.Admission{}, err
	}
	defer unlock()
	// Another admission may have created the row while no lock was held.
	if row, err := r.readRow(key); err == nil {
		return r.readmitLocked(&row, d)
	} else if !errors.Is(err, ledger.ErrUnknownDelivery) {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	// Only freshness needs the persisted high-water; a permanent delivery is decided without it
	// (every later decision on the row takes the high-water into account anyway).
	now := r.cfg.Clock.Now()
	if !d.SignedAt.IsZero() {
		if now, err = r.now(nil); err != nil {
			return ledger.Admission{}, err
		}
	}
	id, err := r.evaluationID()
	if err != nil {
		return ledger.Admission{}, err
	}
	row, outcome, err := ledger.NewRow(d, r.cfg.Limits, now, id)
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if outcome != ledger.Admitted {
		return ledger.Admission{Outcome: outcome, Key: key}, nil
	}
	data, err := encodeRow(&row, r.cfg.Limits) // refuse an oversized state before any write
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	c, err := r.readCapacity()
	if err != nil {
		return ledger.Admission{}, err
	}
	if err := r.settleLocked(&c); err != nil {
		return ledger.Admission{}, err
	}
	if c.Used >= r.cfg.Limits.RecordCap {
		return ledger.Admission{Outcome: ledger.Full, Key: key}, nil
	}
	c.Used++
	c.Pending = &key
	if err := r.ensureShardDir(key); err != nil {
		return ledger.Admission{}, err
	}
	// The row's temporary file is invisible until renamed, so it is written and fsynced while
	// the capacity record is replaced; only the rename waits for the record to be durable.
	// That keeps the order that matters (the count covers the row before the row exists) and
	// overlaps the two fsyncs.
	type stageResult struct {
		st  *staged
		err error
	}
	rowStaged := make(chan stageResult, 1)
	go func() {
		st, err := r.stage(r.statePath(key), data)
		rowStaged <- stageResult{st, err}
	}()
	capErr := r.writeCapacity(c)
	res := <-rowStaged
	if capErr != nil || res.err != nil {
		if res.st != nil {
			res.st.abort("admit", capErr)
		}
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), errors.Join(capErr, res.err))
	}
	if err := res.st.commit(); err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	return row.Admission(ledger.Admitted), nil
}

// withRow runs fn on key's row under its row-shard lock, at the row's effective now.
func (l *Ledger) withRow(ctx context.Context, op string, key ledger.Key, fn func(row *ledger.Row, now time.Time) error) error {
	r := l.r
	unlock, err := r.lockRow(ctx, key)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, key.Short(), err)
	}
	defer unlock()
	row, err := r.readRow(key)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, key.Short(), err)
	}
	now, err := r.now(&row)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, key.Short(), err)
	}
	if err := fn(&row, now); err != nil {
		return fmt.Errorf("%s %s: %w", op, key.Short(), err)
	}
	return nil
}

// persistRefusal writes a row whose refusal recorded the effective now, so a clock stepping
// back cannot undo the refusal; the refusal itself is what the caller sees.
func (r *root) persistRefusal(row *ledger.Row, observed bool, refusal error) error {
	if observed {
		if err := r.writeRow(row); err != nil {
			return errors.Join(refusal, err)
		}
	}
	return refusal
}

// Claim implements ledger.Ledger.
func (l *Ledger) Claim(ctx context.Context, key ledger.Key, bindingDigest ledger.Digest, owner string, leaseFor time.Duration) (ledger.Claim, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Claim{}, err
	}
	defer l.r.end()
	var out ledger.Claim
	err := l.withRow(ctx, "claim", key, func(row *ledger.Row, now time.Time) error {
		c, err := row.Claim(bindingDigest, owner, leaseFor, now)
		if err != nil {
			return err
		}
		switch c.Outcome {
		case ledger.Execute:
		case ledger.Publish:
			rep, err := l.r.readReport(row)
			if err != nil {
				return err
			}
			c.Staged.Report = rep
		default:
			out = c
			return nil
		}
		if err := l.r.writeRow(row); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, err
}

// Renew implements ledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, lease ledger.Lease, leaseFor time.Duration) (ledger.Lease, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Lease{}, err
	}
	defer l.r.end()
	var out ledger.Lease
	err := l.withRow(ctx, "renew", lease.Key, func(row *ledger.Row, now time.Time) error {
		nl, changed, err := row.Renew(lease, leaseFor, now)
		if err != nil {
			return l.r.persistRefusal(row, changed, err)
		}
		if err := l.r.writeRow(row); err != nil {
			return err
		}
		out = nl
		return nil
	})
	return out, err
}

// Save implements ledger.Ledger. The report is written before the state that names it, so no
// state ever points at a missing report; a crash between the two leaves a dead report that
// the next Save overwrites or Prepare collects.
func (l *Ledger) Save(ctx context.Context, lease ledger.Lease, report []byte) (ledger.Staged, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Staged{}, err
	}
	defer l.r.end()
	r := l.r
	if len(report) > r.cfg.Limits.MaxReportBytes {
		return ledger.Staged{}, fmt.Errorf("save %s: %w: report of %d bytes, ceiling %d", lease.Key.Short(),
			ledger.ErrTooLarge, len(report), r.cfg.Limits.MaxReportBytes)
	}
	var out ledger.Staged
	err := l.withRow(ctx, "save", lease.Key, func(row *ledger.Row, now time.Time) error {
		ref := ledger.ReportRef{Digest: ledger.SumBody(report), Size: len(report)}
		pl, changed, err := row.Save(lease, ref, now)
		if err != nil {
			return r.persistRefusal(row, changed, err)
		}
		if changed {
			if err := r.ensureShardDir(row.Key); err != nil {
				return err
			}
			if err := r.writeAtomic(r.reportPath(row.Key), encodeFrame(kindReport, report)); err != nil {
				return err
			}
			if err := r.writeRow(row); err != nil {
				return err
			}
		}
		out = ledger.Staged{Lease: pl, Report: append([]byte(nil), report...)}
		return nil
	})
	return out, err
}

// Complete implements ledger.Ledger. It writes the end-time index entry (for rows with a
// retention end), then the done state, then removes the report: nothing removes the evidence
// while a claim could still be answered from it.
func (l *Ledger) Complete(ctx context.Context, s ledger.Staged) error {
	if err := l.r.begin(); err != nil {
		return err
	}
	defer l.r.end()
	return l.withRow(ctx, "complete", s.Lease.Key, func(row *ledger.Row, now time.Time) error {
		changed, err := row.Complete(s, now)
		if err != nil || !changed {
			return err
		}
		return l.r.finish(row)
	})
}

// Abandon implements ledger.Ledger, with the write order of Complete.
func (l *Ledger) Abandon(ctx context.Context, s ledger.Staged, reason string) error {
	if err := l.r.begin(); err != nil {
		return err
	}
	defer l.r.end()
	return l.withRow(ctx, "abandon", s.Lease.Key, func(row *ledger.Row, now time.Time) error {
		changed, err := row.Abandon(s, reason, now)
		if err != nil {
			return l.r.persistRefusal(row, changed && !row.State.Terminal(), err)
		}
		if !changed {
			return nil
		}
		return l.r.finish(row)
	})
}

// finish persists a row that just became done or abandoned. An abandoned row keeps its
// report, so that Revive can publish it again.
func (r *root) finish(row *ledger.Row) error {
	if !row.Permanent {
		if err := r.addIndex(row); err != nil {
			return err
		}
	}
	if err := r.writeRow(row); err != nil {
		return err
	}
	if row.State != ledger.StateDone {
		return nil
	}
	// The report is dead now; if this removal is lost, Prepare collects it.
	if err := r.fs.Remove(r.reportPath(row.Key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, r.reportPath(row.Key), err)
	}
	return nil
}

// Revive implements ledger.Ledger. The report file must still be there and match the digest
// the row recorded before the row goes back to saved.
func (l *Ledger) Revive(ctx context.Context, key ledger.Key, evaluationID string) (ledger.Row, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Row{}, err
	}
	defer l.r.end()
	var out ledger.Row
	err := l.withRow(ctx, "revive", key, func(row *ledger.Row, now time.Time) error {
		changed, err := row.Revive(evaluationID, now)
		if err != nil {
			return err
		}
		if changed {
			if _, err := l.r.readReport(row); err != nil {
				return fmt.Errorf("%w: the report of the abandoned row is not available: %v", ledger.ErrInvalid, err)
			}
			if err := l.r.writeRow(row); err != nil {
				return err
			}
		}
		out = *row
		return nil
	})
	return out, err
}

// Report implements ledger.Ledger. It reads without locking, as Inspect does: a report file is
// written before the state that names it and removed only after the state is done.
func (l *Ledger) Report(ctx context.Context, key ledger.Key) ([]byte, error) {
	if err := l.r.begin(); err != nil {
		return nil, err
	}
	defer l.r.end()
	row, err := l.r.readRow(key)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", key.Short(), err)
	}
	if err := reportKept(&row); err != nil {
		return nil, fmt.Errorf("report %s: %w", key.Short(), err)
	}
	rep, err := l.r.readReport(&row)
	if err != nil {
		if row.State == ledger.StateAbandoned && errors.Is(err, ledger.ErrCorrupt) {
			if _, serr := l.r.fs.Stat(l.r.reportPath(key)); errors.Is(serr, fs.ErrNotExist) {
				return nil, fmt.Errorf("report %s: %w: abandoned by a version that did not keep its report", key.Short(), ledger.ErrInvalid)
			}
		}
		return nil, fmt.Errorf("report %s: %w", key.Short(), err)
	}
	return rep, nil
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
	keys, next, err := l.r.listSweep(cursor, limit)
	if err != nil {
		return page, fmt.Errorf("rows: %w", err)
	}
	for _, k := range keys {
		row, err := l.r.readRow(k)
		switch {
		case errors.Is(err, ledger.ErrUnknownDelivery):
		case errors.Is(err, ledger.ErrCorrupt):
			page.Damaged = append(page.Damaged, ledger.DamagedRow{Name: l.r.statePath(k), Err: err})
		case err != nil:
			return page, fmt.Errorf("rows: %w", err)
		default:
			page.Rows = append(page.Rows, row)
		}
	}
	page.Next = next
	return page, nil
}

// Release implements ledger.Ledger.
func (l *Ledger) Release(ctx context.Context, lease ledger.Lease, notBefore time.Time) error {
	if err := l.r.begin(); err != nil {
		return err
	}
	defer l.r.end()
	return l.withRow(ctx, "release", lease.Key, func(row *ledger.Row, now time.Time) error {
		if err := row.Release(lease, notBefore, now); err != nil {
			return err
		}
		return l.r.writeRow(row)
	})
}

// Inspect implements ledger.Ledger. It reads without locking: every file is replaced
// atomically, so a reader sees the old row or the new one.
func (l *Ledger) Inspect(ctx context.Context, key ledger.Key) (ledger.Row, error) {
	if err := l.r.begin(); err != nil {
		return ledger.Row{}, err
	}
	defer l.r.end()
	row, err := l.r.readRow(key)
	if err != nil {
		return ledger.Row{}, fmt.Errorf("inspect %s: %w", key.Short(), err)
	}
	return row, nil
}

// indexName is the end-time index entry of a row: ended/<hour>/<end nanos>-<key>.
func indexName(row *ledger.Row) (bucket, name string) {
	end := row.RetainUntil.UnixNano()
	if end < 0 {
		end = 0
	}
	return fmt.Sprintf("%012d", end/int64(time.Hour)), fmt.Sprintf("%020d-%s", end, row.Key)
}

// addIndex creates the row's entry in the end-time index, durably.
func (r *root) addIndex(row *ledger.Row) error {
	bucket, name := indexName(row)
	dir := filepath.Join(r.dir, EndedDir, bucket)
	r.mu.Lock()
	known := r.bucketDir[bucket]
	r.mu.Unlock()
	if !known {
		if err := r.mkdirDurable(filepath.Join(r.dir, EndedDir)); err != nil {
			return err
		}
		if err := r.mkdirDurable(dir); err != nil {
			return err
		}
		r.mu.Lock()
		r.bucketDir[bucket] = true
		r.mu.Unlock()
	}
	p := filepath.Join(dir, name)
	f, err := r.fs.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ledger.ErrUnavailable, p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ledger.ErrUnavailable, p, err)
	}
	if err := r.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: sync %s: %v", ledger.ErrUnavailable, dir, err)
	}
	return nil
}
