package ledger

import (
	"context"
	"fmt"
	"time"
)

// Store is what a backend provides so that Records can run the single-record operations of
// Ledger over it: for one record (a row, a subject record) a read of it as stored, and one
// decision on it run as a transaction the backend makes atomic its own way. The decisions, and
// the procedure around each (validation, what an answer needs, what a finished row drops), are
// Records'; a Store only reads, writes as a decision asks, and says nothing about what a record
// means.
//
// A transaction runs its decision on the record at the record's effective now (the largest of
// the backend's clock, the record's own last transition and the high-water the backend
// persists) and writes the result as the decision's Write asks. The decision may run more than
// once (a backend that decided on a copy, or lost a conditional write, decides again on a fresh
// read): it must start from the record it is given each time, and only the last run answers.
// A refusal that asks for a write (it recorded the effective now, so that a clock stepping back
// cannot undo it) is written, and the refusal answered; a write that fails is an error.
type Store interface {
	RowStore
	SubjectStore
}

// RowStore is the part of Store that keeps rows.
type RowStore interface {
	// ReadRow reads the row at key fresh, with the report it keeps; a key that holds no row is
	// ErrUnknownDelivery, a row that cannot be decoded ErrCorrupt.
	ReadRow(ctx context.Context, key Key) (StoredRow, error)
	// UpdateRow runs decide on the row at key as one transaction. timeless says the decision
	// does not depend on the time it is made at (Complete, Release): a backend that may decide
	// on a cached copy can do so even when its clock cannot be trusted for elapsed time. A key
	// that holds no row is ErrUnknownDelivery, and decide is not run.
	UpdateRow(ctx context.Context, key Key, timeless bool, decide func(row *StoredRow, now time.Time) (Write, error)) error
}

// SubjectStore is the part of Store that keeps subject records.
type SubjectStore interface {
	// ReadSubject reads the subject record of k fresh; exists is false when there is none.
	ReadSubject(ctx context.Context, k SubjectKey) (rec SubjectRecord, exists bool, err error)
	// UpdateSubject runs decide on the subject record of k as one transaction; decide makes the
	// record when exists is false. landed is when the version decided on landed by the
	// store's clock, where the backend knows it (zero otherwise). create says the request
	// creates the record more often than not (a verdict of a commit nothing was published to):
	// a backend that decides on no record without reading it first may do so. A decision that
	// refuses asks for no write.
	UpdateSubject(ctx context.Context, k SubjectKey, create bool, decide func(rec *SubjectRecord, exists bool, landed, now time.Time) (Write, error)) error
	// SubjectAsked is told, before the request is decided, that the verdict of row asked to be
	// published to the subject k, for a backend whose cleanup looks at a finished row's
	// subject records through the row.
	SubjectAsked(row Key, k SubjectKey)
}

// StoredRow is a row as a backend keeps it: the row and the report it keeps (a saved row's,
// and an abandoned row's so that Revive can publish it again). A backend's own stored form may
// hold more (its capacity slot, its index bookkeeping); a decision sees and changes only this.
type StoredRow struct {
	Row    Row
	Report []byte
}

// Check reports whether row, as a backend read it back at key, is a row the ledger can have
// stored there under limits: consistent in itself (Row.Check) and key's; its change and report
// within the ceilings; a row that keeps its report (saved, or abandoned with one: a version that
// did not keep reports abandoned rows with none) holding the bytes its digest names, and a row in
// any other state holding none (a done or superseded row drops its report; an unsaved row has
// none yet). It is the check of a record as stored every backend makes after decoding its own
// framing. Every failure wraps ErrCorrupt and says what is wrong; the backend names the file or
// object.
func (row *StoredRow) Check(key Key, limits Limits) error {
	if err := row.Row.Check(); err != nil {
		return err
	}
	keeps := row.Row.State == StateSaved || (row.Row.State == StateAbandoned && len(row.Report) > 0)
	switch {
	case row.Row.Key != key:
		return fmt.Errorf("%w: holds the row of %s, not of %s", ErrCorrupt, row.Row.Key, key)
	case len(row.Row.Change) > limits.MaxChangeBytes:
		return fmt.Errorf("%w: row change of %d bytes over the ceiling %d", ErrCorrupt, len(row.Row.Change), limits.MaxChangeBytes)
	case len(row.Report) > limits.MaxReportBytes:
		return fmt.Errorf("%w: row report of %d bytes over the ceiling %d", ErrCorrupt, len(row.Report), limits.MaxReportBytes)
	case keeps && !row.keepsReport():
		return fmt.Errorf("%w: the %v row's report does not match the digest it recorded", ErrCorrupt, row.Row.State)
	case !keeps && len(row.Report) > 0:
		return fmt.Errorf("%w: a %v row holds a report", ErrCorrupt, row.Row.State)
	}
	return nil
}

// Write is how the result of a decision must be written before it is answered, in words every
// backend means the same thing by. A file backend maps them to what it syncs; an object store,
// whose every write is durable when answered, to one conditional write or none.
type Write int

const (
	// WriteNothing: nothing changed, and the answer needs nothing of the store.
	WriteNothing Write = iota
	// WriteLossy: a change that a host crash may undo, because that crash also ends every
	// process that relied on it (a claim, a renewal, a release: its holder dies with the
	// host, and the record as its last durable write left it is a safe state).
	WriteLossy
	// WriteDurable: a change that someone outside the host relies on as soon as it is
	// answered (a saved verdict is published next; an operator's revive; a grant to post),
	// so it must survive a host crash before the answer.
	WriteDurable
	// ReadDurable: nothing changed, but the answer relies on what was read as above (a
	// repeated Save or Revive, answered again): what was read must survive a host crash
	// before the answer. A process may have died between another's write and its sync.
	ReadDurable
	// WriteEnd: the change finished the row (done, abandoned or superseded). The store first
	// writes what its cleanup needs to find a finished row (its end-time index entry), then
	// the row, as WriteLossy: a lost end leaves the row as it was, finished again later with
	// the same bytes.
	WriteEnd
)
