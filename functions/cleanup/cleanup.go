// Package cleanup is the scheduled cleanup: it empties the dead-letter queue of the messages
// a row explains (re-driving the unfinished ones), runs the ledger's Cleanup in bounded passes
// within its time limit, re-enqueues every stranded row (admitted but never run, saved with no
// live lease, running with an ended lease) so no verdict waits on a message that will never
// come, and logs and measures what it did.
package cleanup

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// Handler is the cleanup function.
type Handler struct {
	Ledger ledger.Ledger
	Queue  queue.Queue
	// DeadLetters is the dead-letter queue the runner's messages end in after ten receives;
	// nil: none (amiss serve, a local run). See deadletters.go.
	DeadLetters DeadLetterQueue
	Log         *slog.Logger
	// Margin is the time kept free before the context's deadline (default 10 seconds, and
	// never more than a fifth of the time the invocation has, so a short one still cleans).
	Margin time.Duration
	// Metrics receives, after every run: cleanup_succeeded (1 when the run finished at least
	// one pass without an error, 0 when it did not: a failed pass, maintenance held by
	// another cleanup, or no time for a pass), oldest_unfinished_age (seconds since the
	// admission of the oldest unfinished row the run read; 0 when the run read every row and
	// none is unfinished; not reported by a run that read part of the ledger and found none),
	// the capacity in use (capacity_used, a count, and capacity_used_percent), and with
	// DeadLetters dead_letters_redriven, dead_letters_removed and, once the queue was read
	// through, dead_letters_unexplained. Nil: none.
	Metrics interface {
		Gauge(name string, v float64, unit string)
	}
	// CatchUp, when set, runs after the cleanup passes, with the time left less the margin:
	// catch-up of the routes' failed webhook deliveries (functions/catchup). The passes
	// leave it at least a quarter of the time the invocation has after the dead-letter queue
	// (a lap they do not finish is taken up by the next invocation). Its error is returned
	// with the passes'; it never stops them.
	CatchUp func(ctx context.Context) error
}

// Summary is what one invocation did.
type Summary struct {
	Passes, Removed, Retained, Damaged, Stranded, Requeued int
	// LapDone reports that the sweep reached the end of the ledger.
	LapDone bool
	// CapacityUsed and RecordCap are the slots in use after the last pass and the cap
	// (RecordCap zero: the backend did not report them).
	CapacityUsed, RecordCap int64
	// OldestUnfinished is the admission time of the oldest unfinished row the passes read
	// (zero: none), and Now the ledger's effective now of the last pass.
	OldestUnfinished, Now time.Time
	// DeadLetters is what was done with the dead-letter queue (zero without one).
	DeadLetters DeadLetterSummary
}

// Handle reads the dead-letter queue (when there is one), then runs cleanup passes until a lap
// is done or the time is nearly up. An error reading the dead-letter queue does not stop the
// passes; it is returned with theirs.
func (h *Handler) Handle(ctx context.Context) (Summary, error) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	margin := h.Margin
	if margin <= 0 {
		margin = 10 * time.Second
	}
	if dl, ok := ctx.Deadline(); ok {
		margin = min(margin, time.Until(dl)/5)
	}
	var s Summary
	var dlErr error
	if h.DeadLetters != nil {
		s.DeadLetters, dlErr = h.deadLetters(ctx, log, margin)
		d := s.DeadLetters
		log.Info("dead letters", "redriven", d.Redriven, "removed", d.Removed, "unexplained", d.Unexplained, "read_through", d.Complete)
		if dlErr != nil {
			log.Error("dead-letter queue: reading stopped; the messages left come back at the next run", "err", dlErr)
		}
	}
	passMargin := margin
	if dl, ok := ctx.Deadline(); ok && h.CatchUp != nil {
		// The passes leave catch-up a quarter of the invocation: a lap longer than an
		// invocation would otherwise leave it none, every time.
		passMargin += time.Until(dl) / 4
	}
	err := h.passes(ctx, log, passMargin, &s)
	if err != nil {
		log.Error("cleanup pass failed: nothing removed in it", "err", err, "passes", s.Passes)
	} else {
		log.Info("cleanup", "passes", s.Passes, "removed", s.Removed, "retained", s.Retained, "damaged", s.Damaged,
			"stranded", s.Stranded, "requeued", s.Requeued, "lap_done", s.LapDone, "oldest_unfinished_age", s.OldestUnfinishedAge().String())
	}
	h.report(log, s, err == nil, dlErr == nil)
	var cuErr error
	if h.CatchUp != nil {
		cctx := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			cctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
			defer cancel()
		}
		if cuErr = h.CatchUp(cctx); cuErr != nil {
			log.Error("catch-up failed", "err", cuErr)
		}
	}
	return s, errors.Join(err, dlErr, cuErr)
}

// passes runs cleanup passes into s until a lap is done or the time is nearly up. Another
// cleanup holding maintenance ends the run without an error.
func (h *Handler) passes(ctx context.Context, log *slog.Logger, margin time.Duration, s *Summary) error {
	cursor := ledger.Cursor("")
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < margin {
			return nil
		}
		rep, err := h.Ledger.Cleanup(ctx, cursor)
		if errors.Is(err, ledger.ErrBusy) {
			log.Info("cleanup: another cleanup holds maintenance")
			return nil
		}
		if err != nil {
			return err
		}
		s.Passes++
		s.Removed += len(rep.Removed)
		s.Retained += rep.Retained
		s.Damaged += len(rep.Damaged)
		s.Stranded += len(rep.Stranded)
		s.OldestUnfinished = ledger.Earliest(s.OldestUnfinished, rep.OldestUnfinished)
		s.Now = ledger.MaxTime(s.Now, rep.HighWater)
		if rep.RecordCap > 0 {
			s.CapacityUsed, s.RecordCap = rep.CapacityUsed, rep.RecordCap
		}
		for _, d := range rep.Damaged {
			log.Error("damaged row skipped", "name", d.Name, "err", d.Err)
		}
		for _, st := range rep.Stranded {
			if err := h.Queue.Send(ctx, queue.Message{Key: st.Key, Binding: st.BindingDigest}); err != nil {
				log.Error("stranded row not re-enqueued", "key", st.Key.String(), "err", err)
				continue
			}
			s.Requeued++
		}
		if rep.Done {
			s.LapDone = true
			return nil
		}
		cursor = rep.Next
	}
}

// OldestUnfinishedAge is how long the oldest unfinished row the passes read has waited since
// its admission, by the ledger's clock (zero: none).
func (s Summary) OldestUnfinishedAge() time.Duration {
	if s.OldestUnfinished.IsZero() {
		return 0
	}
	return max(s.Now.Sub(s.OldestUnfinished), 0)
}

// report hands the run's metrics over (see Handler.Metrics) and warns about capacity.
func (h *Handler) report(log *slog.Logger, s Summary, passesOK, deadLettersOK bool) {
	if h.Metrics != nil {
		succeeded := 0.0
		if passesOK && s.Passes > 0 {
			succeeded = 1
		}
		h.Metrics.Gauge("cleanup_succeeded", succeeded, "Count")
		// A run that read part of the ledger and found nothing unfinished knows nothing of the
		// rest: it reports no figure rather than a zero the alarm would take for all clear.
		if !s.OldestUnfinished.IsZero() || s.LapDone {
			h.Metrics.Gauge("oldest_unfinished_age", s.OldestUnfinishedAge().Seconds(), "Seconds")
		}
		if h.DeadLetters != nil {
			h.Metrics.Gauge("dead_letters_redriven", float64(s.DeadLetters.Redriven), "Count")
			h.Metrics.Gauge("dead_letters_removed", float64(s.DeadLetters.Removed), "Count")
			if deadLettersOK && s.DeadLetters.Complete {
				h.Metrics.Gauge("dead_letters_unexplained", float64(s.DeadLetters.Unexplained), "Count")
			}
		}
	}
	h.capacity(log, s)
}

// capacity reports the capacity in use as metrics, and warns once it reaches
// ledger.CapacityWarning of the record cap: at the cap every new delivery is refused (503).
func (h *Handler) capacity(log *slog.Logger, s Summary) {
	if s.RecordCap <= 0 {
		return
	}
	pct := 100 * float64(s.CapacityUsed) / float64(s.RecordCap)
	if h.Metrics != nil {
		h.Metrics.Gauge("capacity_used", float64(s.CapacityUsed), "Count")
		h.Metrics.Gauge("capacity_used_percent", pct, "Percent")
	}
	if float64(s.CapacityUsed) >= ledger.CapacityWarning*float64(s.RecordCap) {
		log.Warn("ledger capacity: the record cap is nearly used; at the cap new deliveries are refused (503). "+
			"amiss ledger stats shows the rows by lifetime and the days to full",
			"capacity_used", s.CapacityUsed, "record_cap", s.RecordCap, "percent", int(pct))
	}
}

// Every runs a pass every interval until ctx ends, each bounded by the interval, as the
// schedule runs the cleanup function in AWS: the local server's cleanup. A pass logs what it
// did and what failed; a failed pass is followed by the next one at the next tick.
func (h *Handler) Every(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, interval)
			h.Handle(cctx)
			cancel()
		}
	}
}
