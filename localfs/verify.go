package localfs

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/amiss-ci/amiss/ledger"
)

// ReadLimits returns the limits recorded in the root in dir, so operator tools can open a root
// without being told how it was created.
func ReadLimits(dir string, fsys FS) (ledger.Limits, error) {
	if fsys == nil {
		fsys = OSFS{}
	}
	st, _, err := (&root{dir: dir, fs: fsys}).readRootVersion()
	return st.Limits, err
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	// Files counts the files read and decoded.
	Files int
	// Rows counts the row state files, Subjects the subject records.
	Rows, Subjects int
	// CapacityUsed is the sum of the capacity shards' counts.
	CapacityUsed int64
	// Problems lists every file that failed, and every inconsistency, one line each.
	Problems []string
}

// OK reports whether Verify found nothing wrong.
func (v VerifyReport) OK() bool { return len(v.Problems) == 0 }

// Verify reads every file of the root and checks that it decodes, that every saved row's
// report is kept and matches, and that no capacity shard counts fewer slots than the rows
// that name it. It changes nothing. progress, when not nil, is called after each row with the
// rows read and the capacity count (an estimate of the total).
func (l *Ledger) Verify(ctx context.Context, progress func(done int, total int64)) (VerifyReport, error) {
	if err := l.r.begin(); err != nil {
		return VerifyReport{}, err
	}
	defer l.r.end()
	r := l.r
	var v VerifyReport
	problem := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	if _, err := r.readRoot(); err != nil {
		problem("%v", err)
	} else {
		v.Files++
	}
	used := make([]int64, shardCount)
	known := make([]bool, shardCount)
	quotas, all := int64(0), true
	for s := range shardCount {
		sh, err := r.readShard(s)
		if err != nil {
			problem("%v", err)
			continue
		}
		v.Files++
		used[s], known[s] = sh.Used, true
		v.CapacityUsed += sh.Used
		quotas += sh.Quota
		if sh.Used > sh.Quota {
			problem("%s: count %d over the shard's quota %d", r.shardCapPath(s), sh.Used, sh.Quota)
		}
	}
	if all = !slices.Contains(known, false); all && quotas != r.cfg.Limits.RecordCap {
		problem("%s: the capacity shards' quotas add up to %d, the record cap is %d", r.path(RowsDir), quotas, r.cfg.Limits.RecordCap)
	}
	if data, err := r.fs.ReadFile(r.path(BatchFile)); err == nil {
		v.Files++
		if _, err := decodeBatch(data); err != nil {
			problem("%s: %v", r.path(BatchFile), err)
		} else {
			problem("%s: a cleanup batch was interrupted; the next cleanup or prepare finishes it", r.path(BatchFile))
		}
	}
	if data, err := r.fs.ReadFile(r.path(SweepFile)); err == nil {
		if _, err := decodeSweep(data); err != nil {
			problem("%s: %v (advisory: the next cleanup rewrites it)", r.path(SweepFile), err)
		} else {
			v.Files++
		}
	}
	charged := make([]int64, shardCount)
	for s := range shardCount {
		if err := ctx.Err(); err != nil {
			return v, err
		}
		dir := r.shardDirOf(s)
		names, err := r.fs.ReadDir(dir)
		if err != nil {
			return v, fmt.Errorf("verify: %w: list %s: %v", ledger.ErrUnavailable, dir, err)
		}
		for _, n := range names {
			p := filepath.Join(dir, n.Name())
			switch {
			case n.Name() == ShardCapacityFile:
			case strings.Contains(n.Name(), tmpMarker):
				problem("%s: leftover temporary file (prepare or the cleanup sweep collects it)", p)
			case strings.HasSuffix(n.Name(), ".state"):
				v.Rows++
				key, err := ledger.ParseKey(strings.TrimSuffix(n.Name(), ".state"))
				if err != nil {
					problem("%s: not a row file name", p)
					continue
				}
				row, err := r.readRow(key)
				if err != nil {
					problem("%v", err)
					continue
				}
				v.Files++
				charged[row.Shard]++
				if row.State == ledger.StateSaved {
					if _, err := r.report(&row); err != nil {
						problem("%v", err)
					}
				}
				if progress != nil {
					progress(v.Rows, v.CapacityUsed)
				}
			default:
				problem("%s: unexpected file", p)
			}
		}
	}
	for s := range shardCount {
		keys, debris, err := r.listSubjects(s)
		if err != nil {
			return v, fmt.Errorf("verify: %w", err)
		}
		for _, name := range debris {
			problem("%s: leftover temporary file (the cleanup sweep collects it)", filepath.Join(r.subjectDirOf(s), name))
		}
		for _, k := range keys {
			v.Subjects++
			if _, _, err := r.readSubject(k); err != nil {
				problem("%v", err)
				continue
			}
			v.Files++
		}
	}
	for s := range shardCount {
		if known[s] && used[s] < charged[s] {
			problem("%s: count %d understates the %d rows holding its slots", r.shardCapPath(s), used[s], charged[s])
		}
	}
	return v, nil
}
