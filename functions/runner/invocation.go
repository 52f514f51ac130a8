package runner

import (
	"context"
	"time"
)

// The invocation's time. In Lambda every message of a batch shares one deadline; the runner
// cuts its lease, its route building and its evaluation so that each ends a margin or two
// before it, and judges whether a message had all the time the deployment gives any
// (FirstOfInvocation): only then is running out of it a failed attempt.

func (r *Runner) margin() time.Duration {
	if r.Margin > 0 {
		return r.Margin
	}
	return 5 * time.Second
}

// window is the lease window configured (Lease, by default a minute).
func (r *Runner) window() time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return time.Minute
}

// startKey holds when the invocation a context belongs to started (FirstOfInvocation).
type startKey struct{}

// FirstOfInvocation marks ctx as an invocation starting now (the SQS handler marks each
// batch's). A message reached while at most a margin of the invocation is spent has all the
// time the deployment gives any message: it is claimed with whatever time is left (more
// than two margins), and an evaluation of it cut by the deadline is a failed attempt. A later
// one needs a whole lease window besides to be claimed, and its cut evaluation is handed
// back, since its time went to the messages before it. Without the mark (a caller that
// says nothing of the invocation), a message with a deadline is a later one.
func FirstOfInvocation(ctx context.Context) context.Context {
	return context.WithValue(ctx, startKey{}, time.Now())
}

// takenUp is what of its invocation's time a message had when the runner took it up, before
// its claim: the runner's own work on it (the claim, the route's build) spends none of its
// fairness. first: at most a margin of the invocation was spent (FirstOfInvocation).
type takenUp struct {
	first  bool
	margin time.Duration
}

// takeUp is what of ctx's invocation's time a message taken up now has.
func (r *Runner) takeUp(ctx context.Context) takenUp {
	start, ok := ctx.Value(startKey{}).(time.Time)
	return takenUp{first: ok && time.Since(start) <= r.margin(), margin: r.margin()}
}

// fair judges whether an evaluation of the message, whose route took routeBuild to build, had
// all the time the deployment gives any message: only then is running out of it a failed
// attempt. It had when the message was the first of its invocation and its route was built
// within a margin; a route that took longer (a slow secret read) makes the evaluation late
// as a message taken up late is, and running out of time is then the scheduling's doing.
// This is the only place fairness is judged: the policy reads it (attempt.fair).
func (t takenUp) fair(routeBuild time.Duration) bool {
	return t.first && routeBuild <= t.margin
}

// leaseFor is the lease window: Lease, cut to end a margin before the invocation's deadline.
func (r *Runner) leaseFor(ctx context.Context) time.Duration {
	lease := r.window()
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - r.margin(); left < lease {
			lease = left
		}
	}
	return lease
}

// evaluationContext bounds an evaluation to end two margins before the invocation's deadline:
// running out of that time is a failed attempt, and the margin before the lease ends is left
// to save its error verdict.
func (r *Runner) evaluationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-2*r.margin()))
	}
	return context.WithCancel(ctx)
}

// detached is ctx without its cancellation (a shutdown), for a step that must finish once
// begun, bounded by d and by ctx's deadline (past which the invocation is gone anyway).
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	if dl, ok := ctx.Deadline(); ok {
		c2, cancel2 := context.WithDeadline(c, dl)
		return c2, func() { cancel2(); cancel() }
	}
	return c, cancel
}

// roomWaitKey marks a context whose messages wait for room at the publish gate (WaitForRoom).
type roomWaitKey struct{}

// waitForRoom marks ctx as an invocation whose messages, finding no room at a provider's
// publish gate, wait for it rather than go back to the queue: in Lambda every hand-back is one
// more receive of the message towards the queue's maxReceiveCount, while in amiss serve a
// worker must not wait on a slow provider (its queue is in process, a hand-back costs nothing).
func waitForRoom(ctx context.Context) context.Context {
	return context.WithValue(ctx, roomWaitKey{}, true)
}

// waitsForRoom reports whether a message of ctx waits for room at the gate: ctx is marked
// (waitForRoom) and its invocation has time for need and two margins besides (the keeper's
// and the hand-back's) once the wait is over.
func (r *Runner) waitsForRoom(ctx context.Context, need time.Duration) bool {
	if ok, _ := ctx.Value(roomWaitKey{}).(bool); !ok {
		return false
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) > need+2*r.margin()
}

// seatKey marks a context whose messages wait for room at the publish gate while they hold a
// seat there (waitForSeat).
type seatKey struct{}

// waitForSeat marks ctx as processed by one of the workers of amiss serve (0: their number is
// not known): a message that finds no room at a provider's publish gate waits for it while the
// destination's requests in flight and the messages waiting leave a seat, rather than go back
// to the queue and be claimed again a moment later, however soon the room is given back.
func waitForSeat(ctx context.Context, workers int) context.Context {
	return context.WithValue(ctx, seatKey{}, seats{workers: workers})
}

type seats struct{ workers int }

func waitsForSeat(ctx context.Context) bool {
	_, ok := ctx.Value(seatKey{}).(seats)
	return ok
}

// shareOf is how many requests in flight to one destination a runner processing ctx allows
// at most, limit being the route's: in amiss serve, one fewer than its workers (when it has
// more than one), since a request holds its worker until it ends, and a provider that hangs
// must leave a worker to the deliveries for other destinations.
func shareOf(ctx context.Context, limit int) int {
	if s, ok := ctx.Value(seatKey{}).(seats); ok && s.workers > 1 {
		return min(limit, s.workers-1)
	}
	return limit
}

// sleep waits d, or until wake is closed, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
