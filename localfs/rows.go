package localfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/amiss-ci/amiss/ledger"
)

// Row files: rows/XX/<key>.state, one per delivery key, its saved report inline (format 2), or
// beside it in <key>.report (format 1, read as it is and rewritten as format 2 by the row's next
// change).

func shardName(s int) string { return fmt.Sprintf("%02x", s) }

func (r *root) shardDirOf(s int) string { return filepath.Join(r.dir, RowsDir, shardName(s)) }

func (r *root) shardDir(key ledger.Key) string { return r.shardDirOf(int(key[0])) }

func (r *root) statePath(key ledger.Key) string {
	return filepath.Join(r.shardDir(key), key.String()+".state")
}

func (r *root) reportPath(key ledger.Key) string {
	return filepath.Join(r.shardDir(key), key.String()+".report")
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
	return r.decodeRowFile(p, key, data)
}

func (r *root) decodeRowFile(p string, key ledger.Key, data []byte) (storedRow, error) {
	row, err := decodeRow(data, r.cfg.Limits)
	if err != nil {
		return storedRow{}, fmt.Errorf("%s: %w", p, err)
	}
	if row.Key != key {
		return storedRow{}, fmt.Errorf("%s: %w: file holds row %s", p, ledger.ErrCorrupt, row.Key)
	}
	return row, nil
}

// writeRow replaces the row's state file with the given durability. A row read from format 1
// is written as format 2: its report, if it keeps one, moves inline (the file beside it is
// then dead: removed here, or collected as debris if that removal is lost).
func (r *root) writeRow(s *storedRow, d durability) error {
	if s.v1 && len(s.Frozen) == 0 && (s.State == ledger.StateSaved || s.State == ledger.StateAbandoned) && !s.Report.IsZero() {
		rep, err := r.readReportFile(s)
		switch {
		case err == nil:
			s.Frozen = rep
		case s.State == ledger.StateAbandoned && errors.Is(err, ledger.ErrCorrupt):
			// Abandoned by a version that did not keep its report: nothing to carry.
		default:
			return err
		}
	}
	data, err := encodeRow(s, r.cfg.Limits)
	if err != nil {
		return err
	}
	if s.v1 {
		// The format 1 report file is removed next: the state that no longer needs it must be
		// on disk first, or a crash could keep the removal and lose the rename. Once per row.
		d = durableFull
	}
	if err := r.replace(r.statePath(s.Key), data, d); err != nil {
		return err
	}
	if s.v1 {
		s.v1 = false
		r.removeQuietly(r.reportPath(s.Key))
	}
	return nil
}

// removeQuietly removes a file that has become debris; a removal that fails leaves it to
// debris collection.
func (r *root) removeQuietly(p string) { r.fs.Remove(p) }

// remove removes the file at p; a file already gone is no error.
func (r *root) remove(p string) error {
	if err := r.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, p, err)
	}
	return nil
}

// report returns the report a saved or abandoned row keeps.
func (r *root) report(s *storedRow) ([]byte, error) {
	if s.v1 {
		return r.readReportFile(s)
	}
	if len(s.Frozen) == 0 {
		return nil, fmt.Errorf("%w: %s: the %v row keeps no report", ledger.ErrCorrupt, r.statePath(s.Key), s.State)
	}
	return append([]byte(nil), s.Frozen...), nil
}

// readReportFile reads the report file of a format 1 row.
func (r *root) readReportFile(s *storedRow) ([]byte, error) {
	p := r.reportPath(s.Key)
	data, err := r.fs.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: the %v row names a report that is missing", ledger.ErrCorrupt, p, s.State)
		}
		return nil, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, p, err)
	}
	rep, err := decodeReport(data, r.cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if ledger.SumBody(rep) != s.Report.Digest {
		return nil, fmt.Errorf("%w: %s does not match the digest its row recorded", ledger.ErrCorrupt, p)
	}
	return rep, nil
}
