package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/amiss-ci/amiss/functions/queue"
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
}

// Next receives the next ready message and processes it under ctx. A message that is not done
// is sent back to come again at its RetryAt (as the runner's clock, Runner.Now, measures it),
// unless ctx has ended. A failure to process is logged on the runner's log, not returned: the
// result says when the message comes again. The error is the queue's when no message could be
// received: queue.ErrClosed once the queue is closed and nothing is ready, or ctx's.
func (c *Local) Next(ctx context.Context) (Result, error) {
	m, err := c.Queue.Receive(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := c.Runner.Process(ctx, m)
	if err != nil {
		c.Runner.log().Warn("runner", "err", err)
	}
	if !res.Done && ctx.Err() == nil {
		m.Delay = res.RetryAt.Sub(c.Runner.now())
		// A closed queue (a shutdown) leaves the row to the next start's recovery.
		if err := c.Queue.Send(ctx, m); err != nil && !errors.Is(err, queue.ErrClosed) {
			c.Runner.log().Warn("runner: message not queued again; the stranded sweep finds its row", "key", m.Key, "err", err)
		}
	}
	return res, nil
}

// Run takes messages with Next in workers goroutines until Next answers an error, and returns
// once every worker has stopped: after Queue.Close, when no message is ready, or when ctx
// ends (work in flight is then cut: a cancelled evaluation releases its lease).
func (c *Local) Run(ctx context.Context, workers int) {
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
