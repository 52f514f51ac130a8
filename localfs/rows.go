package localfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/amiss-ci/amiss/ledger"
)

// Row files: rows/XX/<key>.state, one per delivery key, its saved report inline.

func shardName(s int) string { return fmt.Sprintf("%02x", s) }

func (r *root) shardDirOf(s int) string { return filepath.Join(r.dir, RowsDir, shardName(s)) }

func (r *root) statePath(key ledger.Key) string {
	return filepath.Join(r.shardDirOf(int(key[0])), key.String()+".state")
}

// readRow reads and checks a row; an absent row is ErrUnknownDelivery, a damaged one (or one
// that is not key's) ErrCorrupt naming the file.
func (r *root) readRow(key ledger.Key) (storedRow, error) {
	decode := func(b []byte) (storedRow, error) { return decodeRow(b, key, r.cfg.Limits) }
	row, exists, err := readFile(r, r.statePath(key), decode)
	switch {
	case err != nil:
		return storedRow{}, err
	case !exists:
		return storedRow{}, fmt.Errorf("%w: %s", ledger.ErrUnknownDelivery, key)
	}
	return row, nil
}

// writeRow replaces the row's state file with the given durability.
func (r *root) writeRow(s *storedRow, d durability) error {
	data, err := encodeRow(s, r.cfg.Limits)
	if err != nil {
		return err
	}
	return r.replace(r.statePath(s.Key), data, d)
}

// remove removes the file at p; a file already gone is no error.
func (r *root) remove(p string) error {
	err := r.fs.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return unavailable(err, "remove", p)
}

// report returns the report a saved or abandoned row keeps.
func (r *root) report(s *storedRow) ([]byte, error) {
	if len(s.Frozen) == 0 {
		return nil, fmt.Errorf("%w: %s: the %v row keeps no report", ledger.ErrCorrupt, r.statePath(s.Key), s.State)
	}
	return append([]byte(nil), s.Frozen...), nil
}
