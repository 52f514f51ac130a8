package ledger

import "errors"

// Sentinel errors. Backends wrap them with context (the operation, the key, the file or
// object); callers match them with errors.Is.
//
// Wrapping: a backend wraps exactly one sentinel with %w, so errors.Is answers one class; the
// cause from below (an os or SDK error) is flattened into the message with %v, never wrapped,
// so no caller comes to depend on a storage library's error types. Where two failures are
// reported together (a write and its read-back), errors.Join keeps both messages.
var (
	// ErrLeaseLost: the lease's fence is stale, or the row's own lease has ended by the
	// ledger's effective now. The holder must drop its work: not save it, not publish it.
	ErrLeaseLost = errors.New("ledger: lease lost")
	// ErrFull: the record cap is in use; no new key can be admitted until cleanup frees room.
	ErrFull = errors.New("ledger: record cap reached")
	// ErrStale: the signed time is outside the accepted window.
	ErrStale = errors.New("ledger: signed time outside the accepted window")
	// ErrTooLarge: a state or report is over its ceiling. Nothing was written.
	ErrTooLarge = errors.New("ledger: over size limit")
	// ErrCorrupt: stored data does not decode or fails its checksum. The error names the file
	// or object. Nothing unreadable is ever treated as absent.
	ErrCorrupt = errors.New("ledger: corrupt data")
	// ErrRootMismatch: the stored root was created with other limits, is missing a part, or
	// was written by a newer format than this code reads.
	ErrRootMismatch = errors.New("ledger: root does not match configuration")
	// ErrUnknownDelivery: no row exists for the key (never admitted, or safely forgotten).
	ErrUnknownDelivery = errors.New("ledger: unknown delivery")
	// ErrUnknownSubject: no record exists for the subject key (nothing was published to it, or
	// its record was safely forgotten).
	ErrUnknownSubject = errors.New("ledger: unknown subject")
	// ErrBusy: a bounded wait for a lock or a maintenance lease ran out; try again later.
	ErrBusy = errors.New("ledger: busy")
	// ErrUnavailable: the backing store cannot be used right now (I/O failure, listing
	// failure). The operation left either nothing or its whole effect.
	ErrUnavailable = errors.New("ledger: store unavailable")
	// ErrConflict: a conditional write of a named record (StateStore) lost to another writer;
	// nothing was written. Read the record again and decide again.
	ErrConflict = errors.New("ledger: written by another writer first")
	// ErrInvalid: the caller passed something the contract does not allow (an empty binding,
	// a non-positive lease length, a staged result of another evaluation).
	ErrInvalid = errors.New("ledger: invalid request")
)
