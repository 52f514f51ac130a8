package objstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// recountAll recounts every shard's pending entries and returns the keys still pending
// (admissions that may still create their row), the slots the shards count, and the shards as
// it left them. A shard is written only when recounting changed it. It judges an entry whose key
// known holds (read by the pass: an admission's look comes a grace after its reservation, so
// every entry of an admission that ended is judged by then without a read of its own), and an
// entry whose look should have come by now (lookLate past the grace: a format 5 admission,
// which asked for none), by reading its key; a younger one is an admission in flight, or one
// whose look is still to come.
//
// only, when not nil, names the shards to recount (the others are not read: their states are
// left zero, and their pending entries are not answered).
func (l *Ledger) recountAll(ctx context.Context, now time.Time, known map[ledger.Key]keyState, only map[int]bool) (map[ledger.Key]bool, int64, []shardVersion, error) {
	pending := map[ledger.Key]bool{}
	if known == nil {
		known = map[ledger.Key]keyState{}
	}
	var used int64
	states := make([]shardVersion, l.shards)
	for i := range l.shards {
		if only != nil && !only[i] {
			continue
		}
		for attempt := 0; ; attempt++ {
			if attempt == maxRetries {
				return nil, 0, nil, fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
			}
			st, err := l.readShard(ctx, i)
			if err != nil {
				return nil, 0, nil, err
			}
			changed, err := l.recountWith(ctx, &st.data, now, recountCleanup, ledger.Key{}, known)
			if err != nil {
				return nil, 0, nil, err
			}
			if changed {
				tag, err := l.writeShard(ctx, i, st)
				if errors.Is(err, errRaced) {
					continue
				} else if err != nil {
					return nil, 0, nil, err
				}
				st.etag = tag
			}
			states[i] = st
			for _, p := range st.data.Pending {
				pending[p.Key] = true
			}
			used += st.data.Used
			break
		}
	}
	return pending, used, states, nil
}

// raiseShards persists now as the high-water of every capacity shard whose high-water is lower
// (an admission reads it with its shard and refuses what it makes stale): cleanup does it
// before it deletes a row. known are the shards as recountAll left them: each is written over
// that version, and read again only if it changed since.
func (l *Ledger) raiseShards(ctx context.Context, now time.Time, known []shardVersion) error {
	for i := range l.shards {
		st := known[i]
		for attempt := 0; ; attempt++ {
			if attempt == maxRetries {
				return fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
			}
			if attempt > 0 || st.etag == "" {
				var err error
				if st, err = l.readShard(ctx, i); err != nil {
					return err
				}
			}
			if st.data.HighWater >= now.UnixNano() {
				break
			}
			st.data.HighWater = now.UnixNano()
			if _, err := l.writeShard(ctx, i, st); errors.Is(err, errRaced) {
				continue
			} else if err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// upgradeShards writes again, in this format, every capacity shard last written by an older
// one. An older build refuses a shard of this format ("written by format N") and takes no slot
// from it: once every shard is written so, a build still running the older format (a fleet
// rolling forward) can make no row the older way, which indexes nothing in due/. Cleanup does
// it before a lap of its safety net starts, so that the lap finds every such row.
func (l *Ledger) upgradeShards(ctx context.Context) error {
	for i := range l.shards {
		for attempt := 0; ; attempt++ {
			if attempt == maxRetries {
				return fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
			}
			st, err := l.readShard(ctx, i)
			if err != nil {
				return err
			}
			if st.format >= FormatVersion {
				break
			}
			if _, err := l.writeShard(ctx, i, st); errors.Is(err, errRaced) {
				continue
			} else if err != nil {
				return fmt.Errorf("write %s in format %d: %w", l.s.key(capacityName(i)), FormatVersion, err)
			}
			break
		}
	}
	return nil
}

// release gives back n slots of a shard for batch id, once.
func (l *Ledger) release(ctx context.Context, shard int, n int64, id uint64) error {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, err := l.readShard(ctx, shard)
		if err != nil {
			return err
		}
		if st.data.AppliedBatch >= id {
			return nil
		}
		if n > st.data.Used {
			return fmt.Errorf("%w: %s counts %d slots, batch %d would release %d", ledger.ErrCorrupt,
				l.s.key(capacityName(shard)), st.data.Used, id, n)
		}
		st.data.Used -= n
		st.data.AppliedBatch = id
		_, err = l.writeShard(ctx, shard, st)
		if !errors.Is(err, errRaced) {
			return err
		}
	}
	return fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, shard)
}

// capacityName is capacity shard i's object (localfs's shardName is a row folder's name).
func capacityName(i int) string { return fmt.Sprintf("capacity/%02d.json", i) }

func (l *Ledger) homeShard(k ledger.Key) int { return int(k[1]) % l.shards }

// recountShard recounts the entries of focus in shard i, best effort (a failure leaves them to
// the next recount).
func (l *Ledger) recountShard(ctx context.Context, i int, focus ledger.Key) {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, err := l.readShard(ctx, i)
		if err != nil {
			return
		}
		changed, err := l.recount(ctx, &st.data, l.nowFor(nil), recountFocus, focus)
		if err != nil || !changed {
			return
		}
		if _, err := l.writeShard(ctx, i, st); !errors.Is(err, errRaced) {
			return
		}
	}
}

// shardVersion is a shard as read, with its ETag and the format it was written with.
type shardVersion struct {
	data   shardData
	etag   string
	format int
}

func (l *Ledger) readShard(ctx context.Context, i int) (shardVersion, error) {
	o, err := l.s.get(ctx, capacityName(i))
	if errors.Is(err, errNotFound) {
		return shardVersion{}, fmt.Errorf("%w: %s is missing: capacity cannot be rebuilt by guessing", ledger.ErrRootMismatch, l.s.key(capacityName(i)))
	}
	if err != nil {
		return shardVersion{}, err
	}
	var sd shardData
	if err := decode(l.s.key(capacityName(i)), kindShard, o.body, &sd); err != nil {
		return shardVersion{}, err
	}
	if sd.Used < 0 || sd.Quota != l.cfg.Limits.ShardQuota(l.shards, i) {
		return shardVersion{}, fmt.Errorf("%w: %s holds used %d, quota %d (want %d)", ledger.ErrCorrupt, l.s.key(capacityName(i)), sd.Used, sd.Quota, l.cfg.Limits.ShardQuota(l.shards, i))
	}
	st := shardVersion{data: sd, etag: o.etag, format: formatOf(o.body)}
	l.rememberShard(i, st)
	return st, nil
}

// writeShard writes shard i over the version read, and answers the new version's ETag.
func (l *Ledger) writeShard(ctx context.Context, i int, st shardVersion) (string, error) {
	body, token, err := l.encode(kindShard, st.data)
	if err != nil {
		return "", err
	}
	tag, err := l.s.put(ctx, capacityName(i), body, token, st.etag, false)
	if err == nil {
		st.etag, st.format = tag, FormatVersion
		l.rememberShard(i, st)
	}
	return tag, err
}

// rememberShard keeps shard i as this handle last read or wrote it; cachedShard answers it
// (a copy: its pending entries are the caller's to change).
func (l *Ledger) rememberShard(i int, st shardVersion) {
	st.data.Pending = slices.Clone(st.data.Pending)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shardCache == nil {
		l.shardCache = map[int]shardVersion{}
	}
	l.shardCache[i] = st
}

func (l *Ledger) cachedShard(i int) (shardVersion, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.shardCache[i]
	st.data.Pending = slices.Clone(st.data.Pending)
	return st, ok
}

// errStale: the shard's high-water makes the request being admitted stale.
var errStale = errors.New("stale by the shard's high-water")

// reserve takes a slot for the reservation res of key: from its home shard, or, only when that
// one is full, from any other shard with room. Before it answers that every shard is full, it
// judges every pending entry older than the grace in every shard, so that Full means the whole
// cap is in use by rows and by admissions in flight (a young entry is one, or finished with its
// row: judging it would not free its slot). ok is false when every shard is full; errStale
// when a shard's high-water makes the request stale (stale says whether a high-water does).
func (l *Ledger) reserve(ctx context.Context, key ledger.Key, res reservationData, now time.Time, stale func(time.Time) bool) (int, bool, error) {
	home := l.homeShard(key)
	order := append([]int{home}, rand.Perm(l.shards)...)
	for _, mode := range []recountMode{recountBudgeted, recountOld} {
		tried := map[int]bool{}
		for _, i := range order {
			if tried[i] {
				continue
			}
			tried[i] = true
			ok, err := l.reserveIn(ctx, i, key, res, now, mode, stale)
			if err != nil || ok {
				return i, ok, err
			}
		}
	}
	return 0, false, nil
}

// Its first attempt decides on the shard as this handle last read or wrote it, without a read:
// only a successful write (If-Match on that version) makes the decision count, and any other
// outcome reads the shard again. A warm ingress alone on its shards thus takes a slot in one
// request.
func (l *Ledger) reserveIn(ctx context.Context, i int, key ledger.Key, res reservationData, now time.Time, mode recountMode, stale func(time.Time) bool) (bool, error) {
	for attempt := 0; attempt < maxRetries; attempt++ {
		st, cached := l.cachedShard(i)
		if attempt > 0 || !cached {
			var err error
			if st, err = l.readShard(ctx, i); err != nil {
				return false, err
			}
		}
		for _, p := range st.data.Pending {
			if p.Reservation == res.ID {
				return true, nil // this admission's slot: an earlier write of it landed
			}
		}
		if stale != nil && stale(time.Unix(0, st.data.HighWater)) {
			return false, errStale
		}
		changed, err := l.recount(ctx, &st.data, now, mode, key)
		if err != nil {
			return false, err
		}
		if st.data.Used >= st.data.Quota {
			if cached && attempt == 0 {
				continue // full as cached: Full is answered on a fresh read only
			}
			if changed {
				if _, err := l.writeShard(ctx, i, st); err != nil && !errors.Is(err, errRaced) {
					return false, err
				}
			}
			return false, nil
		}
		st.data.Used++
		st.data.Pending = append(st.data.Pending, pendingEntry{Key: key, At: now.UnixNano(), Reservation: res.ID})
		_, err = l.writeShard(ctx, i, st)
		if errors.Is(err, errRaced) {
			continue // read again: the entry is there if a copy of this write landed
		}
		return err == nil, err
	}
	return false, fmt.Errorf("%w: capacity shard %d contended", ledger.ErrBusy, i)
}

// recountMode says which pending entries a recount judges.
type recountMode int

const (
	// recountBudgeted (an admission): entries older than the grace (or any entry, once the
	// shard holds more than pendingSoftCap), at most recountBudget of them, oldest first, so
	// that an admission's requests stay bounded whatever the recent traffic; and every entry
	// of the focus key.
	recountBudgeted recountMode = iota
	// recountFocus: only the entries of the focus key.
	recountFocus
	// recountOld (before answering Full): every entry older than the grace, and the entries of
	// the focus key, besides the budget of younger ones when the shard is crowded.
	recountOld
	// recountCleanup (cleanup): the entries whose key the pass read (no read of their own),
	// and every entry older than the grace and lookLate; an admission still in flight keeps
	// its entry.
	recountCleanup
)

// lookLate is how long past the grace an admission's look at its key (due/, cleanup.go) may
// come: an entry still pending then is judged by a read of its own.
const lookLate = 2 * lookEvery

// recountBudget bounds the entries one admission judges (one read of a key each); past
// pendingSoftCap entries, young ones are judged too (those whose row exists are dropped), so
// the list stays short under any admission rate.
const (
	recountBudget  = 4
	pendingSoftCap = 64
)

// recount drops the pending entries whose admission is over, giving back the slot of each that
// made no row. An entry is judged by what its key holds: its own row keeps the slot; anything
// else (nothing, another reservation, a row made over another reservation) gives it back; its
// own reservation, still there and older than the grace (by the store's time), is first voided
// by a conditional write, so the admission's row write, held however long, can never land
// afterwards. Which entries are judged depends on mode; focus is the key an admission has
// just reserved (an earlier, interrupted or outrun admission of the same delivery left its
// entry). It reports whether the shard changed.
func (l *Ledger) recount(ctx context.Context, sd *shardData, now time.Time, mode recountMode, focus ledger.Key) (bool, error) {
	return l.recountWith(ctx, sd, now, mode, focus, nil)
}

// recountWith is recount, judging the entries of the keys known holds (as read just before)
// without reading them again.
func (l *Ledger) recountWith(ctx context.Context, sd *shardData, now time.Time, mode recountMode, focus ledger.Key, known map[ledger.Key]keyState) (bool, error) {
	keep := sd.Pending[:0:0]
	budget := recountBudget
	crowded := len(sd.Pending) > pendingSoftCap
	for _, p := range sd.Pending {
		old := now.Sub(time.Unix(0, p.At)) > l.cfg.PendingGrace
		judge := p.Key == focus
		seen, isKnown := known[p.Key]
		switch mode {
		case recountCleanup:
			judge = isKnown || now.Sub(time.Unix(0, p.At)) > l.cfg.PendingGrace+lookLate
		case recountOld:
			if !judge && old {
				judge = true
				break
			}
			fallthrough
		case recountBudgeted:
			if !judge && (old || crowded) && budget > 0 {
				judge = true
				budget--
			}
		}
		if !judge {
			keep = append(keep, p)
			continue
		}
		var ks *keyState
		if isKnown {
			ks = &seen
		}
		mine, err := l.judgePending(ctx, p, old, ks)
		if err != nil {
			return false, err
		}
		switch mine {
		case entryInFlight:
			keep = append(keep, p)
		case entryFree:
			if sd.Used > 0 {
				sd.Used--
			}
		}
	}
	changed := len(keep) != len(sd.Pending)
	sd.Pending = keep
	if len(sd.Pending) > maxPending {
		return changed, fmt.Errorf("%w: %d admissions pending in one capacity shard", ledger.ErrBusy, len(sd.Pending))
	}
	return changed, nil
}

// The verdicts on a pending entry.
const (
	entryInFlight = iota // its admission may still create its row: keep it
	entryRow             // its row exists: the slot is the row's
	entryFree            // its admission is over without a row: give the slot back
)

// judgePending judges one pending entry by what its key holds, read now; or, when seen (what
// the pass read of the key just before) holds the entry's own row, by that: a row stays until
// cleanup removes it. Anything else seen may have changed since (the entry's own reservation
// or row landing after the read), so it is read again.
func (l *Ledger) judgePending(ctx context.Context, p pendingEntry, old bool, seen *keyState) (int, error) {
	if seen != nil && seen.row != nil && p.Reservation != "" && seen.row.Reservation == p.Reservation {
		return entryRow, nil
	}
	ks, err := l.readKey(ctx, p.Key)
	if errors.Is(err, ledger.ErrCorrupt) {
		return entryInFlight, nil // unreadable: keep the slot (an overstatement); cleanup reports it
	}
	if err != nil {
		return 0, err
	}
	switch {
	case p.Reservation == "":
		// Format 1: the row was created with If-None-Match alone. A format 1 row at the key
		// is its row; a format 2 row or reservation was made by another admission (the
		// format 1 one died, or is still going and cannot land while the key is taken).
		switch {
		case ks.row != nil && ks.row.Reservation == "":
			return entryRow, nil
		case !old:
			return entryInFlight, nil
		}
	case ks.row != nil && ks.row.Reservation == p.Reservation:
		return entryRow, nil
	case ks.res != nil && ks.res.ID == p.Reservation && !ks.res.Void:
		if !old {
			return entryInFlight, nil
		}
		// Void it first: the admission's row write (If-Match on this reservation), however
		// long it is held, can then never land, since the void stays at the key until a later
		// admission takes it over.
		void := *ks.res
		void.Void, void.VoidedAt = true, l.nowFor(nil).Add(time.Second).UnixNano()
		body, token, err := l.encode(kindReservation, void)
		if err != nil {
			return 0, err
		}
		if _, err := l.s.put(ctx, rowName(p.Key), body, token, ks.etag, false); err != nil {
			if errors.Is(err, errRaced) {
				return l.judgePending(ctx, p, old, nil) // the admission wrote its row meanwhile
			}
			return 0, err
		}
		return entryFree, nil
	}
	if ks.absent() {
		// Nothing at the key: take it with a void first, so that no copy of this admission's
		// reservation PUT (or, format 1, of its row create), landing however late, finds the
		// key empty once the slot is given back.
		void := reservationData{At: p.At, Void: true, VoidedAt: l.nowFor(nil).Add(time.Second).UnixNano()}
		if void.ID, err = l.token(); err != nil {
			return 0, err
		}
		body, token, err := l.encode(kindReservation, void)
		if err != nil {
			return 0, err
		}
		if _, err := l.s.put(ctx, rowName(p.Key), body, token, "", true); err != nil {
			if errors.Is(err, errRaced) {
				return l.judgePending(ctx, p, old, nil) // something landed meanwhile
			}
			return 0, err
		}
	}
	// The key holds a void, or another admission's reservation or row: this entry's row write
	// (If-Match on its own reservation) cannot land while it does, and a key that held a
	// reservation whose admission may have sent a row write is emptied only when cleanup
	// removes a row.
	return entryFree, nil
}
