package ledger

import (
	"sync"
	"time"
)

// Clock is the time source a ledger decides with. Backends take it injected, so tests can
// move it forwards and backwards; the ledger itself never lets its effective now go back.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now with the monotonic reading stripped: ledger times are persisted and
// compared across processes, where only the wall reading means anything.
func (SystemClock) Now() time.Time { return time.Now().Round(0) }

// ManualClock is a Clock that moves only when told to. It is safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock standing at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t.Round(0)} }

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, which may be negative.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.Round(0)
	c.mu.Unlock()
}

// MaxTime returns the latest of the given instants (the zero time when none is given).
func MaxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
