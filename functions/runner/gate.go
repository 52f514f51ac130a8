package runner

import (
	"sync"
	"time"
)

// gates bound the requests one runner process has in flight to each publishing destination
// (a provider's API at one base URL), and to each repository there: a provider that answers
// slowly holds at most that many requests. A delivery that finds no room waits for it, woken
// when room is given back (roomGiven): in Lambda within its invocation (waitForRoom); in amiss
// serve, whose workers are few and shared by every destination (a destination's requests in
// flight are fewer than the workers: shareOf), only while it holds a seat (seat: the
// destination's requests in flight and deliveries waiting together stay within its limit)
// and while the requests holding the room are young (a provider that answers at once frees it in milliseconds; one
// that has held a request for gateRetry is slow, and a worker is not held waiting on it).
// Otherwise it is handed back to come again a moment later (gateRetry).
type gates struct {
	mu      sync.Mutex
	flight  map[string][]request // destination, and destination + repository: the requests in flight
	waiting map[string]int       // destination: deliveries seated to wait for room
	freed   chan struct{}        // closed (and replaced) when room is given back
}

// request is a request in flight: when it was sent, and when it has surely ended.
type request struct {
	sent, end time.Time
}

// seat takes a place to wait for room at destination, whose requests are limited to limit at
// once, when its requests in flight and the deliveries already waiting leave one; it answers
// the function that gives the place back, or nil.
func (g *gates) seat(destination string, limit int) func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.flight[destination])+g.waiting[destination] >= limit {
		return nil
	}
	if g.waiting == nil {
		g.waiting = map[string]int{}
	}
	g.waiting[destination]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.waiting[destination]--; g.waiting[destination] <= 0 {
				delete(g.waiting, destination)
			}
		})
	}
}

// roomGiven returns a channel closed the next time room is given back, for a caller that
// found none and waits (it takes the channel before it looks, so no release is missed).
func (g *gates) roomGiven() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed == nil {
		g.freed = make(chan struct{})
	}
	return g.freed
}

// gateRetry is how long a delivery that found no room waits before it tries again.
const gateRetry = time.Second

// room is what enter found when there was none: how long to wait before trying again (a
// moment, or until the earliest request in flight has surely ended if that is sooner), and
// when the oldest request holding the room was sent.
type room struct {
	wait   time.Duration
	oldest time.Time
}

// enter takes room for a request to destination and repo, allowed limit requests at once
// and perRepo for one repository, sent at now and ended by end. It answers the function that
// gives the room back, or nil and what it found.
func (g *gates) enter(destination, repo string, limit, perRepo int, now, end time.Time) (func(), room) {
	keys := [2]string{destination, destination + "\x00" + repo}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flight == nil {
		g.flight = map[string][]request{}
	}
	for i, k := range keys {
		if reqs := g.flight[k]; len(reqs) >= [2]int{limit, perRepo}[i] {
			first, oldest := reqs[0].end, reqs[0].sent
			for _, q := range reqs[1:] {
				first, oldest = minTime(first, q.end), minTime(oldest, q.sent)
			}
			return nil, room{wait: min(max(first.Sub(now), 100*time.Millisecond), gateRetry), oldest: oldest}
		}
	}
	mine := request{sent: now, end: end}
	for _, k := range keys {
		g.flight[k] = append(g.flight[k], mine)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, k := range keys {
				reqs := g.flight[k]
				for i, q := range reqs {
					if q == mine {
						reqs = append(reqs[:i], reqs[i+1:]...)
						break
					}
				}
				if len(reqs) == 0 {
					delete(g.flight, k)
				} else {
					g.flight[k] = reqs
				}
			}
			if g.freed != nil {
				close(g.freed)
				g.freed = nil
			}
		})
	}, room{}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
