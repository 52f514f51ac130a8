package ledger

import (
	"context"
	"fmt"
	"regexp"
)

// StateStore keeps small named records beside the rows, for the controller's own bookkeeping
// (a catch-up cursor per webhook). A record is read with its version and written only on the
// version read: of two writers that read the same version, exactly one wins, and a write held
// in flight that lands after another one was made cannot put an older record back (the version
// it names is gone). Versions never repeat for a name, even when identical bytes are written
// again. Records are never removed; each is bounded by MaxStateBytes.
type StateStore interface {
	// ReadState returns the record stored under name with its version, or a StateRecord with
	// an empty Version when there is none. A record that does not decode is ErrCorrupt, never
	// taken for absent.
	ReadState(ctx context.Context, name string) (StateRecord, error)

	// WriteState replaces the record under name with data if its version is still version
	// (empty: only if there is no record yet), and returns the new version. It answers
	// ErrConflict, writing nothing, when another write came first; ErrTooLarge, writing
	// nothing, for data over MaxStateBytes; ErrInvalid for a name outside StateName's rule.
	// ErrUnavailable leaves the outcome unknown: read the record again.
	WriteState(ctx context.Context, name string, data []byte, version string) (string, error)
}

// StateRecord is one named record and the version it was read at.
type StateRecord struct {
	Data []byte
	// Version is opaque; empty means the record does not exist.
	Version string
}

// MaxStateBytes bounds the data of one named record.
const MaxStateBytes = 256 << 10

var stateName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,99}$`)

// CheckState reports a name or data the contract does not store: a name must be 1 to 100 of
// a-z, 0-9, '-' and '_', starting with a letter or digit (so it is a file or object name on
// every backend, and never a path), and data at most MaxStateBytes.
func CheckState(name string, data []byte) error {
	if !stateName.MatchString(name) {
		return fmt.Errorf("%w: state name %q: want 1-100 of a-z, 0-9, '-', '_'", ErrInvalid, name)
	}
	if len(data) > MaxStateBytes {
		return fmt.Errorf("%w: state %s is %d bytes, the ceiling is %d", ErrTooLarge, name, len(data), MaxStateBytes)
	}
	return nil
}
