package objstore

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// The oldest unfinished row. A pass reads only the rows whose look is due, so the unfinished
// rows it reads are not all there are: a row found unfinished is looked at again only when it
// would be stranded. Cleanup therefore keeps, in its own record (sweep.json, read by every pass
// already), the unfinishedKept oldest rows its looks found unfinished, and every pass reads
// those again (those its looks did not read): a row found finished, gone or re-reserved leaves
// the list, a row a look finds unfinished joins it, and the report's OldestUnfinished is the
// oldest of the list. Its cost is at most unfinishedKept reads a pass, none when every row is
// finished, and a write of sweep.json only when the list changes.
//
// The figure is exact for every row cleanup has looked at (an admission's first look comes
// PendingGrace after its reservation, at the next pass), unless more than unfinishedKept rows
// are unfinished at once: the youngest are then left out, and missed only once every row older
// than them in the list has finished, until their next look (when they would be stranded:
// StrandedAfter after their last write, lease or retry time, and every StrandedAfter while they
// are stranded), which adds them back. The same holds when the list is lost (sweep.json damaged
// or removed) or stale (a late copy of an older write): every unfinished row keeps a look in
// the schedule, so none is hidden past its next look; a stale list's finished rows are read and
// dropped by the next pass.
const unfinishedKept = 32

// refreshUnfinished reads again the rows of known that this pass's looks did not read, and
// answers the new list: the unfinishedKept oldest rows found unfinished (by the looks or by
// these reads), oldest first. A row that cannot be decoded is kept with the admission time the
// list held (reported damaged): nothing says it finished.
func (p *pass) refreshUnfinished(ctx context.Context, known []unfinishedRow) ([]unfinishedRow, error) {
	found := map[ledger.Key]time.Time{}
	read := map[ledger.Key]bool{}
	for _, r := range p.read {
		read[r.key] = true
		if !r.row.State.Terminal() {
			found[r.key] = r.row.CreatedAt
		}
	}
	for _, c := range known {
		key, err := ledger.ParseKey(c.Key)
		if err != nil {
			continue
		}
		if _, ok := found[key]; ok || read[key] {
			continue // read by a look in this pass
		}
		if p.damagedKeys[key] {
			found[key] = time.Unix(0, c.AdmittedAt).UTC()
			continue
		}
		if p.looked["r"+key.String()] {
			continue // its look found it gone or a reservation
		}
		ks, err := p.l.readKey(ctx, key)
		switch {
		case errors.Is(err, ledger.ErrCorrupt):
			p.tally.Damage(p.l.s.key(rowName(key)), err)
			found[key] = time.Unix(0, c.AdmittedAt).UTC()
		case err != nil:
			return nil, err
		case ks.row != nil && !ks.row.Row.State.Terminal():
			found[key] = ks.row.Row.CreatedAt
		}
	}
	out := make([]unfinishedRow, 0, len(found))
	for key, at := range found {
		out = append(out, unfinishedRow{Key: key.String(), AdmittedAt: at.UnixNano()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].AdmittedAt != out[j].AdmittedAt {
			return out[i].AdmittedAt < out[j].AdmittedAt
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > unfinishedKept {
		out = out[:unfinishedKept]
	}
	return out, nil
}

// oldestOf is the admission time of the oldest row of a list (zero when it is empty).
func oldestOf(list []unfinishedRow) time.Time {
	if len(list) == 0 {
		return time.Time{}
	}
	return time.Unix(0, list[0].AdmittedAt).UTC()
}

// sameUnfinished reports whether two lists are the same (the record is written only when not).
func sameUnfinished(a, b []unfinishedRow) bool {
	return slices.Equal(a, b)
}
