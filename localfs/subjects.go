package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Subject records: subjects/XX/<subject key>.state, one per commit and status context published
// to (ledger.SubjectRecord decides every change), under the row-shard lock of the key's first
// byte, the one lock a subject call takes.
//
// A grant to post is synced with its folder before it is answered (a post may follow at once,
// and a grant lost with a power cut would let another verdict post not knowing this one may
// land after it); every other change is synced for its data only: a lost report leaves the
// grant, which ends by itself and counts its post as unknown, and a lost newer verdict is
// recorded again by its next request.

func (r *root) subjectDirOf(s int) string {
	return filepath.Join(r.dir, SubjectsDir, shardName(s))
}

func (r *root) subjectPath(k ledger.SubjectKey) string {
	return filepath.Join(r.subjectDirOf(int(k[0])), k.String()+".state")
}

// readSubject reads a subject record and checks it as stored (ledger.SubjectRecord.CheckStored);
// exists is false when there is none. A damaged one (or one that is not k's) is ErrCorrupt
// naming the file.
func (r *root) readSubject(k ledger.SubjectKey) (rec ledger.SubjectRecord, exists bool, err error) {
	decode := func(b []byte) (rec ledger.SubjectRecord, err error) {
		if _, err = decodeJSON(kindSubject, b, maxSubjectPayload, &rec); err == nil {
			err = rec.CheckStored(k)
		}
		return rec, err
	}
	rec, exists, err = readFile(r, r.subjectPath(k), decode)
	return rec, exists && err == nil, err
}

// writeSubject replaces the subject record's file, making its folder durable first when this
// process has not seen it so.
func (r *root) writeSubject(rec *ledger.SubjectRecord, d durability) error {
	if err := r.mkdirDurable(r.subjectDirOf(int(rec.Key[0])), true); err != nil {
		return err
	}
	data, err := encodeJSON(kindSubject, rec)
	if err != nil {
		return err
	}
	return r.replace(r.subjectPath(rec.Key), data, d)
}

// ReadSubject implements ledger.SubjectStore. It reads without locking, as ReadRow does.
func (r *root) ReadSubject(ctx context.Context, k ledger.SubjectKey) (ledger.SubjectRecord, bool, error) {
	if err := r.begin(); err != nil {
		return ledger.SubjectRecord{}, false, err
	}
	defer r.end()
	return r.readSubject(k)
}

// UpdateSubject implements ledger.SubjectStore: it runs decide on k's subject record under its
// row-shard lock, at the record's effective now, and writes the record as the decision asks:
// ledger.WriteDurable with its folder synced (a grant to post), ledger.WriteLossy with its data
// synced (every other change). No version's landing time is known (landed is zero).
func (r *root) UpdateSubject(ctx context.Context, k ledger.SubjectKey, _ bool,
	decide func(rec *ledger.SubjectRecord, exists bool, landed, now time.Time) (ledger.Write, error)) error {
	if err := r.begin(); err != nil {
		return err
	}
	defer r.end()
	unlock, err := r.lockShard(ctx, k[0])
	if err != nil {
		return err
	}
	defer unlock()
	rec, exists, err := r.readSubject(k)
	if err != nil {
		return err
	}
	now, err := r.now(nil)
	if err != nil {
		return err
	}
	write, err := decide(&rec, exists, time.Time{}, rec.Now(now, time.Time{}))
	switch {
	case err != nil || write == ledger.WriteNothing:
		return err
	case write == ledger.WriteLossy:
		return r.writeSubject(&rec, durableData)
	case write == ledger.WriteDurable:
		return r.writeSubject(&rec, durableFull)
	}
	return fmt.Errorf("%w: unknown write %d of a subject record", ledger.ErrInvalid, write)
}

// SubjectAsked implements ledger.SubjectStore: nothing to remember (cleanup lists every subject
// folder it sweeps).
func (r *root) SubjectAsked(ledger.Key, ledger.SubjectKey) {}

// subjectShard is what a cleanup pass found in one shard's subject folder.
type subjectShard struct {
	kept, removed int
}

// subjectListing is the subject records a cleanup pass judges, by shard, and the temporary
// files beside them, listed before the pass removes anything.
type subjectListing map[int]subjectFolder

type subjectFolder struct {
	keys   []ledger.SubjectKey
	debris []string
}

// listSubjectShards lists the subject folders of the given shards (those the sweep listed).
func (r *root) listSubjectShards(shards []int) (subjectListing, error) {
	out := subjectListing{}
	for _, s := range shards {
		keys, debris, err := r.listSubjects(s)
		if err != nil {
			return nil, err
		}
		out[s] = subjectFolder{keys, debris}
	}
	return out, nil
}

// cleanSubjects forgets the removable subject records listed, at the pass's now: each judged
// without a lock, then again, and removed, under its shard's lock. A record that does not
// decode is reported damaged and kept. It answers how many it kept and removed.
func (r *root) cleanSubjects(ctx context.Context, listed subjectListing, now time.Time, tally *ledger.Tally) (subjectShard, error) {
	var out subjectShard
	horizon := r.cfg.Limits.SubjectHorizon()
	removable := func(k ledger.SubjectKey) (bool, error) {
		rec, exists, err := r.readSubject(k)
		if err != nil || !exists {
			return false, err
		}
		var newest *ledger.Row
		if rec.NewestMatters() {
			row, err := r.readRow(rec.Newest.Key)
			switch {
			case err == nil:
				newest = &row.Row
			case !errors.Is(err, ledger.ErrUnknownDelivery):
				return false, nil // the newest verdict's row cannot be read: kept, and the row reported by the sweep
			}
		}
		// A record made anew is made no earlier than the root's high-water, which every decision
		// reads and this pass persisted at its now before it forgets anything, whatever the
		// clock of the process that makes it: it reads nothing behind now. A write to a file
		// lands before its call returns, or never: no late write to wait for.
		return rec.Forgettable(now, horizon, newest, 0, 0), nil
	}
	for s, found := range listed {
		if err := r.collectDebris(ctx, s, r.subjectDirOf(s), found.debris); err != nil {
			return out, err
		}
		for _, k := range found.keys {
			ok, err := removable(k)
			if errors.Is(err, ledger.ErrCorrupt) {
				tally.Damage(r.subjectPath(k), err)
				out.kept++
				continue
			}
			if err != nil {
				return out, err
			}
			if ok {
				if ok, err = r.removeSubject(ctx, k, removable); err != nil {
					return out, err
				}
			}
			if ok {
				out.removed++
			} else {
				out.kept++
			}
		}
	}
	return out, nil
}

// removeSubject removes the record of k if it is still removable under its shard's lock.
func (r *root) removeSubject(ctx context.Context, k ledger.SubjectKey, removable func(ledger.SubjectKey) (bool, error)) (bool, error) {
	unlock, err := r.lockShard(ctx, k[0])
	if err != nil {
		return false, err
	}
	defer unlock()
	if ok, err := removable(k); err != nil || !ok {
		return false, err
	}
	if err := r.remove(r.subjectPath(k)); err != nil {
		return false, err
	}
	return true, nil
}

// listSubjects lists the subject keys of shard s's folder (none when it does not exist yet) and
// the temporary files a crashed write left there.
func (r *root) listSubjects(s int) (keys []ledger.SubjectKey, debris []string, err error) {
	dir := r.subjectDirOf(s)
	names, err := r.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, unavailable(err, "list", dir)
	}
	for _, n := range names {
		if strings.Contains(n.Name(), tmpMarker) {
			debris = append(debris, n.Name())
			continue
		}
		name, ok := strings.CutSuffix(n.Name(), ".state")
		if k, err := ledger.ParseSubjectKey(name); ok && err == nil {
			keys = append(keys, k)
		}
	}
	return keys, debris, nil
}

// countSubjects counts the subject records of every shard, for Stats.
func (r *root) countSubjects() (int64, error) {
	var n int64
	for s := range shardCount {
		keys, _, err := r.listSubjects(s)
		if err != nil {
			return 0, err
		}
		n += int64(len(keys))
	}
	return n, nil
}
