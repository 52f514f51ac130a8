package objstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Subject records: subjects/<subject key>.json, one per commit and status context published to
// (ledger.SubjectRecord decides every change), each changed by one conditional write as a row
// is: created with If-None-Match, changed with If-Match on the version read, with a write token
// to recognise a write whose answer was lost.
//
// A request held in flight cannot bring a forgotten record back: cleanup forgets a record only
// when no verdict can land on it any more and no write to it can land either
// (ledger.SubjectRecord.Forgettable): its last write, by the store's clock (the version's
// LastModified and the record's own UpdatedAt), is more than RequestLife old. The horizon alone is
// not enough: a record made for verdicts published late (after an outage, or revived) is past
// it the moment it is made, and a copy of its create (If-None-Match, landing on the empty key)
// would restore it as its oldest verdict left it, with copies of the writes that followed it
// (each attempt of a write carries the same bytes, so the same ETag) landing over it.

const subjectsPrefix = "subjects/"

func subjectName(k ledger.SubjectKey) string { return subjectsPrefix + k.String() + ".json" }

// readSubject reads a subject record fresh; exists is false when there is none.
func (l *Ledger) readSubject(ctx context.Context, k ledger.SubjectKey) (rec ledger.SubjectRecord, o object, exists bool, err error) {
	o, err = l.s.get(ctx, subjectName(k))
	if errors.Is(err, errNotFound) {
		return rec, o, false, nil
	}
	if err != nil {
		return rec, o, false, err
	}
	return l.decodeSubject(k, o)
}

// decodeSubject decodes the subject record of k read as o (no ETag: none exists) and checks it
// as stored (ledger.SubjectRecord.CheckStored).
func (l *Ledger) decodeSubject(k ledger.SubjectKey, o object) (rec ledger.SubjectRecord, _ object, exists bool, err error) {
	if o.etag == "" {
		return rec, o, false, nil
	}
	name := l.s.key(subjectName(k))
	if err := decode(name, kindSubject, o.body, &rec); err != nil {
		return rec, o, false, err
	}
	if err := rec.CheckStored(k); err != nil {
		return rec, o, false, fmt.Errorf("%s: %w", name, err)
	}
	return rec, o, true, nil
}

// ReadSubject implements ledger.SubjectStore with a fresh read.
func (s recordStore) ReadSubject(ctx context.Context, k ledger.SubjectKey) (ledger.SubjectRecord, bool, error) {
	rec, _, exists, err := s.l.readSubject(ctx, k)
	return rec, exists, err
}

// SubjectAsked implements ledger.SubjectStore: the row's verdict asked for k (noteSubject).
func (s recordStore) SubjectAsked(row ledger.Key, k ledger.SubjectKey) { s.l.noteSubject(row, k) }

// UpdateSubject implements ledger.SubjectStore as an optimistic transaction: decide, write with
// If-None-Match (a new record) or If-Match (the version decided on), one conditional write for
// every ledger.Write that changes the record; a write that loses is decided again on a fresh
// read. The decision is told when the version landed, by the store's clock (its LastModified).
//
// While the store-clock estimate is steady (storeClock.Steady) the first decision is made
// without a read: on the version this handle's own last write returned (a report follows its
// grant), or, with create and no such version, on no record at all (a verdict of a commit
// nothing was published to yet creates the record). Only a successful write makes such a
// decision an answer; anything else is decided again on a fresh read, at the store's time of
// its answer. A create answered later than createAnsweredLate after its decision is decided
// again on a fresh read too.
func (s recordStore) UpdateSubject(ctx context.Context, k ledger.SubjectKey, create bool,
	decide func(rec *ledger.SubjectRecord, exists bool, landed, now time.Time) (ledger.Write, error)) error {
	l := s.l
	var back *object // what a lost write read back: the record as the store holds it
	for attempt := 0; attempt < maxRetries; attempt++ {
		var rec ledger.SubjectRecord
		var o object
		var exists, fresh bool
		var err error
		switch c, ok := l.cachedSubject(k); {
		case back != nil:
			if rec, o, exists, err = l.decodeSubject(k, *back); err != nil {
				return err
			}
			fresh, back = true, nil
		case attempt == 0 && ok && l.clock.Steady():
			rec, o, exists = c.rec, object{etag: c.etag, modified: c.landed}, true
		case attempt > 0 || !create || !l.clock.Steady():
			if rec, o, exists, err = l.readSubject(ctx, k); err != nil {
				return err
			}
			fresh = true
		}
		now := rec.Now(l.nowFor(nil), time.Time{})
		w, err := decide(&rec, exists, o.modified, now)
		if w != ledger.WriteNothing && w != ledger.WriteLossy && w != ledger.WriteDurable {
			return errors.Join(err, fmt.Errorf("%w: unknown write %d of a subject record", ledger.ErrInvalid, w))
		}
		if err != nil || w == ledger.WriteNothing {
			if !fresh {
				continue // decided on a copy: only a fresh read may answer
			}
			return err
		}
		body, token, err := l.encode(kindSubject, rec)
		if err != nil {
			return err
		}
		tag, got, err := l.s.putBack(ctx, subjectName(k), body, token, o.etag, !exists)
		if err != nil {
			l.forgetSubject(k)
			if errors.Is(err, errRaced) {
				back = &got // decided again on what it read back (no ETag: no record)
				continue
			}
			return err
		}
		answered := l.nowFor(nil)
		if !exists && answered.Sub(now) > createAnsweredLate {
			// A create answered long after it was decided (its host suspended, or the request
			// held, in between) may have landed on a key emptied meanwhile: the record it made
			// says it was made at the decision, which may be before the horizon of verdicts
			// older than one that stood on a record since forgotten. Its decision is no
			// answer: it is decided again on a fresh read, which takes the record as made no
			// earlier than it landed.
			l.forgetSubject(k)
			continue
		}
		l.rememberSubject(k, tag, rec, answered)
		return nil
	}
	return fmt.Errorf("%w: %d conflicting writers in a row", ledger.ErrBusy, maxRetries)
}

// createAnsweredLate is how long after its decision a subject record's create may be answered
// and still answer that decision. A record made anew may read up to readingsApart behind the
// cleaner's now (ledger.SubjectRecord.Forgettable's behind): the nodes' 10 seconds and the
// estimate's lag take part of that minute, and a create answered within this bound takes no
// more than the rest.
const createAnsweredLate = 30 * time.Second

// cachedSubject is a subject record as this handle's last write of it left it.
type cachedSubject struct {
	etag   string
	rec    ledger.SubjectRecord
	landed time.Time
}

func (l *Ledger) rememberSubject(k ledger.SubjectKey, etag string, rec ledger.SubjectRecord, landed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subjectCache == nil {
		l.subjectCache = map[ledger.SubjectKey]cachedSubject{}
	}
	if _, ok := l.subjectCache[k]; !ok && len(l.subjectCache) >= maxCache {
		for old := range l.subjectCache {
			delete(l.subjectCache, old)
			break
		}
	}
	l.subjectCache[k] = cachedSubject{etag: etag, rec: rec, landed: landed}
}

func (l *Ledger) forgetSubject(k ledger.SubjectKey) {
	l.mu.Lock()
	delete(l.subjectCache, k)
	l.mu.Unlock()
}

func (l *Ledger) cachedSubject(k ledger.SubjectKey) (cachedSubject, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.subjectCache[k]
	return c, ok
}

// noteSubject remembers that the verdict of row key asked to be published to subject k: the
// row names it when it is finished (finish), and cleanup then looks at the record. Bounded as
// the row cache is: a row this handle forgot names no subject, and its record is found by the
// safety net's lap.
func (l *Ledger) noteSubject(key ledger.Key, k ledger.SubjectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subjects == nil {
		l.subjects = map[ledger.Key][]ledger.SubjectKey{}
	}
	if _, ok := l.subjects[key]; !ok && len(l.subjects) >= maxCache {
		for k := range l.subjects {
			delete(l.subjects, k)
			break
		}
	}
	if !slices.Contains(l.subjects[key], k) {
		l.subjects[key] = append(l.subjects[key], k)
	}
}

// subjectsOf answers the subject records the verdict of row key asked for through this handle.
func (l *Ledger) subjectsOf(key ledger.Key) []ledger.SubjectKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.subjects[key])
}

// countSubjects counts the subject records, for Stats.
func (l *Ledger) countSubjects(ctx context.Context) (int64, error) {
	var n int64
	for after := ""; ; {
		names, more, err := l.s.list(ctx, subjectsPrefix, after, 1000)
		if err != nil {
			return 0, err
		}
		n += int64(len(names))
		if !more || len(names) == 0 {
			return n, nil
		}
		after = names[len(names)-1]
	}
}
