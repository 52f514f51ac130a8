package localfs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/amiss-ci/amiss/ledger"
)

// Named state records (ledger.StateStore): .amiss-state.<name> in the root folder, one frame
// each, holding the data and a sequence number that is its version. A write takes the clock
// lock (the last lock of the order, so it may be taken alone), compares the sequence on disk
// with the version the caller read, and replaces the file atomically with the next sequence,
// durably before it answers. The sequence only grows, so a version never comes back. Readers
// take no lock: the file is replaced whole. A temporary file left by a crash is root debris,
// collected under the clock lock that its writer held.

var _ ledger.StateStore = (*Ledger)(nil)

// stateFilePrefix starts the name of every named state record in the root folder.
const stateFilePrefix = ".amiss-state."

// namedState is the payload of a named state record.
type namedState struct {
	Seq  uint64 `json:"seq"`
	Data []byte `json:"data"`
}

func (r *root) namedStatePath(name string) string { return r.path(stateFilePrefix + name) }

func decodeNamedState(data []byte) (namedState, error) {
	var s namedState
	_, err := decodeJSON(kindState, data, maxStatePayload, &s)
	if err == nil && s.Seq == 0 {
		err = fmt.Errorf("%w: %v has sequence 0", ledger.ErrCorrupt, kindState)
	}
	return s, err
}

// maxStatePayload bounds a record's payload: the data, base64 in JSON, and its sequence.
const maxStatePayload = ledger.MaxStateBytes*4/3 + 256

func (r *root) readState(name string) (namedState, bool, error) {
	return readFile(r, r.namedStatePath(name), decodeNamedState)
}

// ReadState implements ledger.StateStore.
func (l *Ledger) ReadState(ctx context.Context, name string) (ledger.StateRecord, error) {
	if err := ledger.CheckState(name, nil); err != nil {
		return ledger.StateRecord{}, err
	}
	return operation(l.r, "read state "+name, func() (ledger.StateRecord, error) {
		s, ok, err := l.r.readState(name)
		if err != nil || !ok {
			return ledger.StateRecord{}, err
		}
		return ledger.StateRecord{Data: s.Data, Version: strconv.FormatUint(s.Seq, 10)}, nil
	})
}

// WriteState implements ledger.StateStore.
func (l *Ledger) WriteState(ctx context.Context, name string, data []byte, version string) (string, error) {
	if err := ledger.CheckState(name, data); err != nil {
		return "", err
	}
	return operation(l.r, "write state "+name, func() (string, error) {
		r := l.r
		unlock, err := lockFile(ctx, r.clock, r.cfg.LockWait)
		if err != nil {
			return "", err
		}
		defer unlock()
		cur, ok, err := r.readState(name)
		if err != nil {
			return "", err
		}
		switch {
		case !ok && version != "":
			return "", fmt.Errorf("%w: %s does not exist (read at version %s)", ledger.ErrConflict, name, version)
		case ok && version != strconv.FormatUint(cur.Seq, 10):
			return "", fmt.Errorf("%w: %s is at version %d, not %q", ledger.ErrConflict, name, cur.Seq, version)
		}
		next := namedState{Seq: cur.Seq + 1, Data: data}
		frame, err := encodeJSON(kindState, next)
		if err != nil {
			return "", err
		}
		if err := r.replace(r.namedStatePath(name), frame, durableFull); err != nil {
			return "", err
		}
		return strconv.FormatUint(next.Seq, 10), nil
	})
}
