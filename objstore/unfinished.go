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
// already), the unfinishedKept oldest rows its looks found unfinished, oldest first. Every pass
// adds the rows its looks found unfinished, drops those its looks found finished, and then
// reads the list from its oldest row on (skipping what its looks read), dropping each row found
// finished, gone or re-reserved, up to the first found unfinished: that row, or an older one its
// looks read, is the oldest unfinished row, and the rows after it are kept unread. The report's
// OldestUnfinished is only ever a row read in the pass. The cost: one read a pass while a row
// is unfinished (none when its look was due anyway, none when every row is finished), one more
// for each row that finished since (each is dropped once), and a write of sweep.json only when
// the list changes.
//
// The figure is exact for every row cleanup has looked at (an admission's first look comes
// PendingGrace after its reservation, at the next pass), unless more than unfinishedKept rows
// are in the list at once: the youngest are then left out, and the figure can miss one of them
// only once every row older than it in the list has finished, until its next look (when it
// would be stranded: StrandedAfter after its last write, lease or retry time, and every
// StrandedAfter while it is stranded), which adds it back. The same holds when the list is lost
// (sweep.json damaged or removed) or stale (a late copy of an older write): every unfinished row
// keeps a look in the schedule, so none is hidden past its next look; a stale list's finished
// rows are read and dropped when they come first.
const unfinishedKept = 32

// refreshUnfinished answers the new list from known and this pass's looks, reading known's rows
// from the oldest until one is found unfinished (see above). A row that cannot be decoded is
// kept with the admission time the list held, and counts as unfinished (it is reported
// damaged): nothing says it finished.
func (p *pass) refreshUnfinished(ctx context.Context, known []unfinishedRow) ([]unfinishedRow, error) {
	found := map[ledger.Key]time.Time{}
	read := map[ledger.Key]bool{}
	var oldest time.Time // the oldest row read in this pass and found unfinished
	for _, r := range p.read {
		read[r.key] = true
		if !r.row.State.Terminal() {
			found[r.key] = r.row.CreatedAt
			oldest = ledger.Earliest(oldest, r.row.CreatedAt)
		}
	}
	known = slices.Clone(known)
	sortUnfinished(known)
	passedOldest := false // a row read unfinished is older than every row of known left
	for _, c := range known {
		key, err := ledger.ParseKey(c.Key)
		if err != nil {
			continue
		}
		if _, ok := found[key]; ok || read[key] {
			continue // read by a look in this pass
		}
		at := time.Unix(0, c.AdmittedAt).UTC()
		if !passedOldest && !oldest.IsZero() && !at.Before(oldest) {
			passedOldest = true
		}
		if passedOldest {
			found[key] = at // kept unread: younger than a row known unfinished
			continue
		}
		if p.damagedKeys[key] {
			found[key] = at
			oldest = ledger.Earliest(oldest, at)
			continue
		}
		if p.looked["r"+key.String()] {
			continue // its look found it gone or a reservation
		}
		ks, err := p.l.readKey(ctx, key)
		switch {
		case errors.Is(err, ledger.ErrCorrupt):
			p.tally.Damage(p.l.s.key(rowName(key)), err)
			found[key] = at
			oldest = ledger.Earliest(oldest, at)
		case err != nil:
			return nil, err
		case ks.row != nil && !ks.row.Row.State.Terminal():
			found[key] = ks.row.Row.CreatedAt
			oldest = ledger.Earliest(oldest, ks.row.Row.CreatedAt)
		}
	}
	out := make([]unfinishedRow, 0, len(found))
	for key, at := range found {
		out = append(out, unfinishedRow{Key: key.String(), AdmittedAt: at.UnixNano()})
	}
	sortUnfinished(out)
	if len(out) > unfinishedKept {
		out = out[:unfinishedKept]
	}
	p.oldestUnfinished = oldest
	return out, nil
}

// sortUnfinished sorts a list oldest first (by key among rows admitted at once).
func sortUnfinished(list []unfinishedRow) {
	sort.Slice(list, func(i, j int) bool {
		if list[i].AdmittedAt != list[j].AdmittedAt {
			return list[i].AdmittedAt < list[j].AdmittedAt
		}
		return list[i].Key < list[j].Key
	})
}

// sameUnfinished reports whether two lists are the same (the record is written only when not).
func sameUnfinished(a, b []unfinishedRow) bool {
	return slices.Equal(a, b)
}
