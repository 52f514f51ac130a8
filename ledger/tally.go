package ledger

import (
	"errors"
	"sort"
	"time"
)

// Tally collects what a cleanup pass read, for backends: the rows it kept, the damaged rows it
// skipped, the stranded rows it found and the oldest unfinished one. It does no I/O.
type Tally struct {
	// Now is the pass's effective now; StrandedAfter its stranded threshold.
	Now           time.Time
	StrandedAfter time.Duration

	retained int
	damaged  map[string]error
	stranded []StrandedRow
	oldest   time.Time
}

// Add records one row read from the file or object name. A row that does not exist any more
// is skipped; one that does not decode is recorded as damaged. Any other error is returned
// unchanged: the pass must stop.
func (t *Tally) Add(name string, row *Row, err error) error {
	switch {
	case errors.Is(err, ErrUnknownDelivery):
		return nil
	case errors.Is(err, ErrCorrupt):
		t.Damage(name, err)
		return nil
	case err != nil:
		return err
	}
	t.retained++
	if !row.State.Terminal() {
		t.oldest = Earliest(t.oldest, row.CreatedAt)
	}
	if row.Stranded(row.Now(t.Now, time.Time{}), t.StrandedAfter) {
		t.stranded = append(t.stranded, row.StrandedRow())
	}
	return nil
}

// Damage records a damaged row (once per name, however often it is met in a pass).
func (t *Tally) Damage(name string, err error) {
	if t.damaged == nil {
		t.damaged = map[string]error{}
	}
	t.damaged[name] = err
}

// Earliest returns the earlier of two times, a zero time counting as none: the figure of two
// cleanup passes' OldestUnfinished together.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Fill writes the tally into rep: damaged rows count as retained and are listed by name; the
// unfinished rows it read give rep.OldestUnfinished.
func (t *Tally) Fill(rep *CleanupReport) {
	rep.Retained = t.retained + len(t.damaged)
	rep.Stranded = t.stranded
	rep.OldestUnfinished = t.oldest
	rep.Damaged = rep.Damaged[:0]
	for name, err := range t.damaged {
		rep.Damaged = append(rep.Damaged, DamagedRow{Name: name, Err: err})
	}
	sort.Slice(rep.Damaged, func(i, j int) bool { return rep.Damaged[i].Name < rep.Damaged[j].Name })
}

// Count adds one row read for Stats: a row gone since it was listed is skipped, a damaged one
// counted as a row and as damaged. Any other error is returned unchanged.
func (s *Stats) Count(row *Row, err error) error {
	switch {
	case errors.Is(err, ErrUnknownDelivery):
		return nil
	case errors.Is(err, ErrCorrupt):
		s.Damaged++
		s.Rows++
		return nil
	case err != nil:
		return err
	}
	if s.ByState == nil {
		s.ByState = map[State]int64{}
	}
	if s.ByLifetime == nil {
		s.ByLifetime = map[Lifetime]int64{}
	}
	s.Rows++
	s.ByState[row.State]++
	s.ByLifetime[row.Lifetime()]++
	now := s.Now
	if now.IsZero() {
		now = s.HighWater
	}
	const day = 24 * time.Hour
	if now.Sub(row.CreatedAt) < day {
		s.AdmittedLastDay++
	}
	// A row whose retention already ended waits for the next pass: it goes within the day too.
	if !row.RetainUntil.IsZero() && !row.RetainUntil.After(now.Add(day)) {
		s.EndingNextDay++
	}
	return nil
}
