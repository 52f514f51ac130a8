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

// fresh reports whether at most a margin of ctx's invocation is spent (FirstOfInvocation).
func (r *Runner) fresh(ctx context.Context) bool {
	start, ok := ctx.Value(startKey{}).(time.Time)
	return ok && time.Since(start) <= r.margin()
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
