package ledger

import (
	"context"
	"fmt"
	"time"
)

// Records runs the single-record operations of Ledger (Claim, Renew, Save, Complete, Abandon,
// Supersede, Revive, Release, Unclaim, Report, Inspect, AcquireSubject, ReportSubject,
// InspectSubject) over a backend's Store, once for every backend: it validates the request,
// runs the decision of Row or SubjectRecord in one transaction of the store, and says how its
// result must be written (Write). A backend's Ledger embeds it and adds what its storage does
// its own way (admission, capacity, cleanup, listings).
//
// The zero Records is not usable: make one with NewRecords.
type Records struct {
	rows     RowStore
	subjects SubjectStore
	limits   Limits
}

// NewRecords returns the operations run over a backend's rows and subject records (usually one
// Store), deciding with limits (the root's).
func NewRecords(rows RowStore, subjects SubjectStore, limits Limits) Records {
	return Records{rows: rows, subjects: subjects, limits: limits}
}

// updateRow runs one decision on key's row and names any error by the operation (op).
func (rs Records) updateRow(ctx context.Context, op string, key Key, timeless bool, decide func(row *StoredRow, now time.Time) (Write, error)) error {
	if err := rs.rows.UpdateRow(ctx, key, timeless, decide); err != nil {
		return fmt.Errorf("%s %s: %w", op, key.Short(), err)
	}
	return nil
}

// refusal is how a refusal that recorded the effective now in the row (observed) is written: a
// forgotten refusal means the host crashed, and the persisted high-water still bounds how far
// back the clock can go.
func refusal(observed bool) Write {
	if observed {
		return WriteLossy
	}
	return WriteNothing
}

// Claim implements Ledger.Claim. An Execute grant may be lost with the host (its holder dies
// with it; a fence is only used by a Save, which is durable and carries it). A Publish grant is
// durable before it is answered: the verdict is published next, so the saved row must survive a
// host crash whoever saved it (a Save that died before its write was durable would otherwise
// come back to be evaluated again after the publication).
func (rs Records) Claim(ctx context.Context, key Key, bindingDigest Digest, owner string, leaseFor time.Duration) (Claim, error) {
	var out Claim
	err := rs.updateRow(ctx, "claim", key, false, func(row *StoredRow, now time.Time) (Write, error) {
		c, err := row.Row.Claim(bindingDigest, owner, leaseFor, now)
		out = c
		switch {
		case err != nil:
			return WriteNothing, err
		case c.Outcome == Execute:
			return WriteLossy, nil
		case c.Outcome == Publish:
			out.Staged.Report = append([]byte(nil), row.Report...)
			return WriteDurable, nil
		}
		return WriteNothing, nil
	})
	if err != nil {
		return Claim{}, err
	}
	return out, nil
}

// Renew implements Ledger.Renew (a renewal may be lost with the host, as a claim may).
func (rs Records) Renew(ctx context.Context, lease Lease, leaseFor time.Duration) (Lease, error) {
	var out Lease
	err := rs.updateRow(ctx, "renew", lease.Key, false, func(row *StoredRow, now time.Time) (Write, error) {
		nl, changed, err := row.Row.Renew(lease, leaseFor, now)
		out = nl
		if err != nil {
			return refusal(changed), err
		}
		return WriteLossy, nil
	})
	if err != nil {
		return Lease{}, err
	}
	return out, nil
}

// Save implements Ledger.Save. The report is kept with the row, in one write, durable before
// the answer (the verdict is published next). A repeated Save (its first answer was lost) is
// answered again, and its verdict published next: what was read must be durable (the first
// call may have died before its write was).
func (rs Records) Save(ctx context.Context, lease Lease, report []byte) (Staged, error) {
	if err := rs.limits.CheckReport(report); err != nil {
		return Staged{}, fmt.Errorf("save %s: %w", lease.Key.Short(), err)
	}
	var out Staged
	err := rs.updateRow(ctx, "save", lease.Key, false, func(row *StoredRow, now time.Time) (Write, error) {
		pl, changed, err := row.Row.Save(lease, ReportRef{Digest: SumBody(report), Size: len(report)}, now)
		if err != nil {
			return refusal(changed), err
		}
		out = Staged{Lease: pl, Report: append([]byte(nil), report...)}
		if !changed {
			return ReadDurable, nil
		}
		row.Report = append([]byte(nil), report...)
		return WriteDurable, nil
	})
	if err != nil {
		return Staged{}, err
	}
	return out, nil
}

// Complete implements Ledger.Complete: the row is done and keeps no report. Its end may be lost
// with the host (the row is saved again and publishes the same frozen bytes).
func (rs Records) Complete(ctx context.Context, s Staged) error {
	return rs.end(ctx, "complete", s.Lease.Key, true, func(row *Row, now time.Time) (bool, error) { return row.Complete(s, now) })
}

// Abandon implements Ledger.Abandon: the row keeps its report, for Revive to publish again.
func (rs Records) Abandon(ctx context.Context, s Staged, reason string) error {
	return rs.end(ctx, "abandon", s.Lease.Key, false, func(row *Row, now time.Time) (bool, error) { return row.Abandon(s, reason, now) })
}

// Supersede implements Ledger.Supersede: the row keeps no report.
func (rs Records) Supersede(ctx context.Context, s Staged, by Key) error {
	return rs.end(ctx, "supersede", s.Lease.Key, false, func(row *Row, now time.Time) (bool, error) { return row.Supersede(s, by, now) })
}

// end runs finish, which ends the row (done, abandoned or superseded), and has it written as a
// finished row (WriteEnd). A done or superseded row drops its report. A refusal that recorded
// the effective now in a row not finished yet is written as refusal says.
func (rs Records) end(ctx context.Context, op string, key Key, timeless bool, finish func(*Row, time.Time) (bool, error)) error {
	return rs.updateRow(ctx, op, key, timeless, func(row *StoredRow, now time.Time) (Write, error) {
		changed, err := finish(&row.Row, now)
		if err != nil {
			return refusal(changed && !row.Row.State.Terminal()), err
		}
		if !changed {
			return WriteNothing, nil
		}
		if row.Row.State == StateDone || row.Row.State == StateSuperseded {
			row.Report = nil
		}
		return WriteEnd, nil
	})
}

// keepsReport reports whether the row keeps the report it froze: the bytes kept are the ones
// its digest names. An abandoned row written by a version that did not keep its report holds
// none; an empty report is kept as one (its digest names no bytes).
func (row *StoredRow) keepsReport() bool { return SumBody(row.Report) == row.Row.Report.Digest }

// Revive implements Ledger.Revive. The row goes back to saved only with its report kept (a row
// abandoned by a version that did not keep it cannot be revived). The revival is durable before
// the answer (an operator's act); a row already revived is answered as read, made durable first
// (the Revive that saved it may have died before its write was).
func (rs Records) Revive(ctx context.Context, key Key, evaluationID string) (Row, error) {
	var out Row
	err := rs.updateRow(ctx, "revive", key, false, func(row *StoredRow, now time.Time) (Write, error) {
		if row.Row.State == StateAbandoned && !row.keepsReport() {
			return WriteNothing, fmt.Errorf("%w: the abandoned row does not keep its report (abandoned by an older version)", ErrInvalid)
		}
		changed, err := row.Row.Revive(evaluationID, now)
		if err != nil {
			return WriteNothing, err
		}
		out = row.Row
		if changed {
			return WriteDurable, nil
		}
		return ReadDurable, nil
	})
	if err != nil {
		return Row{}, err
	}
	return out, nil
}

// Release implements Ledger.Release (it may be lost with the host: the lease runs out instead).
func (rs Records) Release(ctx context.Context, lease Lease, notBefore time.Time) error {
	return rs.updateRow(ctx, "release", lease.Key, true, func(row *StoredRow, now time.Time) (Write, error) {
		if err := row.Row.Release(lease, notBefore, now); err != nil {
			return WriteNothing, err
		}
		return WriteLossy, nil
	})
}

// Unclaim implements Ledger.Unclaim, written as Release is.
func (rs Records) Unclaim(ctx context.Context, lease Lease, notBefore time.Time) error {
	return rs.updateRow(ctx, "unclaim", lease.Key, false, func(row *StoredRow, now time.Time) (Write, error) {
		if err := row.Row.Unclaim(lease, notBefore, now); err != nil {
			return WriteNothing, err
		}
		return WriteLossy, nil
	})
}

// Inspect implements Ledger.Inspect with a fresh read.
func (rs Records) Inspect(ctx context.Context, key Key) (Row, error) {
	row, err := rs.rows.ReadRow(ctx, key)
	if err != nil {
		return Row{}, fmt.Errorf("inspect %s: %w", key.Short(), err)
	}
	return row.Row, nil
}

// Report implements Ledger.Report with a fresh read.
func (rs Records) Report(ctx context.Context, key Key) ([]byte, error) {
	row, err := rs.rows.ReadRow(ctx, key)
	st := row.Row.State
	switch {
	case err != nil:
	case (st != StateSaved && st != StateAbandoned) || row.Row.Report.IsZero():
		err = fmt.Errorf("%w: a %v row keeps no report", ErrInvalid, st)
	case st == StateAbandoned && !row.keepsReport():
		err = fmt.Errorf("%w: abandoned by a version that did not keep its report", ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", key.Short(), err)
	}
	return append([]byte(nil), row.Report...), nil
}

// AcquireSubject implements Ledger.AcquireSubject. A grant to post is durable before it is
// answered (a post may follow at once, and a grant lost with a host crash would let another
// verdict post not knowing this one may land after it); every other change may be lost with
// the host (a lost newer verdict is recorded again by its next request).
func (rs Records) AcquireSubject(ctx context.Context, q SubjectRequest) (SubjectGrant, error) {
	if err := q.Validate(); err != nil {
		return SubjectGrant{}, fmt.Errorf("acquire subject: %w", err)
	}
	horizon := rs.limits.SubjectHorizon()
	k := q.Subject.Key()
	rs.subjects.SubjectAsked(q.Order.Key, k)
	var out SubjectGrant
	err := rs.subjects.UpdateSubject(ctx, k, true, func(rec *SubjectRecord, exists bool, landed, now time.Time) (Write, error) {
		switch {
		case !exists:
			*rec = NewSubjectRecord(q.Subject, now)
		case rec.Blind:
			// A record that knows nothing of what stands was made no earlier than its version
			// landed: a create decided long before it was written (its host suspended between
			// its read and its write) can land on a key emptied meanwhile, and its own
			// CreatedAt would then hide that a verdict is older than the horizon.
			rec.CreatedAt = MaxTime(rec.CreatedAt, landed)
		}
		g, changed, err := rec.Acquire(q, horizon, now)
		out = g
		switch {
		case err != nil || !changed:
			return WriteNothing, err
		case g.Outcome == SubjectPost:
			return WriteDurable, nil
		}
		return WriteLossy, nil
	})
	if err != nil {
		return SubjectGrant{}, fmt.Errorf("acquire subject %s: %w", k.Short(), err)
	}
	return out, nil
}

// ReportSubject implements Ledger.ReportSubject. The report may be lost with the host: the
// grant then ends by itself and counts its post as unknown.
func (rs Records) ReportSubject(ctx context.Context, g SubjectGrant, o PostOutcome) (SubjectGrant, error) {
	var out SubjectGrant
	err := rs.subjects.UpdateSubject(ctx, g.Subject, false, func(rec *SubjectRecord, exists bool, _, now time.Time) (Write, error) {
		if !exists {
			return WriteNothing, fmt.Errorf("%w: the subject's record is gone", ErrLeaseLost)
		}
		a, err := rec.Report(g, o, now)
		if err != nil {
			return WriteNothing, err
		}
		out = a
		return WriteLossy, nil
	})
	if err != nil {
		return SubjectGrant{}, fmt.Errorf("report subject %s: %w", g.Subject.Short(), err)
	}
	return out, nil
}

// InspectSubject implements Ledger.InspectSubject with a fresh read.
func (rs Records) InspectSubject(ctx context.Context, k SubjectKey) (SubjectRecord, error) {
	rec, exists, err := rs.subjects.ReadSubject(ctx, k)
	switch {
	case err != nil:
		return SubjectRecord{}, fmt.Errorf("inspect subject %s: %w", k.Short(), err)
	case !exists:
		return SubjectRecord{}, fmt.Errorf("inspect subject %s: %w", k.Short(), ErrUnknownSubject)
	}
	return rec, nil
}
