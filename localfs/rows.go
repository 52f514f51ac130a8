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

func (r *root) shardDir(key ledger.Key) string { return r.shardDirOf(int(key[0])) }

func (r *root) statePath(key ledger.Key) string {
	return filepath.Join(r.shardDir(key), key.String()+".state")
}

// readRow reads and checks a row; an absent row is ErrUnknownDelivery, a damaged one
// ErrCorrupt naming the file.
func (r *root) readRow(key ledger.Key) (storedRow, error) {
	p := r.statePath(key)
	data, err := r.fs.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return storedRow{}, fmt.Errorf("%w: %s", ledger.ErrUnknownDelivery, key)
		}
		return storedRow{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	row, err := decodeRow(data, r.cfg.Limits)
	if err != nil {
		return storedRow{}, fmt.Errorf("%s: %w", p, err)
	}
	if row.Key != key {
		return storedRow{}, fmt.Errorf("%s: %w: file holds row %s", p, ledger.ErrCorrupt, row.Key)
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
	if err := r.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, p, err)
	}
	return nil
}

// report returns the report a saved or abandoned row keeps.
func (r *root) report(s *storedRow) ([]byte, error) {
	if len(s.Frozen) == 0 {
		return nil, fmt.Errorf("%w: %s: the %v row keeps no report", ledger.ErrCorrupt, r.statePath(s.Key), s.State)
	}
	return append([]byte(nil), s.Frozen...), nil
}
