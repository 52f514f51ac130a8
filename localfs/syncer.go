package localfs

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// syncer is the FileLedger's group commit. An operation hands it what it needs durable (the
// data of staged files, the entries of folders) and waits. One caller at a time leads: it takes
// every request gathered so far, makes them durable with as few syncs as it can and answers
// each; requests arriving meanwhile wait for the next round, led by the first of them. A caller
// is answered only after a sync that started after its request has finished, so never before
// its own writes are durable; a failed sync fails every request it carried, and a file whose
// write-back failed fails the request that carried it. Operations keep their locks while they
// wait, so what a round carries was decided under those locks.
//
// A round of one request with one file or one folder syncs exactly that (fsync); a larger one
// calls syncfs(2) once, which makes everything written to the file system durable. Except a
// lone request of one new file and records overwritten in place (an admission's row and its
// capacity record), where the file system allows it (vfs.FlushCoversWriteBack): it starts the
// new file's write-back, writes the records back without a flush, then syncs the new file,
// whose flush makes the records durable too: one device flush instead of two, and cheaper than
// a syncfs (which writes every dirty file on the device).
type syncer struct {
	fs        FS
	dir       string
	writeBack bool // vfs.FlushCoversWriteBack answered true

	mu      sync.Mutex
	running bool
	waiting []*syncReq
	// writers counts the operations between enter and exit (staging, waiting, renaming). A
	// leader gives those not waiting yet up to maxDelay to join its round, so concurrent
	// writers share one sync instead of following each other.
	writers  int
	maxDelay time.Duration
	// For tests: gather makes a leader wait (up to gatherWait) for that many requests in its
	// round; afterSync runs after a round's sync, before its callers are answered.
	gather     int
	gatherWait time.Duration
	afterSync  func(n int)
}

// syncReq is one operation's need: the data of files (open, written, not yet synced), the
// entries of folders, or (all) everything written to the file system (syncfs).
type syncReq struct {
	files []File
	names []string // the files' names, for errors
	// overwrite[i]: files[i] is only overwritten in place (staged.inPlace).
	overwrite []bool
	dirs      []string
	all       bool
	done      chan error
	lead      chan struct{}
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

// syncEverything makes everything written durable (one shared syncfs): what an operation read
// may be a dead process's unsynced write, which what it writes next must not reach disk before.
func (s *syncer) syncEverything() error {
	return s.sync(&syncReq{all: true})
}

// syncDirs makes durable every rename or removal made in the folders before the call.
func (s *syncer) syncDirs(dirs ...string) error {
	return s.sync(&syncReq{dirs: slices.Compact(slices.Sorted(slices.Values(dirs)))})
}

func (s *syncer) sync(req *syncReq) error {
	if len(req.files) == 0 && len(req.dirs) == 0 && !req.all {
		return nil
	}
	req.done = make(chan error, 1)
	req.lead = make(chan struct{}, 1)
	s.mu.Lock()
	s.waiting = append(s.waiting, req)
	led := s.running // by another caller: wait for its answer, or for the lead
	s.running = true
	s.mu.Unlock()
	if led {
		select {
		case err := <-req.done:
			return err
		case <-req.lead:
		}
	}
	return s.leadRound(req)
}

// leadRound runs one round, which includes req, then hands the lead to the next request waiting.
func (s *syncer) leadRound(req *syncReq) error {
	if s.gather > 1 {
		s.waitFor(s.gatherWait, time.Millisecond, func() bool { return len(s.waiting) >= s.gather })
	}
	// Writers staging or renaming will ask for a sync in a moment: wait for them (briefly)
	// rather than sync without them and make them wait a whole round.
	s.waitFor(s.maxDelay, 20*time.Microsecond, func() bool { return s.writers <= len(s.waiting) })
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

// waitFor polls done, under mu, every step until it holds or d has passed.
func (s *syncer) waitFor(d, step time.Duration, done func() bool) {
	for deadline := time.Now().Add(d); ; time.Sleep(step) {
		s.mu.Lock()
		ok := done()
		s.mu.Unlock()
		if ok || !time.Now().Before(deadline) {
			return
		}
	}
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
	// The sync answered success; the journal must still be committing for that to mean the
	// round's folder entries are durable (vfs.CheckJournal). A round of files only needs no
	// check: a file's data errors are its own (fsync, CheckWriteback), and what follows such a
	// round (a rename) opens a journal handle itself, which an aborted journal refuses.
	if slices.ContainsFunc(round, func(r *syncReq) bool { return len(r.dirs) > 0 || r.all }) {
		if err := vfs.CheckJournal(s.fs, s.dir); err != nil {
			return fail(fmt.Errorf("%w: the file system holding %s no longer commits changes (its journal may have aborted after a failed write; what the last sync carried may be lost): %v",
				ledger.ErrUnavailable, s.dir, err))
		}
	}
	if len(round) == 1 && len(round[0].dirs) == 0 && (len(round[0].files) == 1 || s.flushOnce(round[0]) >= 0) {
		return errs // fsync, and sync_file_range, reported each file's own write-back errors
	}
	// syncfs reports a write-back error once, to its own descriptor, and only one recorded
	// since that descriptor was opened: a file whose write-back failed earlier (written back
	// under memory pressure) or whose failure another caller heard first would pass unseen. So
	// each file is asked for its own record (vfs.CheckWriteback, which writes nothing: its
	// pages are clean now); only requests whose files all reached the disk succeed.
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

// syncRound makes the round durable with one call: the fsync of its one file or folder, or
// syncfs (but see flushOnce).
func (s *syncer) syncRound(round []*syncReq) error {
	if len(round) == 1 && !round[0].all {
		r := round[0]
		if sync := s.flushOnce(r); sync >= 0 {
			// The new file's data starts first, travelling while the records are written
			// back; its fsync below waits for it.
			if err := vfs.StartWriteBack(r.files[sync]); err != nil {
				return unavailable(err, "start writing", r.names[sync])
			}
			for i, f := range r.files {
				if i != sync {
					if err := vfs.WriteBack(f); err != nil {
						return unavailable(err, "write back", r.names[i])
					}
				}
			}
			// Started after every write-back above returned: its flush covers them.
			return unavailable(r.files[sync].Sync(), "fsync", r.names[sync])
		}
		switch {
		case len(r.files) == 1 && len(r.dirs) == 0:
			return unavailable(r.files[0].Sync(), "fsync", r.names[0])
		case len(r.files) == 0 && len(r.dirs) == 1:
			return unavailable(s.fs.SyncDir(r.dirs[0]), "sync folder", r.dirs[0])
		}
	}
	return unavailable(s.fs.SyncFS(s.dir), "syncfs", s.dir)
}

// flushOnce tells whether r (a round's only request) is made durable with one flush (the file
// system allows it, and r holds files only, all but one overwritten in place): it answers the
// index of the one file to fsync, or -1.
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
