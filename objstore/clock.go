package objstore

import (
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// storeClock is the ledger's only clock: the store's. Every answer of the store carries a Date
// (one-second resolution); the clock keeps the latest one with the local reading at which it
// arrived, and estimates the store's time since as that Date plus the local time elapsed. A
// Date is the store's time when it answered, truncated to the second, so the estimate is never
// ahead of the store by more than the local clock's drift since the last answer, and never
// behind it by more than a second plus the answer's transit time, while the host runs (a host
// suspended counts none of that time: its estimate is then behind by the whole suspension, so
// nothing is decided on the estimate alone that a lagging one would get wrong: see admitNew
// and update, which decide on a fresh Date). It never goes back: a Date
// older than one seen before is a floor, not a new reading.
//
// The host's own clock decides nothing: a host minutes ahead or behind gets the same
// estimates, because only the time elapsed between two of its readings is used.
type storeClock struct {
	// local is the host's clock, read only for elapsed time (default: time.Now, whose
	// monotonic reading makes the elapsed time immune to wall-clock steps).
	local func() time.Time

	mu        sync.Mutex
	date, at  time.Time // the latest Date, and the local reading when it arrived
	max       time.Time // the latest Date ever seen
	estimated bool
}

func newStoreClock(local ledger.Clock) *storeClock {
	c := &storeClock{local: time.Now}
	if local != nil {
		c.local = local.Now
	}
	return c
}

// observe records the Date of an answer that just arrived.
func (c *storeClock) observe(date time.Time) {
	at := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.date, c.at, c.estimated = date.UTC(), at, true
	if date.After(c.max) {
		c.max = date.UTC()
	}
}

// Now estimates the store's time; the zero time until the store has answered once.
func (c *storeClock) Now() time.Time {
	now := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.estimated {
		return time.Time{}
	}
	return ledger.MaxTime(c.date.Add(now.Sub(c.at)), c.max).Round(0)
}
