package localfs

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// syncer is the FileLedger's group commit. An operation that needs its writes durable hands
// the syncer what it needs (the data of some staged files, the entries of some folders) and
// waits. One caller at a time leads: it takes every request gathered so far, makes them all
// durable with as few syncs as it can, and answers each one; requests that arrive meanwhile
// wait for the next round, led by the first of them. A caller is answered only after a sync
// that started after its request has finished, so no caller is answered before its own
// writes are durable; a sync that fails fails every request it carried, and a file whose
// write-back failed fails the request that carried it.
//
// A round of one request with one file or one folder syncs exactly that (fsync); a round
// with more calls syncfs(2) once, which makes everything written to the file system durable,
// data and folder entries alike. Except: a round of one request whose files are one new file
// and records overwritten in place (an admission's row and its capacity record), where the
// file system promises it (vfs.FlushCoversWriteBack), starts the new file's write-back (so
// that it travels with the records'), writes the records back without a flush and then syncs
// the new file, whose flush makes the records durable too: one flush of the device instead of
// the two a syncfs (which writes every dirty file on the device) costs in time. Operations
// keep their own locks while they wait, so what a round carries was decided under those
// locks.
type syncer struct {
	fs  FS
	dir string
	// writeBack: the file system makes bytes overwritten in place durable with any later
	// flush (vfs.FlushCoversWriteBack).
	writeBack bool

	mu      sync.Mutex
	running bool
	waiting []*syncReq
	// writers counts the operations between enter and exit: staging files, waiting for a
	// round, renaming. A leader gives those not waiting yet a moment (at most maxDelay) to
	// join its round, so concurrent writers share one sync instead of following each other.
	writers  int
	maxDelay time.Duration
	// gather, for tests, makes a leader wait (up to gatherWait) until that many requests are
	// in its round, so a round of several is certain.
	gather     int
	gatherWait time.Duration
	// afterSync, for tests, runs after a round's sync and before its callers are answered.
	afterSync func(n int)
}

// syncReq is one operation's need: the data of files (open, written, not yet synced) and the
// entries of folders.
type syncReq struct {
	files []File
	names []string // the files' names, for errors
	// overwrite[i]: files[i] is only overwritten in place, its size and blocks durable since
	// it was made (staged.inPlace).
	overwrite []bool
	dirs      []string
	// all asks for everything written to the file system to be made durable (syncfs).
	all  bool
	done chan error
	lead chan struct{}
}

func newSyncer(fsys FS, dir string) *syncer {
	return &syncer{fs: fsys, dir: dir, maxDelay: 400 * time.Microsecond}
}

// enter registers an operation that is about to write and sync; exit ends it.
func (s *syncer) enter() {
	s.mu.Lock()
	s.writers++
	s.mu.Unlock()
}

func (s *syncer) exit() {
	s.mu.Lock()
	s.writers--
	s.mu.Unlock()
}

// syncEverything makes everything written to the file system durable (one syncfs, shared
// with whatever the round carries): what an operation read may have been written by a process
// that died before making it durable, and what it writes next must not reach the disk first.
func (s *syncer) syncEverything() error {
	return s.sync(&syncReq{all: true})
}

// syncDirs makes the entries of the folders durable: every rename or removal made in them
// before the call.
func (s *syncer) syncDirs(dirs ...string) error {
	return s.sync(&syncReq{dirs: dedupe(dirs)})
}

func dedupe(xs []string) []string {
	out := xs[:0:0]
	seen := map[string]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func (s *syncer) sync(req *syncReq) error {
	if len(req.files) == 0 && len(req.dirs) == 0 && !req.all {
		return nil
	}
	req.done = make(chan error, 1)
	req.lead = make(chan struct{}, 1)
	s.mu.Lock()
	s.waiting = append(s.waiting, req)
	if s.running {
		s.mu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-req.lead:
		}
	} else {
		s.running = true
		s.mu.Unlock()
	}
	return s.leadRound(req)
}

// leadRound runs one round, which includes req, and hands the lead to the next waiting
// request, if any.
func (s *syncer) leadRound(req *syncReq) error {
	if s.gather > 1 {
		deadline := time.Now().Add(s.gatherWait)
		for time.Now().Before(deadline) {
			s.mu.Lock()
			n := len(s.waiting)
			s.mu.Unlock()
			if n >= s.gather {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Writers that are staging or renaming will ask for a sync in a moment: wait for them
	// (briefly) rather than sync without them and make them wait a whole round.
	for deadline := time.Now().Add(s.maxDelay); ; {
		s.mu.Lock()
		busy := s.writers - len(s.waiting)
		s.mu.Unlock()
		if busy <= 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(20 * time.Microsecond)
	}
	s.mu.Lock()
	round := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	errs := s.run(round)
	if s.afterSync != nil {
		s.afterSync(len(round))
	}
	var err error
	for i, r := range round {
		if r == req {
			err = errs[i]
		} else {
			r.done <- errs[i]
		}
	}
	s.mu.Lock()
	if len(s.waiting) > 0 {
		s.waiting[0].lead <- struct{}{}
	} else {
		s.running = false
	}
	s.mu.Unlock()
	return err
}

// run makes one round durable and tells each request whether its part is.
func (s *syncer) run(round []*syncReq) []error {
	errs := make([]error, len(round))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := s.syncRound(round); err != nil {
		return fail(err)
	}
	// The sync answered success; the journal must still be committing for that to mean
	// the round's folder entries are durable (vfs.CheckJournal). A round of files only needs
	// no check: a file's data errors are its own (fsync, CheckWriteback), and what an
	// operation does after such a round (a rename) opens a journal handle itself, which an
	// aborted journal refuses; only a folder's entries are trusted to the sync alone.
	if slices.ContainsFunc(round, func(r *syncReq) bool { return len(r.dirs) > 0 || r.all }) {
		if err := vfs.CheckJournal(s.fs, s.dir); err != nil {
			return fail(fmt.Errorf("%w: the file system holding %s no longer commits changes (its journal may have aborted after a failed write; what the last sync carried may be lost): %v",
				ledger.ErrUnavailable, s.dir, err))
		}
	}
	if len(round) == 1 && len(round[0].dirs) == 0 && (len(round[0].files) == 1 || s.flushOnce(round[0]) >= 0) {
		return errs // fsync, and sync_file_range, reported each file's own write-back errors
	}
	// syncfs reports a write-back error once, to the descriptor it is called through, and
	// only one recorded since that descriptor was opened: a file whose write-back failed
	// before this round (written back early under memory pressure) or whose failure another
	// caller heard first would pass unseen. So each file the round carries is asked for its
	// own record (vfs.CheckWriteback, which writes nothing: its pages are clean now), and
	// only the requests whose files all reached the disk are answered success.
	for i, r := range round {
		for j, f := range r.files {
			if err := vfs.CheckWriteback(f); err != nil {
				errs[i] = fmt.Errorf("%w: write-back of %s failed: %v", ledger.ErrUnavailable, r.names[j], err)
				break
			}
		}
	}
	return errs
}

// syncRound makes the round's files and folders durable with one call: that file's fsync or that
// folder's for a round of one of either, syncfs otherwise.
func (s *syncer) syncRound(round []*syncReq) error {
	if len(round) == 1 && !round[0].all {
		r := round[0]
		if sync := s.flushOnce(r); sync >= 0 {
			// The new file's data starts on its way first, so that it travels while the
			// records are written back; its fsync below still waits for it.
			if err := vfs.StartWriteBack(r.files[sync]); err != nil {
				return fmt.Errorf("%w: start writing %s: %v", ledger.ErrUnavailable, r.names[sync], err)
			}
			for i, f := range r.files {
				if i != sync {
					if err := vfs.WriteBack(f); err != nil {
						return fmt.Errorf("%w: write back %s: %v", ledger.ErrUnavailable, r.names[i], err)
					}
				}
			}
			// Started after every write-back above returned: its flush covers them.
			if err := r.files[sync].Sync(); err != nil {
				return fmt.Errorf("%w: fsync %s: %v", ledger.ErrUnavailable, r.names[sync], err)
			}
			return nil
		}
		switch {
		case len(r.files) == 1 && len(r.dirs) == 0:
			if err := r.files[0].Sync(); err != nil {
				return fmt.Errorf("%w: fsync %s: %v", ledger.ErrUnavailable, r.names[0], err)
			}
			return nil
		case len(r.files) == 0 && len(r.dirs) == 1:
			if err := s.fs.SyncDir(r.dirs[0]); err != nil {
				return fmt.Errorf("%w: sync folder %s: %v", ledger.ErrUnavailable, r.dirs[0], err)
			}
			return nil
		}
	}
	if err := s.fs.SyncFS(s.dir); err != nil {
		return fmt.Errorf("%w: syncfs %s: %v", ledger.ErrUnavailable, s.dir, err)
	}
	return nil
}

// flushOnce tells whether r (a round's only request) is made durable with one flush: the
// file system allows it, r holds files only, and all of them but one are overwritten in
// place. It answers the index of the one file to fsync, or -1.
func (s *syncer) flushOnce(r *syncReq) int {
	if !s.writeBack || r.all || len(r.dirs) > 0 || len(r.files) < 2 {
		return -1
	}
	sync := -1
	for i, over := range r.overwrite {
		if !over {
			if sync >= 0 {
				return -1
			}
			sync = i
		}
	}
	return sync
}
