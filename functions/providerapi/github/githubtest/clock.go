package githubtest

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand; share its Now between github.AppConfig and the fake.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
