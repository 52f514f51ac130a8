// Package queue hands admitted deliveries from the ingress to the runner. A message carries
// only the delivery key and the binding digest: the ledger row holds everything else, so a
// message can be lost, duplicated or re-driven without harm.
package queue

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Message is one hand-off.
type Message struct {
	Key     ledger.Key    `json:"key"`
	Binding ledger.Digest `json:"binding"`
	// Delay holds the message back (a Busy row comes back at its retryAt).
	Delay time.Duration `json:"-"`
}

// Body encodes the message as the queue carries it.
func (m Message) Body() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// Parse decodes a message body.
func Parse(body string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return Message{}, fmt.Errorf("queue: message body: %w", err)
	}
	if m.Key.IsZero() {
		return Message{}, errors.New("queue: message without a key")
	}
	return m, nil
}

// Queue sends messages.
type Queue interface {
	Send(ctx context.Context, m Message) error
}

// ErrClosed: the in-process queue was closed.
var ErrClosed = errors.New("queue: closed")

// Local is the in-process queue of the local server: delayed messages become ready at their
// time, and Receive hands them out in order of readiness. A message sent while the same
// message (key and binding) is still waiting is not added twice: the waiting one keeps the
// earlier of the two times, so re-drives (a sweep, a recovery at start, a redelivered webhook)
// never pile up. It is safe for concurrent use.
type Local struct {
	mu     sync.Mutex
	items  localHeap
	index  map[localID]*localItem
	wake   chan struct{}
	closed bool
	done   chan struct{} // closed by Close: wakes every receiver
	now    func() time.Time
}

type localID struct {
	key     ledger.Key
	binding ledger.Digest
}

type localItem struct {
	m   Message
	at  time.Time
	pos int
}

// localHeap orders waiting messages by readiness.
type localHeap []*localItem

func (h localHeap) Len() int           { return len(h) }
func (h localHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h localHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *localHeap) Push(x any) {
	it := x.(*localItem)
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *localHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// NewLocal returns an empty in-process queue whose delays run on the wall clock.
func NewLocal() *Local { return newLocal(time.Now) }

// NewLocalOn returns an empty in-process queue whose delays run on clock: a message sent with
// a delay becomes ready once clock reads its time. A test that moves a manual clock sees a
// delayed message ready at the next Receive after the clock has reached its time (a Receive
// already waiting notices the move only when a Send or a Close wakes it).
func NewLocalOn(clock ledger.Clock) *Local { return newLocal(clock.Now) }

func newLocal(now func() time.Time) *Local {
	return &Local{index: map[localID]*localItem{}, wake: make(chan struct{}, 1), done: make(chan struct{}), now: now}
}

// Send implements Queue.
func (q *Local) Send(ctx context.Context, m Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	at := q.now().Add(m.Delay)
	id := localID{m.Key, m.Binding}
	if it, ok := q.index[id]; ok {
		if at.Before(it.at) {
			it.at = at
			heap.Fix(&q.items, it.pos)
		} else {
			return nil
		}
	} else {
		it := &localItem{m: m, at: at}
		q.index[id] = it
		heap.Push(&q.items, it)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// Len reports the messages waiting, ready or not.
func (q *Local) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Receive waits for the next ready message. Once the queue is closed it hands out what is
// ready and then answers ErrClosed, leaving messages that are not ready yet (Len counts them).
func (q *Local) Receive(ctx context.Context) (Message, error) {
	for {
		q.mu.Lock()
		wait := time.Hour
		if len(q.items) > 0 {
			top := q.items[0]
			if wait = top.at.Sub(q.now()); wait <= 0 {
				heap.Pop(&q.items)
				delete(q.index, localID{top.m.Key, top.m.Binding})
				q.mu.Unlock()
				m := top.m
				m.Delay = 0
				return m, nil
			}
		}
		if q.closed {
			q.mu.Unlock()
			return Message{}, ErrClosed
		}
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Message{}, ctx.Err()
		case <-q.wake:
		case <-q.done:
		case <-t.C:
		}
		t.Stop()
	}
}

// Close stops accepting messages; Receive hands out what is ready, then answers ErrClosed.
func (q *Local) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}
