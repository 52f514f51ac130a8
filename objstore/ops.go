package objstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Admit implements ledger.Ledger. A new key takes a slot from a capacity shard (its home
// shard; only when that one is full are the others read), recording itself as pending there,
// and then creates its row with If-None-Match. Admission issues no listing: a row read, a
// shard read and write, and the row's creation.
func (l *Ledger) Admit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	if err := d.Validate(); err != nil {
		return ledger.Admission{}, err
	}
	key := d.Key()
	if len(d.Subject) > l.cfg.Limits.MaxSubjectBytes {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w: subject of %d bytes, ceiling %d", key.Short(),
			ledger.ErrTooLarge, len(d.Subject), l.cfg.Limits.MaxSubjectBytes)
	}
	for attempt := 0; attempt < maxRetries; attempt++ {
		a, err := l.readmit(ctx, d)
		if !errors.Is(err, ledger.ErrUnknownDelivery) {
			return a, err
		}
		a, err = l.admitNew(ctx, d)
		if errors.Is(err, errRaced) {
			continue // another admission created the row first: answer as a re-admission
		}
		return a, err
	}
	return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), ledger.ErrBusy)
}

func (l *Ledger) readmit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	var out ledger.Admission
	err := l.update(ctx, "admit", d.Key(), func(rd *rowData, now time.Time) (bool, error) {
		o, changed := rd.Row.Readmit(d, l.cfg.Limits, now)
		out = rd.Row.Admission(o)
		return changed, nil
	})
	if err != nil {
		return ledger.Admission{}, err
	}
	return out, nil
}

func (l *Ledger) admitNew(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	key := d.Key()
	if err := l.refreshHighWater(ctx); err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	now := l.nowFor(nil)
	id, err := ledger.NewEvaluationID(l.cfg.Random.Read)
	if err != nil {
		return ledger.Admission{}, err
	}
	row, outcome, err := ledger.NewRow(d, l.cfg.Limits, now, id)
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if outcome != ledger.Admitted {
		return ledger.Admission{Outcome: outcome, Key: key}, nil
	}
	rd := rowData{Row: row}
	body, token, err := l.encode(kindRow, rd) // refuse an oversized row before taking a slot
	if err != nil {
		return ledger.Admission{}, err
	}
	if len(body) > maxObjectBytes {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w: row of %d bytes", key.Short(), ledger.ErrTooLarge, len(body))
	}
	started := time.Now()
	shard, ok, err := l.reserve(ctx, key, now)
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if !ok {
		return ledger.Admission{Outcome: ledger.Full, Key: key}, nil
	}
	// Past half the grace, another admission may settle our pending entry as abandoned and
	// give the slot back: creating the row then could understate use, so give up instead.
	if time.Since(started) > l.cfg.PendingGrace/2 {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w: slot reserved too long ago", key.Short(), ledger.ErrUnavailable)
	}
	rd.Shard = shard
	if body, token, err = l.encode(kindRow, rd); err != nil {
		return ledger.Admission{}, err
	}
	etag, err := l.s.put(ctx, rowName(key), body, token, "", true)
	if errors.Is(err, errRaced) {
		// The row exists after all: give the slot back (best effort: a slot kept is an
		// overstatement, which is safe) and answer from the row.
		l.unreserve(ctx, shard, key)
		return ledger.Admission{}, errRaced
	}
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	l.remember(key, etag, rd)
	return row.Admission(ledger.Admitted), nil
}

// shardState is a shard as read, with its ETag.
type shardState struct {
	data shardData
	etag string
}

func (l *Ledger) readShard(ctx context.Context, i int) (shardState, error) {
	o, err := l.s.get(ctx, shardName(i))
	if errors.Is(err, errNotFound) {
		return shardState{}, fmt.Errorf("%w: %s is missing: capacity cannot be rebuilt by guessing", ledger.ErrRootMismatch, l.s.key(shardName(i)))
	}
	if err != nil {
		return shardState{}, err
	}
	var sd shardData
	if err := decode(l.s.key(shardName(i)), kindShard, o.body, &sd); err != nil {
		return shardState{}, err
	}
	if sd.Used < 0 || sd.Quota != l.quota(i) {
		return shardState{}, fmt.Errorf("%w: %s holds used %d, quota %d (want %d)", ledger.ErrCorrupt, l.s.key(shardName(i)), sd.Used, sd.Quota, l.quota(i))
	}
	return shardState{data: sd, etag: o.etag}, nil
}

func (l *Ledger) writeShard(ctx context.Context, i int, st shardState) error {
	body, token, err := l.encode(kindShard, st.data)
	if err != nil {
		return err
	}
	_, err = l.s.put(ctx, shardName(i), body, token, st.etag, false)
	return err
}

// reserve takes a slot for key: from its home shard, or, only when that one is full, from any
// other shard with room. ok is false when every shard is full.
func (l *Ledger) reserve(ctx context.Context, key ledger.Key, now time.Time) (int, bool, error) {
	home := l.homeShard(key)
	order := append([]int{home}, rand.Perm(l.shards)...)
	tried := map[int]bool{}
	for _, i := range order {
		if tried[i] {
			continue
		}
		tried[i] = true
		ok, err := l.reserveIn(ctx, i, key, now)
		if err != nil || ok {
			return i, ok, err
		}
	}
	return 0, false, nil
}

func (l *Ledger) reserveIn(ctx context.Context, i int, key ledger.Key, now time.Time) (bool, error) {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, err := l.readShard(ctx, i)
		if err != nil {
			return false, err
		}
		if _, err := l.settle(ctx, &st.data, now, false); err != nil {
			return false, err
		}
		// The key is already pending here, with no row (the caller found none): an earlier
		// attempt of this very delivery, interrupted or still in flight, holds a slot for it.
		// Share that slot; whichever attempt creates the row uses it.
		reused := false
		for j, p := range st.data.Pending {
			if p.Key == key {
				st.data.Pending[j].At = now.UnixNano()
				reused = true
			}
		}
		if !reused {
			if st.data.Used >= st.data.Quota {
				return false, nil
			}
			st.data.Used++
			st.data.Pending = append(st.data.Pending, pendingEntry{Key: key, At: now.UnixNano()})
		}
		err = l.writeShard(ctx, i, st)
		if errors.Is(err, errRaced) {
			continue
		}
		return err == nil, err
	}
	return false, fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
}

// settle drops pending entries whose admission is over. An entry older than the grace is read:
// a row that exists is simply no longer pending, an absent one was an admission that never
// finished, and its slot is given back. Younger entries are read too when thorough is set (by
// cleanup) or when the list is at its bound: an entry whose row exists is dropped whatever its
// age. It reports whether the shard changed.
func (l *Ledger) settle(ctx context.Context, sd *shardData, now time.Time, thorough bool) (bool, error) {
	thorough = thorough || len(sd.Pending) >= maxPending
	keep := sd.Pending[:0:0]
	for _, p := range sd.Pending {
		old := now.Sub(time.Unix(0, p.At)) > l.cfg.PendingGrace
		if !old && !thorough {
			keep = append(keep, p)
			continue
		}
		_, err := l.s.get(ctx, rowName(p.Key))
		switch {
		case err == nil:
		case errors.Is(err, errNotFound) && old:
			if sd.Used > 0 {
				sd.Used--
			}
		case errors.Is(err, errNotFound):
			keep = append(keep, p)
		default:
			return false, err
		}
	}
	changed := len(keep) != len(sd.Pending)
	sd.Pending = keep
	return changed, nil
}

// unreserve is called when the row was created by another admission of the same delivery
// while this one held a slot for it. Both shared the pending entry (see reserveIn) or each took
// one: the entry is dropped and, if this admission's slot was its own, given back. It cannot
// tell the two apart, so it gives back only when the key is pending twice; otherwise it leaves
// the entry to be settled (a slot kept is an overstatement, the safe direction).
func (l *Ledger) unreserve(ctx context.Context, i int, key ledger.Key) {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, err := l.readShard(ctx, i)
		if err != nil {
			return
		}
		n := 0
		for _, p := range st.data.Pending {
			if p.Key == key {
				n++
			}
		}
		if n < 2 {
			return
		}
		for j, p := range st.data.Pending {
			if p.Key == key {
				st.data.Pending = append(st.data.Pending[:j], st.data.Pending[j+1:]...)
				break
			}
		}
		st.data.Used--
		if err := l.writeShard(ctx, i, st); !errors.Is(err, errRaced) {
			return
		}
	}
}

// Claim implements ledger.Ledger.
func (l *Ledger) Claim(ctx context.Context, key ledger.Key, bindingDigest ledger.Digest, owner string, leaseFor time.Duration) (ledger.Claim, error) {
	var out ledger.Claim
	err := l.update(ctx, "claim", key, func(rd *rowData, now time.Time) (bool, error) {
		c, err := rd.Row.Claim(bindingDigest, owner, leaseFor, now)
		if err != nil {
			return false, err
		}
		if c.Outcome == ledger.Publish {
			c.Staged.Report = append([]byte(nil), rd.Report...)
		}
		out = c
		return c.Outcome == ledger.Execute || c.Outcome == ledger.Publish, nil
	})
	return out, err
}

// Renew implements ledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, lease ledger.Lease, leaseFor time.Duration) (ledger.Lease, error) {
	var out ledger.Lease
	err := l.update(ctx, "renew", lease.Key, func(rd *rowData, now time.Time) (bool, error) {
		nl, changed, err := rd.Row.Renew(lease, leaseFor, now)
		out = nl
		return changed, err
	})
	return out, err
}

// Save implements ledger.Ledger: the report is written inside the row, in one conditional
// write.
func (l *Ledger) Save(ctx context.Context, lease ledger.Lease, report []byte) (ledger.Staged, error) {
	if len(report) > l.cfg.Limits.MaxReportBytes {
		return ledger.Staged{}, fmt.Errorf("save %s: %w: report of %d bytes, ceiling %d", lease.Key.Short(),
			ledger.ErrTooLarge, len(report), l.cfg.Limits.MaxReportBytes)
	}
	var out ledger.Staged
	err := l.update(ctx, "save", lease.Key, func(rd *rowData, now time.Time) (bool, error) {
		pl, changed, err := rd.Row.Save(lease, ledger.ReportRef{Digest: ledger.SumBody(report), Size: len(report)}, now)
		if err != nil {
			return changed, err
		}
		if changed {
			rd.Report = append([]byte(nil), report...)
		}
		out = ledger.Staged{Lease: pl, Report: append([]byte(nil), report...)}
		return changed, nil
	})
	return out, err
}

// Complete implements ledger.Ledger. A row with a retention end gets its index entry before
// the done state.
func (l *Ledger) Complete(ctx context.Context, s ledger.Staged) error {
	return l.update(ctx, "complete", s.Lease.Key, func(rd *rowData, now time.Time) (bool, error) {
		changed, err := rd.Row.Complete(s, now)
		if err != nil || !changed {
			return false, err
		}
		if err := l.finish(ctx, rd); err != nil {
			return false, err
		}
		return true, nil
	})
}

// Abandon implements ledger.Ledger.
func (l *Ledger) Abandon(ctx context.Context, s ledger.Staged, reason string) error {
	return l.update(ctx, "abandon", s.Lease.Key, func(rd *rowData, now time.Time) (bool, error) {
		changed, err := rd.Row.Abandon(s, reason, now)
		if err != nil {
			return changed && !rd.Row.State.Terminal(), err
		}
		if !changed {
			return false, nil
		}
		if err := l.finish(ctx, rd); err != nil {
			return false, err
		}
		return true, nil
	})
}

// finish prepares a row that just became done or abandoned: its index entry is written (before
// the row, by the caller's write) and the report of a done row dropped. An abandoned row keeps
// its report, so that Revive can publish it again.
func (l *Ledger) finish(ctx context.Context, rd *rowData) error {
	if rd.Row.State == ledger.StateDone {
		rd.Report = nil
	}
	if rd.Row.Permanent {
		return nil
	}
	return l.s.putPlain(ctx, indexName(&rd.Row), nil)
}

// Release implements ledger.Ledger.
func (l *Ledger) Release(ctx context.Context, lease ledger.Lease, notBefore time.Time) error {
	return l.update(ctx, "release", lease.Key, func(rd *rowData, now time.Time) (bool, error) {
		if err := rd.Row.Release(lease, notBefore, now); err != nil {
			return false, err
		}
		return true, nil
	})
}

// Revive implements ledger.Ledger. The row must still hold the report it froze.
func (l *Ledger) Revive(ctx context.Context, key ledger.Key, evaluationID string) (ledger.Row, error) {
	var out ledger.Row
	err := l.update(ctx, "revive", key, func(rd *rowData, now time.Time) (bool, error) {
		if rd.Row.State == ledger.StateAbandoned && len(rd.Report) == 0 {
			return false, fmt.Errorf("%w: the abandoned row does not hold its report (abandoned by an older version)", ledger.ErrInvalid)
		}
		changed, err := rd.Row.Revive(evaluationID, now)
		out = rd.Row
		return changed, err
	})
	return out, err
}

// Rows implements ledger.Ledger: up to limit rows in key order after cursor.
func (l *Ledger) Rows(ctx context.Context, cursor ledger.Cursor, limit int) (ledger.RowPage, error) {
	var page ledger.RowPage
	if limit <= 0 {
		return page, fmt.Errorf("%w: rows: limit must be positive", ledger.ErrInvalid)
	}
	after := ""
	if cursor != "" {
		after = rowsPrefix + string(cursor)
	}
	names, more, err := l.s.list(ctx, rowsPrefix, after, limit)
	if err != nil {
		return page, fmt.Errorf("rows: %w", err)
	}
	for _, n := range names {
		key, ok := keyOf(n)
		if !ok {
			continue
		}
		rd, _, err := l.getRow(ctx, key)
		switch {
		case errors.Is(err, ledger.ErrUnknownDelivery):
		case errors.Is(err, ledger.ErrCorrupt):
			page.Damaged = append(page.Damaged, ledger.DamagedRow{Name: l.s.key(n), Err: err})
		case err != nil:
			return page, fmt.Errorf("rows: %w", err)
		default:
			page.Rows = append(page.Rows, rd.Row)
		}
	}
	if more && len(names) > 0 {
		page.Next = ledger.Cursor(strings.TrimPrefix(names[len(names)-1], rowsPrefix))
	}
	return page, nil
}

// Inspect implements ledger.Ledger.
func (l *Ledger) Inspect(ctx context.Context, key ledger.Key) (ledger.Row, error) {
	rd, _, err := l.getRow(ctx, key)
	if err != nil {
		return ledger.Row{}, fmt.Errorf("inspect %s: %w", key.Short(), err)
	}
	return rd.Row, nil
}

func indexName(row *ledger.Row) string {
	end := row.RetainUntil.UnixNano()
	if end < 0 {
		end = 0
	}
	return fmt.Sprintf("%s%020d-%s", endedPrefix, end, row.Key)
}
