package runner

import (
	"context"
	"errors"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Hand-over at the report. A verdict that finds another's post in flight on its subject is
// told to wait until that grant ends (a grant lasts the route's timeout twice over plus 10 s).
// The holder usually reports long before: its post answered, was refused, or is known not to
// have been sent. So the waiting verdict's message, once set aside until the grant's end, is
// parked on the subject's record with a wake (how its queue brings it back: the in-process
// queue's message, or an SQS receipt handle), and the holder's runner, whatever process it
// runs in, brings it back when its report lands. Parking after the message is set aside (and
// the row handed back free) closes every race with the report: a report that lands first is
// seen by the park, which answers to come back at once; one that lands after finds the park
// and wakes the message. A wake that never comes (the reporter died between its report and the
// wake, the queue refused it) costs what it cost before: the message comes back at the grant's
// end. A wake is never unsafe: whoever comes back asks the subject's record again.

// waker brings back the message a wake names (ledger.SubjectGrant.Wake).
type waker func(ctx context.Context, wake string)

type wakerKey struct{}

// withWaker marks ctx as processed by a queue that brings parked messages back with wake: the
// runner calls it with the wake a report hands back.
func withWaker(ctx context.Context, wake waker) context.Context {
	return context.WithValue(ctx, wakerKey{}, wake)
}

// park parks the message of res, set aside until res.RetryAt, on its subject's record with
// wake, and answers when it must come back instead, by the runner's clock, when that is
// sooner: the grant it waited for is over (reported before the park), or a newer verdict
// superseded it. It answers false when there is nothing to change: res does not wait for a
// post, the wake cannot be recorded, the ledger could not be asked (the message comes back
// at RetryAt, as it would have without a park), or the park was recorded on the grant it was
// told to wait for. A parked message is then left as it was set aside: the holder's report
// may wake it at any moment after the park, and setting it aside again, to an end reckoned
// afresh on this runner's clock, would undo that wake.
func (r *Runner) park(ctx context.Context, res Result, wake string) (time.Time, bool) {
	if res.wait == nil || !ledger.ValidWake(wake) {
		return time.Time{}, false
	}
	q := *res.wait
	q.Wake = wake
	pctx, cancel := detached(ctx, 5*time.Second)
	defer cancel()
	sent := r.now()
	g, err := r.Ledger.AcquireSubject(pctx, q)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log().Info("not parked: the message comes back when the grant it waits for ends", "key", q.Order.Key.String(), "err", err)
		}
		return time.Time{}, false
	}
	at := sent // superseded: back now, to be ended
	if g.Outcome == ledger.SubjectWait && !g.RetryAt.Before(res.waitUntil) {
		return time.Time{}, false // parked on the grant it waited for (or to wait longer still)
	}
	if g.Outcome == ledger.SubjectWait {
		// The ledger's wait, counted from this runner's time of asking.
		at = sent.Add(max(g.RetryAt.Sub(g.Decided), 0))
	}
	if !at.Before(res.RetryAt) {
		return time.Time{}, false
	}
	return at, true
}
