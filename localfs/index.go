package localfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// The end-time index: ended/<hour>/<end>-<key>, an empty file for each finished row with a
// retention end, which cleanup lists up to its now instead of reading every row.

// indexName is the end-time index entry of a row: ended/<hour>/<end nanos>-<key>.
func indexName(row *ledger.Row) (bucket, name string) {
	end := row.RetainUntil.UnixNano()
	if end < 0 {
		end = 0
	}
	return fmt.Sprintf("%012d", end/int64(time.Hour)), fmt.Sprintf("%020d-%s", end, row.Key)
}

// addIndex creates the row's entry in the end-time index (an empty file). The entry is not
// synced: see Complete. A new hour's folder is made durable once per process, so entries
// created in it later are not lost with it.
func (r *root) addIndex(row *ledger.Row) error {
	bucket, name := indexName(row)
	dir := filepath.Join(r.dir, EndedDir, bucket)
	if err := r.mkdirDurable(dir, false); err != nil {
		return err
	}
	p := filepath.Join(dir, name)
	f, err := r.fs.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ledger.ErrUnavailable, p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ledger.ErrUnavailable, p, err)
	}
	return nil
}

// mkdirDurable creates dir (ended/<hour> or subjects/XX) and its parent where they are missing,
// making the entry of each one it creates durable in its parent. With found set it also makes
// durable the entry of each one it finds, the first time this process meets it: a folder found
// may have been made by a process that died (or whose folder sync failed) before its entry was
// durable, and a file synced in a folder whose own entry is not is lost with it. The subject
// records need that (a grant to post is answered once synced); the end-time index does not (an
// entry lost is made again by the sweep). Once it has answered for a folder, this process asks
// no more.
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
			return fmt.Errorf("%w: mkdir %s: %v", ledger.ErrUnavailable, d, err)
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

func (e indexEntry) path(r *root) string { return filepath.Join(r.dir, EndedDir, e.bucket, e.name) }

func parseIndexName(bucket, name string) (indexEntry, bool) {
	endS, keyS, ok := strings.Cut(name, "-")
	if !ok {
		return indexEntry{}, false
	}
	end, err := strconv.ParseInt(endS, 10, 64)
	if err != nil {
		return indexEntry{}, false
	}
	key, err := ledger.ParseKey(keyS)
	if err != nil {
		return indexEntry{}, false
	}
	return indexEntry{bucket: bucket, name: name, end: time.Unix(0, end).UTC(), key: key}, true
}

// listEnded lists up to limit index entries whose end is before now, oldest first.
func (r *root) listEnded(now time.Time, limit int) ([]indexEntry, error) {
	dir := filepath.Join(r.dir, EndedDir)
	buckets, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, dir, err)
	}
	nowBucket := fmt.Sprintf("%012d", now.UnixNano()/int64(time.Hour))
	var out []indexEntry
	for _, b := range buckets {
		if !b.IsDir() || b.Name() > nowBucket {
			continue
		}
		names, err := r.fs.ReadDir(filepath.Join(dir, b.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, filepath.Join(dir, b.Name()), err)
		}
		for _, n := range names {
			e, ok := parseIndexName(b.Name(), n.Name())
			if !ok || !now.After(e.end) {
				continue
			}
			out = append(out, e)
			if len(out) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

func (r *root) removeIndex(e indexEntry) error { return r.remove(e.path(r)) }
