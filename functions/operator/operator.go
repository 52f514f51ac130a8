// Package operator holds the operator's remedies over the ledger contract, shared by the amiss
// command, the local server, the operator Lambda function and the tests: listing rows by
// state, inspecting one with its frozen verdict, reviving abandoned verdicts and queueing them
// again, and queueing every unfinished row when a server starts. Handler carries out the
// operator function's requests (handler.go).
//
// Everything here goes through the ledger contract and the queue: a revived row is published
// with the bytes it froze (never evaluated again), and a message is only a hint, so queueing a
// row twice, or queueing one that is already done, is harmless.
package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// PageSize is how many rows one listing request reads.
const PageSize = 500

// Walk calls fn for every row in the backend's key order and damaged (when not nil) for every
// row that cannot be read. It stops at the first error fn returns, or when the listing fails.
func Walk(ctx context.Context, l ledger.Ledger, fn func(ledger.Row) error, damaged func(ledger.DamagedRow)) error {
	cursor := ledger.Cursor("")
	for {
		page, err := l.Rows(ctx, cursor, PageSize)
		if err != nil {
			return err
		}
		for _, d := range page.Damaged {
			if damaged != nil {
				damaged(d)
			}
		}
		for _, r := range page.Rows {
			if err := fn(r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		cursor = page.Next
	}
}

// List calls fn for every row in state (zero: every state).
func List(ctx context.Context, l ledger.Ledger, state ledger.State, fn func(ledger.Row) error, damaged func(ledger.DamagedRow)) error {
	return Walk(ctx, l, func(r ledger.Row) error {
		if state != 0 && r.State != state {
			return nil
		}
		return fn(r)
	}, damaged)
}

// Message is the queue message that re-drives a row.
func Message(r ledger.Row) queue.Message {
	return queue.Message{Key: r.Key, Binding: r.Binding.Digest()}
}

// Recover queues every unfinished row (pending, running or saved) at once, and reports how
// many it queued. A row whose lease is still live is queued too: the runner's claim answers
// Busy and the message comes back when the lease ends. A server calls it at start, so work cut
// by a crash resumes without waiting for the stranded sweep.
func Recover(ctx context.Context, l ledger.Ledger, q queue.Queue, damaged func(ledger.DamagedRow)) (int, error) {
	n := 0
	err := Walk(ctx, l, func(r ledger.Row) error {
		if r.State.Terminal() {
			return nil
		}
		if err := q.Send(ctx, Message(r)); err != nil {
			return fmt.Errorf("queue %s: %w", r.Key, err)
		}
		n++
		return nil
	}, damaged)
	return n, err
}

// ErrNotQueued: the row was revived but its message could not be sent; the stranded sweep (or
// a server's recovery at start) re-drives it.
var ErrNotQueued = errors.New("operator: revived, but not queued")

// Republish revives an abandoned row (a saved row is left as it is) with the report it froze
// and queues it, so it is published again and never evaluated again. evaluationID, when not
// empty, must be the row's. With a nil queue the row is only revived.
func Republish(ctx context.Context, l ledger.Ledger, q queue.Queue, key ledger.Key, evaluationID string) (ledger.Row, error) {
	row, err := l.Revive(ctx, key, evaluationID)
	if err != nil {
		return row, err
	}
	if q != nil {
		if err := q.Send(ctx, Message(row)); err != nil {
			return row, fmt.Errorf("%w: %v", ErrNotQueued, err)
		}
	}
	return row, nil
}

// Outcome is what RepublishAbandoned did with one row.
type Outcome struct {
	Row ledger.Row
	Err error
}

// RepublishAbandoned revives and queues every abandoned row whose abandonment (its last
// transition) is at or after since (zero: every one), calling fn with each outcome. One row
// that fails does not stop the others; a listing that fails does.
func RepublishAbandoned(ctx context.Context, l ledger.Ledger, q queue.Queue, since time.Time, fn func(Outcome), damaged func(ledger.DamagedRow)) error {
	return List(ctx, l, ledger.StateAbandoned, func(r ledger.Row) error {
		if r.UpdatedAt.Before(since) {
			return nil
		}
		row, err := Republish(ctx, l, q, r.Key, r.EvaluationID)
		if err != nil && row.Key.IsZero() {
			row = r
		}
		fn(Outcome{Row: row, Err: err})
		return ctx.Err()
	}, damaged)
}
