package localfs

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Durable writes. A file is staged (written to a temporary file beside its name, or in place over
// a capacity record), its data made durable through the syncer, then renamed into place, and the
// rename made durable where an answer depends on it (ops.go, "What each write makes durable").

// staged is a temporary file written, open and not yet synced, then renamed into place:
// invisible to every reader until renamed.
type staged struct {
	r         *root
	f         File
	tmp, path string
	// inPlace: written over path itself, whose size and blocks were made durable with the file
	// (a capacity record): nothing to rename, no metadata changed (syncer.flushOnce).
	inPlace bool
}

// abort closes and removes the temporary file (best effort: debris collection takes what is
// left) and describes the failure.
func (st *staged) abort(op string, err error) error {
	if st.f != nil {
		st.f.Close()
		st.f = nil
	}
	if !st.inPlace {
		st.r.fs.Remove(st.tmp)
	}
	return unavailable(err, op, st.path)
}

// name is the file written: the temporary one, or path itself when written in place.
func (st *staged) name() string {
	if st.inPlace {
		return st.path
	}
	return st.tmp
}

// rename closes the synced temporary file and renames it into place.
func (st *staged) rename() error {
	if err := st.f.Close(); err != nil {
		st.f = nil
		return st.abort("close", err)
	}
	st.f = nil
	if st.inPlace {
		return nil
	}
	if err := st.r.fs.Rename(st.tmp, st.path); err != nil {
		return st.abort("rename", err)
	}
	return nil
}

func abortAll(sts []*staged) {
	for _, st := range sts {
		if st != nil && st.f != nil {
			st.abort("", nil)
		}
	}
}

// syncData makes the data of the staged files durable (their temporary names included).
func (s *syncer) syncData(sts ...*staged) error {
	req := &syncReq{}
	for _, st := range sts {
		req.files = append(req.files, st.f)
		req.names = append(req.names, st.name())
		req.overwrite = append(req.overwrite, st.inPlace)
	}
	return s.sync(req)
}

// Durability classes of a single-file replacement.
type durability int

const (
	// durableData: the data is synced before the rename, so the name never points at bytes a
	// crash could lose; the rename is not synced (where losing it is harmless: see each caller).
	durableData durability = iota + 1
	// durableFull: the data, then the folder entry, are synced before the answer.
	durableFull
)

// replace writes data to path by atomic replacement with the given durability.
func (r *root) replace(path string, data []byte, d durability) error {
	r.sync.enter()
	defer r.sync.exit()
	st, err := r.stage(path, data)
	if err != nil {
		return err
	}
	if err := r.sync.syncData(st); err != nil {
		return st.abort("sync", err)
	}
	if err := st.rename(); err != nil {
		return err
	}
	if d == durableFull {
		return r.sync.syncDirs(filepath.Dir(path))
	}
	return nil
}

// commitAll makes the data of the staged files durable with one sync, renames them in the
// order given, and makes the renames durable with one more.
func (r *root) commitAll(sts []*staged) error {
	if len(sts) == 0 {
		return nil
	}
	if err := r.sync.syncData(sts...); err != nil {
		abortAll(sts)
		return err
	}
	var dirs []string
	for i, st := range sts {
		if err := st.rename(); err != nil {
			abortAll(sts[i+1:])
			return err
		}
		if !st.inPlace {
			dirs = append(dirs, filepath.Dir(st.path))
		}
	}
	return r.sync.syncDirs(dirs...)
}

// mkdir creates dir if it is missing (durability comes with the files written into it).
func (r *root) mkdir(dir string) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := r.fs.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return unavailable(err, "mkdir", d)
		}
	}
	return nil
}

// stage writes data to a new temporary file beside path and keeps it open, unsynced.
func (r *root) stage(path string, data []byte) (*staged, error) {
	rnd, err := r.random8()
	if err != nil {
		return nil, fmt.Errorf("localfs: temporary name: %w", err)
	}
	st := &staged{r: r, tmp: path + tmpMarker + hex.EncodeToString(rnd[:]), path: path}
	if st.f, err = r.fs.OpenFile(st.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return nil, unavailable(err, "create", st.tmp)
	}
	if _, err := st.f.Write(data); err != nil {
		return nil, st.abort("write", err)
	}
	return st, nil
}

// stageAt writes data over the start of path, in place, and keeps the file open, unsynced.
func (r *root) stageAt(path string, data []byte) (*staged, error) {
	st := &staged{r: r, path: path, inPlace: true}
	var err error
	if st.f, err = r.fs.OpenFile(path, os.O_WRONLY, 0); err != nil {
		return nil, unavailable(err, "open", path)
	}
	if _, err := st.f.WriteAt(data, 0); err != nil {
		return nil, st.abort("write", err)
	}
	return st, nil
}
