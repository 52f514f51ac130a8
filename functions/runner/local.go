package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// Local runs a Runner over an in-process queue: in amiss serve (and the end-to-end tests) it
// does what the SQS event source and SQSHandler do in AWS. A message that is not done goes
// back to the queue to come again at its RetryAt, so a Busy row, a failed attempt or a failed
// publication is retried without a broker. Nothing is lost when the process stops: what is
// left stays in the ledger (a row leased by a cut worker runs again once its lease has ended),
// and is queued again by the recovery at the next start or by the stranded sweep.
type Local struct {
	Runner *Runner
	Queue  *queue.Local

	workers int // Run's
}

// Next receives the next ready message and processes it under ctx. A message that is not done
// is sent back to come again at its RetryAt (as the runner's clock, Runner.Now, measures it),
// unless ctx has ended. A failure to process is logged on the runner's log, not returned: the
// result says when the message comes again. The error is the queue's when no message could be
// received: queue.ErrClosed once the queue is closed and nothing is ready, or ctx's.
//
// A message whose verdict waits for another's post on its subject is parked there once sent
// back: the holder's report (made by any worker of this process) queues it again at once.
func (c *Local) Next(ctx context.Context) (Result, error) {
	m, err := c.Queue.Receive(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := c.Runner.Process(waitForSeat(withWaker(ctx, c.wake), c.workers), m)
	if err != nil {
		c.Runner.log().Warn("runner", "err", err)
	}
	if !res.Done && ctx.Err() == nil {
		c.sendBack(ctx, m, res.RetryAt)
		if at, ok := c.Runner.park(ctx, res, localWake(m)); ok {
			c.sendBack(ctx, m, at) // the grant it waited for ended meanwhile
		}
	}
	return res, nil
}

// sendBack queues m again to come at at (the runner's clock). The queue keeps the earlier of
// two times for one message, so a wake that came first is not undone.
func (c *Local) sendBack(ctx context.Context, m queue.Message, at time.Time) {
	m.Delay = at.Sub(c.Runner.now())
	// A closed queue (a shutdown) leaves the row to the next start's recovery.
	if err := c.Queue.Send(ctx, m); err != nil && !errors.Is(err, queue.ErrClosed) {
		c.Runner.log().Warn("runner: message not queued again; the stranded sweep finds its row", "key", m.Key, "err", err)
	}
}

// localWake is the wake of a message of the in-process queue: the message itself.
func localWake(m queue.Message) string {
	return localWakePrefix + m.Key.String() + "." + m.Binding.String()
}

const localWakePrefix = "local:"

// wake queues the message a wake of this queue names to come now; another queue's wake (an
// SQS receipt handle on a shared root) is not this process's to bring back.
func (c *Local) wake(ctx context.Context, w string) {
	rest, ok := strings.CutPrefix(w, localWakePrefix)
	k, d, ok2 := strings.Cut(rest, ".")
	key, kerr := ledger.ParseKey(k)
	binding, derr := ledger.ParseDigest(d)
	if !ok || !ok2 || kerr != nil || derr != nil {
		return
	}
	if err := c.Queue.Send(ctx, queue.Message{Key: key, Binding: binding}); err != nil && !errors.Is(err, queue.ErrClosed) {
		c.Runner.log().Warn("runner: a parked message was not woken; it comes back when the grant it waited for ends", "key", key, "err", err)
	}
}

// Run takes messages with Next in workers goroutines until Next answers an error, and returns
// once every worker has stopped: after Queue.Close, when no message is ready, or when ctx
// ends (work in flight is then cut: a cancelled evaluation releases its lease).
func (c *Local) Run(ctx context.Context, workers int) {
	c.workers = workers
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Next(ctx); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
}
