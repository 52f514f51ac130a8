package localfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// The end-time index: ended/<hour>/<end>-<key> (ledger.EndIndexName), an empty file for each finished row with a
// retention end, which cleanup lists up to its now instead of reading every row.

// hourOf is the folder of the end-time index that holds the entries ending in t's hour.
func hourOf(t time.Time) string { return fmt.Sprintf("%012d", max(t.UnixNano(), 0)/int64(time.Hour)) }

// addIndex creates the row's entry in the end-time index (an empty file), not synced (see
// Complete); a new hour's folder is made durable, so later entries are not lost with it.
func (r *root) addIndex(row *ledger.Row) error {
	dir := filepath.Join(r.dir, EndedDir, hourOf(row.RetainUntil))
	if err := r.mkdirDurable(dir, false); err != nil {
		return err
	}
	p := filepath.Join(dir, ledger.EndIndexName(row))
	f, err := r.fs.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return unavailable(err, "create", p)
	}
	return unavailable(f.Close(), "close", p)
}

// mkdirDurable creates dir (ended/<hour> or subjects/XX) and its parent where missing, making
// each one's entry durable in its parent. With found set, it does so too for each one it finds,
// the first time this process meets it: its maker may have died (or its folder sync failed)
// before the entry was durable, and a file synced in it would be lost with it. Subject records
// need that (a grant to post is answered once synced); the end-time index does not (the sweep
// makes a lost entry again). Once it has answered for a folder, this process asks no more.
func (r *root) mkdirDurable(dir string, found bool) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		r.mu.Lock()
		known := r.durableDirs[d]
		r.mu.Unlock()
		if known {
			continue
		}
		err := r.fs.Mkdir(d, 0o700)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return unavailable(err, "mkdir", d)
		}
		if err == nil || found {
			if err := r.sync.syncDirs(filepath.Dir(d)); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.durableDirs[d] = true
		r.mu.Unlock()
	}
	return nil
}

// indexEntry is one name in the end-time index.
type indexEntry struct {
	bucket, name string
	end          time.Time
	key          ledger.Key
}

// listEnded lists up to limit index entries whose end is before now, oldest first.
func (r *root) listEnded(now time.Time, limit int) ([]indexEntry, error) {
	dir := filepath.Join(r.dir, EndedDir)
	buckets, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err, "list", dir)
	}
	nowBucket := hourOf(now)
	var out []indexEntry
	for _, b := range buckets {
		if !b.IsDir() || b.Name() > nowBucket {
			continue
		}
		names, err := r.fs.ReadDir(filepath.Join(dir, b.Name()))
		if err != nil {
			return nil, unavailable(err, "list", filepath.Join(dir, b.Name()))
		}
		for _, n := range names {
			end, key, ok := ledger.ParseEndIndexName(n.Name())
			if !ok || !now.After(end) {
				continue
			}
			out = append(out, indexEntry{bucket: b.Name(), name: n.Name(), end: end, key: key})
			if len(out) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

func (r *root) removeIndex(e indexEntry) error {
	return r.remove(filepath.Join(r.dir, EndedDir, e.bucket, e.name))
}
