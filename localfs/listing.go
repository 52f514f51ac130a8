package localfs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/amiss-ci/amiss/ledger"
)

// The lap listing of the row folders (the sweep, Rows and Stats): the 256 folders in order from a
// starting position back to it, listed without locks, in slices a cursor resumes.

// position is a place in the row folders: folder shard, after the row name ("" for its start).
type position struct {
	shard int
	name  string
}

func (p position) String() string { return fmt.Sprintf("%02x/%s", p.shard, p.name) }

func parsePosition(s string) (position, bool) {
	shardS, name, ok := strings.Cut(s, "/")
	v, err := strconv.ParseUint(shardS, 16, 8)
	if !ok || err != nil || len(shardS) != 2 || (name != "" && len(name) != 64) {
		return position{}, false
	}
	return position{int(v), name}, true
}

// A cursor is "<lap start>:<last row read>", each a position.
func parseCursor(c ledger.Cursor) (lap, at position, err error) {
	lapS, atS, ok := strings.Cut(string(c), ":")
	lap, ok1 := parsePosition(lapS)
	at, ok2 := parsePosition(atS)
	if !ok || !ok1 || !ok2 {
		return position{}, position{}, fmt.Errorf("%w: cleanup cursor %q", ledger.ErrInvalid, c)
	}
	return lap, at, nil
}

// listing is one slice of a lap: the row keys, where the next slice starts ("" when the lap is
// finished), and the debris seen in the folders listed.
type listing struct {
	keys   []ledger.Key
	next   ledger.Cursor
	debris map[int][]string
	// shards are the row folders listed (whole or in part), in the order visited.
	shards []int
}

// listRows lists up to limit row keys after cursor in a lap that starts at lap (an empty cursor
// starts the lap). A lap goes round the folders from lap's folder (after lap's row) back to it
// (up to lap's row), so it lists every row once wherever it starts.
func (r *root) listRows(lap position, cursor ledger.Cursor, limit int) (listing, error) {
	out := listing{debris: map[int][]string{}}
	at := lap
	if cursor != "" {
		var err error
		if lap, at, err = parseCursor(cursor); err != nil {
			return out, err
		}
	}
	// Visits: the folder of at, from at; the following ones; and, to close the lap, the
	// lap's folder again up to the lap's row when the lap started inside it.
	closing := at.shard == lap.shard && lap.name != "" && at.name <= lap.name && cursor != ""
	for i := 0; ; i++ {
		s := (at.shard + i) % shardCount
		after, upTo := "", ""
		if i == 0 {
			after = at.name
		}
		if s == lap.shard && (i > 0 || closing) {
			if lap.name == "" {
				break // back at a lap that started at the top of this folder
			}
			upTo = lap.name
		}
		dir := r.shardDirOf(s)
		names, err := r.fs.ReadDir(dir)
		if err != nil {
			return out, unavailable(err, "list", dir)
		}
		out.shards = append(out.shards, s)
		for _, n := range names {
			name := n.Name()
			if strings.Contains(name, tmpMarker) {
				out.debris[s] = append(out.debris[s], name)
				continue
			}
			key, ok := strings.CutSuffix(name, ".state")
			k, err := ledger.ParseKey(key)
			if !ok || err != nil || (after != "" && key <= after) || (upTo != "" && key > upTo) {
				continue
			}
			out.keys = append(out.keys, k)
			if len(out.keys) >= limit {
				out.next = ledger.Cursor(lap.String() + ":" + position{s, key}.String())
				return out, nil
			}
		}
		if upTo != "" || (s+1)%shardCount == lap.shard && lap.name == "" {
			break // the lap is closed, or closes at the top of the next folder
		}
	}
	return out, nil
}
