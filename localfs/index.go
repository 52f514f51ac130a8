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
	end := max(row.RetainUntil.UnixNano(), 0)
	return fmt.Sprintf("%012d", end/int64(time.Hour)), fmt.Sprintf("%020d-%s", end, row.Key)
}

// addIndex creates the row's entry in the end-time index (an empty file), not synced (see
// Complete); a new hour's folder is made durable, so later entries are not lost with it.
func (r *root) addIndex(row *ledger.Row) error {
	bucket, name := indexName(row)
	dir := filepath.Join(r.dir, EndedDir, bucket)
	if err := r.mkdirDurable(dir, false); err != nil {
		return err
	}
	p := filepath.Join(dir, name)
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

func parseIndexName(bucket, name string) (indexEntry, bool) {
	endS, keyS, ok := strings.Cut(name, "-")
	end, err1 := strconv.ParseInt(endS, 10, 64)
	key, err2 := ledger.ParseKey(keyS)
	if !ok || err1 != nil || err2 != nil {
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
		return nil, unavailable(err, "list", dir)
	}
	nowBucket := fmt.Sprintf("%012d", now.UnixNano()/int64(time.Hour))
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

func (r *root) removeIndex(e indexEntry) error {
	return r.remove(filepath.Join(r.dir, EndedDir, e.bucket, e.name))
}
