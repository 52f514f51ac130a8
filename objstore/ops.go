package objstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Admit implements ledger.Ledger. A new key is admitted in three conditional writes: a
// reservation at the row's key (If-None-Match, or If-Match over a void or abandoned one), a
// slot in a capacity shard whose pending entry names that reservation (its home shard; only
// when that one is full are the others read), and the row, created over the reservation
// (If-Match). Admission issues no listing. A key that has a row is answered from it.
func (l *Ledger) Admit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	key := d.Key()
	if err := l.cfg.Limits.CheckDelivery(d); err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if err := l.refreshHighWater(ctx); err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	for attempt := 0; attempt < maxRetries; attempt++ {
		if _, ok := l.cached(key); ok {
			a, err := l.readmit(ctx, d)
			if !errors.Is(err, ledger.ErrUnknownDelivery) {
				return a, err
			}
		}
		a, err := l.admitNew(ctx, d)
		if errors.Is(err, errRaced) {
			continue // the key changed under this admission: decide again
		}
		return a, err
	}
	return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), ledger.ErrBusy)
}

func (l *Ledger) readmit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	if !d.SignedAt.IsZero() || !d.BodyAt.IsZero() {
		// The freshness of a signed time is judged no lower than the last cleanup's
		// high-water, which every capacity shard carries: the store's nodes may disagree,
		// and this handle's node (and its copy of the root, up to a minute old) may be behind
		// the one the cleanup read.
		st, err := l.readShard(ctx, l.homeShard(d.Key()))
		if err != nil {
			return ledger.Admission{}, fmt.Errorf("admit %s: %w", d.Key().Short(), err)
		}
		l.raiseHighWater(time.Unix(0, st.data.HighWater))
	}
	var out ledger.Admission
	err := recordStore{l}.UpdateRow(ctx, d.Key(), false, func(row *ledger.StoredRow, now time.Time) (ledger.Write, error) {
		o, changed := row.Row.Readmit(d, l.cfg.Limits, now)
		out = row.Row.Admission(o)
		if changed {
			return ledger.WriteLossy, nil
		}
		return ledger.WriteNothing, nil
	})
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", d.Key().Short(), err)
	}
	return out, nil
}

// admitNew admits a key this handle holds no row of. It answers errRaced when the key changed
// under it (the caller decides again).
func (l *Ledger) admitNew(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	key := d.Key()
	// This first decision is made before any request, on the store-clock estimate, which
	// after the host was suspended is behind the store by the whole suspension: it never
	// refuses a delivery as ahead of that estimate (it is decided after the reservation's
	// answer, on a fresh Date), only one too old for it (the estimate is never ahead, so the
	// store's time says so too).
	now := l.nowFor(nil)
	id, err := ledger.NewEvaluationID(l.cfg.Random.Read)
	if err != nil {
		return ledger.Admission{}, err
	}
	row, outcome, err := ledger.NewRow(d, l.cfg.Limits, ledger.MaxTime(now, d.SignedAt, d.BodyAt), id)
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if outcome != ledger.Admitted {
		// Too old by the store's time: refused whatever the key holds, without a request (a
		// row's own times could only make it older).
		return ledger.Admission{Outcome: outcome, Key: key}, nil
	}
	rd := rowData{Row: row}
	if body, _, err := l.encode(kindRow, rd); err != nil { // refuse an oversized row before any write
		return ledger.Admission{}, err
	} else if len(body) > maxObjectBytes {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w: row of %d bytes", key.Short(), ledger.ErrTooLarge, len(body))
	}
	res := reservationData{At: now.UnixNano()}
	if res.ID, err = l.token(); err != nil {
		return ledger.Admission{}, err
	}
	resTag, fresh, err := l.reserveKey(ctx, d, res)
	if err != nil {
		return ledger.Admission{}, err
	}
	// void ends this admission before it took a slot. Best effort: the next admission of the
	// key need not wait for the grace, and an abandoned reservation is taken over later anyway.
	// This admission sent no row write: its void says so (and cleanup removes it) when no
	// admission before it since the key was last empty can have sent one either.
	void := func() {
		res.Void, res.VoidedAt, res.NoRowWrite = true, l.nowFor(nil).Add(time.Second).UnixNano(), fresh
		if body, token, err := l.encode(kindReservation, res); err == nil {
			l.s.put(ctx, rowName(key), body, token, resTag, false)
		}
	}
	// The reservation has landed: decide again at the store's time as of its answer. The
	// first decision may be far behind it: the request may have been held in flight, or this
	// host suspended, while the delivery was admitted elsewhere, finished and forgotten as
	// stale (then the key is empty again, and only this second decision refuses the replay).
	now = l.nowFor(nil)
	// A handle whose host was suspended may not have read the root for longer than its
	// monotonic clock says: before a slot is taken, its policy and high-water are checked
	// against the store's time of this answer (see rootMaxAge).
	if err := l.rootCurrent(ctx, now); err != nil {
		void()
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	now = l.nowFor(nil)
	reservedAt := now.Add(time.Second) // a Date is truncated to the second
	row, outcome, err = ledger.NewRow(d, l.cfg.Limits, now, id)
	if err != nil || outcome != ledger.Admitted {
		void()
		if err != nil {
			return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
		}
		return ledger.Admission{Outcome: outcome, Key: key}, nil
	}
	// Cleanup's look at the key, a grace from now, before the key can hold a row or this
	// admission a slot: however the admission ends (a row, a reservation a crash left, a
	// void), cleanup finds it through this entry alone, without reading every kept row, and
	// recounts the slot's pending entry with the same read (cleanup.go).
	if err := l.s.putPlain(ctx, dueLookName(reservedAt.Add(l.cfg.PendingGrace), key), nil); err != nil {
		void()
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	// The shard read for the slot brings the last cleanup's high-water: a request it makes
	// stale is refused there (the handle's copy of the root may be a minute old, and its node
	// behind the one the cleanup read).
	var shardHW time.Time
	stale := func(hw time.Time) bool {
		shardHW = ledger.MaxTime(shardHW, hw)
		_, o, err := ledger.NewRow(d, l.cfg.Limits, ledger.MaxTime(now, hw), id)
		return err == nil && o != ledger.Admitted
	}
	shard, ok, err := l.reserve(ctx, key, res, now, stale)
	if errors.Is(err, errStale) {
		void()
		return ledger.Admission{Outcome: ledger.Stale, Key: key}, nil
	}
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	if !ok {
		void()
		return ledger.Admission{Outcome: ledger.Full, Key: key}, nil
	}
	if shardHW.After(now) {
		// The row's times start no lower than that high-water, so that no later decision on
		// it is made below it. The request is fresh there: every high-water read was checked.
		now = shardHW
		l.raiseHighWater(now)
		if row, outcome, err = ledger.NewRow(d, l.cfg.Limits, now, id); err != nil || outcome != ledger.Admitted {
			void()
			l.recountShard(ctx, shard, key)
			return ledger.Admission{}, fmt.Errorf("admit %s: fresh by every high-water read, %v at their highest: %w (%v)", key.Short(), outcome, ledger.ErrBusy, err)
		}
	}
	rd = rowData{Row: row, Shard: shard, Reservation: res.ID, ReservedAt: reservedAt.UnixNano(), Due: true}
	body, token, err := l.encode(kindRow, rd)
	if err != nil {
		return ledger.Admission{}, err
	}
	etag, err := l.s.put(ctx, rowName(key), body, token, resTag, false)
	if errors.Is(err, errRaced) {
		// The row made over this reservation is this admission's, whichever copy of the
		// write put it there.
		if ks, rerr := l.readKey(ctx, key); rerr == nil && ks.row != nil && ks.row.Reservation == res.ID {
			return ks.row.Row.Admission(ledger.Admitted), nil
		}
		// The reservation was voided (its slot given back) or taken over by another
		// admission of the delivery. This admission is over: give its slot back now, so that
		// Full keeps meaning the whole cap is in use, and let the caller decide again.
		l.recountShard(ctx, shard, key)
		return ledger.Admission{}, err
	}
	if err != nil {
		return ledger.Admission{}, fmt.Errorf("admit %s: %w", key.Short(), err)
	}
	l.remember(key, etag, rd)
	return row.Admission(ledger.Admitted), nil
}

// reserveKey writes the reservation res at d's key and returns its ETag. fresh reports that
// no admission that reserved the key since it was last empty can have sent a row write: the
// reservation was created on the empty key, or over a void that says so (NoRowWrite). A key that holds a row is
// answered by errRaced after remembering the row (the caller answers as a re-admission).
func (l *Ledger) reserveKey(ctx context.Context, d ledger.Delivery, res reservationData) (string, bool, error) {
	key := d.Key()
	body, token, err := l.encode(kindReservation, res)
	if err != nil {
		return "", false, err
	}
	etag, err := l.s.put(ctx, rowName(key), body, token, "", true)
	if err == nil {
		return etag, true, nil
	}
	if !errors.Is(err, errRaced) {
		return "", false, fmt.Errorf("admit %s: reserve: %w", key.Short(), err)
	}
	ks, err := l.readKey(ctx, key)
	switch {
	case err != nil:
		return "", false, fmt.Errorf("admit %s: %w", key.Short(), err)
	case ks.row != nil || ks.absent():
		return "", false, errRaced // a row (now remembered), or gone again: decide again
	}
	// Another admission's reservation: void, abandoned by a crash, or still in flight (the
	// same delivery admitted twice at once). Take the key over: that admission's row write
	// (If-Match on its own reservation) can no longer land, and its pending entry is recounted
	// as not its row's. Two admissions taking it from each other end when one writes its row.
	fresh := ks.res.Void && ks.res.NoRowWrite
	etag, err = l.s.put(ctx, rowName(key), body, token, ks.etag, false)
	if err != nil && !errors.Is(err, errRaced) {
		err = fmt.Errorf("admit %s: reserve: %w", key.Short(), err)
	}
	return etag, fresh, err
}

// finish prepares a row that just became done, abandoned or superseded (ledger.WriteEnd): the
// row names the subject records this handle asked for it, so that cleanup looks at them once
// the row is finished. A row its admission did not index in due/ (format 5) gets its end-time
// entry (before the row, by the caller's write).
func (l *Ledger) finish(ctx context.Context, rd *rowData) error {
	for _, s := range l.subjectsOf(rd.Row.Key) {
		if !slices.Contains(rd.Subjects, s) {
			rd.Subjects = append(rd.Subjects, s)
		}
	}
	if rd.Row.Permanent || rd.Due {
		return nil
	}
	return l.s.putPlain(ctx, endedPrefix+ledger.EndIndexName(&rd.Row), nil)
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

// Stats implements ledger.Ledger. It lists and reads every row.
func (l *Ledger) Stats(ctx context.Context) (ledger.Stats, error) {
	st := ledger.Stats{ByState: map[ledger.State]int64{}, Limits: l.cfg.Limits}
	root, _, err := l.readRoot(ctx)
	if err != nil {
		return st, err
	}
	st.HighWater = time.Unix(0, root.HighWater).UTC()
	st.Now = ledger.MaxTime(l.clock.Now(), st.HighWater, l.highWater())
	for i := range l.shards {
		sh, err := l.readShard(ctx, i)
		if err != nil {
			return st, err
		}
		st.CapacityUsed += sh.data.Used
	}
	if st.Subjects, err = l.countSubjects(ctx); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	after := ""
	for {
		names, more, err := l.s.list(ctx, rowsPrefix, after, 1000)
		if err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
		for _, n := range names {
			key, ok := keyOf(n)
			if !ok {
				continue
			}
			rd, _, err := l.getRow(ctx, key)
			if err := st.Count(&rd.Row, err); err != nil {
				return st, fmt.Errorf("stats: %w", err)
			}
		}
		if !more || len(names) == 0 {
			return st, nil
		}
		after = names[len(names)-1]
	}
}
