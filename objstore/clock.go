package objstore

import (
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// storeClock is the ledger's only clock: the store's. Every answer of the store carries a Date
// (one-second resolution); the clock keeps the latest one with the local reading at which it
// arrived, and estimates the store's time since as that Date plus the local time elapsed. A
// Date is the answering node's time when it answered, truncated to the second, so the estimate
// is never ahead of that node's clock by more than the local clock's drift since the last
// answer, nor behind it by more than a second plus the answer's transit time, while the host
// runs and the node's clock does not step (a host suspended counts none of that time: its
// estimate is then behind by the whole suspension, so nothing is decided on the estimate alone
// that a lagging one would get wrong: see admitNew and update, which decide on a fresh Date; a
// node whose clock steps back leaves the estimate on its former time, ahead by the step, until
// the next answer: a disagreement of the nodes, which the ledger assumes within 10 seconds).
// It never goes back: a Date older than one seen before is a floor, not a new reading.
//
// The host's own clock decides nothing: a host minutes ahead or behind gets the same
// estimates, because only the time elapsed between two of its readings is used.
type storeClock struct {
	// local is the host's clock, read only for elapsed time (default: time.Now, whose
	// monotonic reading makes the elapsed time immune to wall-clock steps). wall is the host's
	// wall clock, which goes on while the host is suspended (default: time.Now without its
	// monotonic reading; a clock given in Config tells it with a Wall method, or not at all).
	local, wall func() time.Time

	mu        sync.Mutex
	date, at  time.Time // the latest Date, and the local reading when it arrived
	atWall    time.Time // the wall reading when it arrived
	max       time.Time // the latest Date ever seen
	estimated bool
}

// wallClock is a host clock that also tells its wall time (time.Now tells both): the handle
// then notices a suspension of the host, during which the wall clock goes on and the clock for
// elapsed time does not.
type wallClock interface {
	ledger.Clock
	Wall() time.Time
}

func newStoreClock(local ledger.Clock) *storeClock {
	c := &storeClock{local: time.Now, wall: func() time.Time { return time.Now().Round(0) }}
	switch l := local.(type) {
	case nil:
	case wallClock:
		c.local, c.wall = l.Now, l.Wall
	default:
		c.local, c.wall = l.Now, l.Now
	}
	return c
}

// observe records the Date of an answer that just arrived.
func (c *storeClock) observe(date time.Time) {
	at, atWall := c.local(), c.wall()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.date, c.at, c.atWall, c.estimated = date.UTC(), at, atWall, true
	if date.After(c.max) {
		c.max = date.UTC()
	}
}

// steadyWithin is how far the host's two clocks may part since the store's last answer before
// the estimate is no longer trusted without a fresh answer.
const steadyWithin = time.Second

// Steady reports whether the estimate can be decided on without asking the store: the store
// has answered, and the host was not suspended since (its wall clock and its clock for elapsed
// time have not parted by more than steadyWithin). A handle whose host was suspended decides
// on a fresh read instead.
func (c *storeClock) Steady() bool {
	now, wall := c.local(), c.wall()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.estimated {
		return false
	}
	d := wall.Sub(c.atWall) - now.Sub(c.at)
	return d <= steadyWithin && d >= -steadyWithin
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
