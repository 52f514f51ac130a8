package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

type cachedRow struct {
	etag string
	data rowData
}

// keyState is what the store holds at a row's key: nothing, a reservation, or a row.
type keyState struct {
	row      *rowData
	res      *reservationData
	etag     string
	version  string
	modified time.Time
}

func (k keyState) absent() bool { return k.row == nil && k.res == nil }

// readKey reads whatever the store holds at key, fresh, and checks a row as stored
// (ledger.StoredRow.Check). Only a row is remembered.
func (l *Ledger) readKey(ctx context.Context, key ledger.Key) (keyState, error) {
	o, err := l.s.get(ctx, rowName(key))
	if errors.Is(err, errNotFound) {
		l.forget(key)
		return keyState{}, nil
	}
	if err != nil {
		return keyState{}, err
	}
	ks := keyState{etag: o.etag, version: o.version, modified: o.modified}
	name := l.s.key(rowName(key))
	if kindOf(o.body) == kindReservation {
		l.forget(key)
		var res reservationData
		if err := decode(name, kindReservation, o.body, &res); err != nil {
			return keyState{}, err
		}
		ks.res = &res
		return ks, nil
	}
	var rd rowData
	if err := decode(name, kindRow, o.body, &rd); err != nil {
		return keyState{}, err
	}
	if err := (&ledger.StoredRow{Row: rd.Row, Report: rd.Report}).Check(key, l.cfg.Limits); err != nil {
		return keyState{}, fmt.Errorf("%s: %w", name, err)
	}
	if rd.Shard < 0 || rd.Shard >= l.shards {
		// Its slot could never be released: a cleanup that judged it removable would fail on
		// the shard.
		return keyState{}, fmt.Errorf("%s: %w: the row names capacity shard %d of %d", name, ledger.ErrCorrupt, rd.Shard, l.shards)
	}
	l.remember(key, o.etag, rd)
	ks.row = &rd
	return ks, nil
}

// getRow reads a row fresh from the store. A key that holds no row (nothing, or only the
// reservation of an admission) is ErrUnknownDelivery.
func (l *Ledger) getRow(ctx context.Context, key ledger.Key) (rowData, string, error) {
	ks, err := l.readKey(ctx, key)
	if err != nil {
		return rowData{}, "", err
	}
	if ks.row == nil {
		return rowData{}, "", fmt.Errorf("%w: %s", ledger.ErrUnknownDelivery, key)
	}
	return *ks.row, ks.etag, nil
}

func (l *Ledger) remember(key ledger.Key, etag string, rd rowData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cache) >= maxCache {
		for k := range l.cache {
			delete(l.cache, k)
			break
		}
	}
	l.cache[key] = cachedRow{etag: etag, data: rd}
}

func (l *Ledger) forget(key ledger.Key) {
	l.mu.Lock()
	delete(l.cache, key)
	l.mu.Unlock()
}

func (l *Ledger) cached(key ledger.Key) (cachedRow, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.cache[key]
	return c, ok
}

// putRow writes a row over the version read (etag).
func (l *Ledger) putRow(ctx context.Context, rd rowData, etag string) error {
	body, token, err := l.encode(kindRow, rd)
	if err != nil {
		return err
	}
	newTag, err := l.s.put(ctx, rowName(rd.Row.Key), body, token, etag, false)
	if err != nil {
		l.forget(rd.Row.Key)
		return err
	}
	l.remember(rd.Row.Key, newTag, rd)
	return nil
}

// recordStore is the ledger.Store of a Ledger: ledger.Records runs the single-record
// operations over it.
type recordStore struct{ l *Ledger }

// ReadRow implements ledger.RowStore with a fresh read.
func (s recordStore) ReadRow(ctx context.Context, key ledger.Key) (ledger.StoredRow, error) {
	rd, _, err := s.l.getRow(ctx, key)
	if err != nil {
		return ledger.StoredRow{}, err
	}
	return ledger.StoredRow{Row: rd.Row, Report: rd.Report}, nil
}

// UpdateRow implements ledger.RowStore as an optimistic transaction: read (from this handle's
// cache when it has the row: the version its own last write or read returned), decide, write
// with If-Match. Every ledger.Write that changes the row (WriteLossy, WriteDurable, WriteEnd)
// is one conditional write, durable when answered; WriteNothing and ReadDurable write nothing
// (what was read is already durable). A write that loses, or any answer decided on cached data
// that is not a successful write, is decided again on a fresh read, so no answer ever rests on
// a stale copy. A runner's steps on one row (claim, save, complete) thus read only once, and
// again only after a conflict.
//
// A decision that depends on time (all but the timeless ones: complete and release) is made on
// the cached copy only while the store-clock estimate is steady (storeClock.Steady): a host
// that was suspended since the store's last answer (whose clock for elapsed time stopped) would
// find an ended lease live, or grant a lease that ends sooner than it says, so it decides on a
// fresh read, at the store's time of its answer.
func (s recordStore) UpdateRow(ctx context.Context, key ledger.Key, timeless bool, decide func(*ledger.StoredRow, time.Time) (ledger.Write, error)) error {
	l := s.l
	fresh := !timeless && !l.clock.Steady()
	for attempt := 0; attempt < maxRetries; attempt++ {
		var rd rowData
		var etag string
		if c, ok := l.cached(key); ok && !fresh {
			rd, etag = cloneRow(c.data), c.etag
		} else {
			var err error
			if rd, etag, err = l.getRow(ctx, key); err != nil {
				return err
			}
			fresh = true
		}
		sr := ledger.StoredRow{Row: rd.Row, Report: rd.Report}
		w, ferr := decide(&sr, l.nowFor(&rd.Row))
		rd.Row, rd.Report = sr.Row, sr.Report
		switch w {
		case ledger.WriteNothing, ledger.ReadDurable, ledger.WriteLossy, ledger.WriteDurable, ledger.WriteEnd:
		default: // a decision this store does not know how to write: nothing is answered as written
			return errors.Join(ferr, fmt.Errorf("%w: unknown write %d of a row", ledger.ErrInvalid, w))
		}
		write := w == ledger.WriteLossy || w == ledger.WriteDurable || w == ledger.WriteEnd
		if w == ledger.WriteEnd {
			if err := l.finish(ctx, &rd); err != nil {
				write, ferr = false, err
			}
		}
		if !write {
			if !fresh {
				fresh = true
				continue
			}
			return ferr
		}
		if err := l.putRow(ctx, rd, etag); err != nil {
			if errors.Is(err, errRaced) {
				fresh = true
				continue
			}
			return err
		}
		// The write's If-Match proves the data decided on was current, cached or not.
		return ferr
	}
	return fmt.Errorf("%w: %d conflicting writers in a row", ledger.ErrBusy, maxRetries)
}

func cloneRow(rd rowData) rowData {
	out := rd
	out.Row.Change = append([]byte(nil), rd.Row.Change...)
	out.Report = append([]byte(nil), rd.Report...)
	return out
}
