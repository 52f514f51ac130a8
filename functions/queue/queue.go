// Package queue hands admitted deliveries from the ingress to the runner. A message carries
// only the delivery key and the binding digest: the ledger row holds everything else, so a
// message can be lost, duplicated or re-driven without harm.
package queue

import (
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
// time, and Receive hands them out in order of readiness. It is safe for concurrent use.
type Local struct {
	mu      sync.Mutex
	pending []localItem
	wake    chan struct{}
	closed  bool
	done    chan struct{} // closed by Close: wakes every receiver
	now     func() time.Time
}

type localItem struct {
	m  Message
	at time.Time
}

// NewLocal returns an empty in-process queue.
func NewLocal() *Local {
	return &Local{wake: make(chan struct{}, 1), done: make(chan struct{}), now: time.Now}
}

// Send implements Queue.
func (q *Local) Send(ctx context.Context, m Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.pending = append(q.pending, localItem{m: m, at: q.now().Add(m.Delay)})
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
	return len(q.pending)
}

// Receive waits for the next ready message.
func (q *Local) Receive(ctx context.Context) (Message, error) {
	for {
		q.mu.Lock()
		if q.closed && len(q.pending) == 0 {
			q.mu.Unlock()
			return Message{}, ErrClosed
		}
		next, wait := -1, time.Hour
		now := q.now()
		for i, it := range q.pending {
			if d := it.at.Sub(now); d <= 0 {
				next = i
				break
			} else if d < wait {
				wait = d
			}
		}
		if next >= 0 {
			m := q.pending[next].m
			q.pending = append(q.pending[:next], q.pending[next+1:]...)
			q.mu.Unlock()
			return m, nil
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

// Close stops accepting messages; Receive drains what is left, then answers ErrClosed.
func (q *Local) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}
