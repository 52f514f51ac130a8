// Package cleanup is the scheduled cleanup: it runs the ledger's Cleanup in bounded passes
// within its time limit, re-enqueues every stranded row (admitted but never run, saved with
// no live lease, running with an ended lease) so no verdict waits on a message that will never
// come, and logs what it did.
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
	Log    *slog.Logger
	// Margin is the time kept free before the context's deadline (default 10 seconds, and
	// never more than a fifth of the time the invocation has, so a short one still cleans).
	Margin time.Duration
	// Metrics receives the capacity in use after the last pass (capacity_used, a count, and
	// capacity_used_percent); nil: none.
	Metrics interface {
		Gauge(name string, v float64, unit string)
	}
}

// Summary is what one invocation did.
type Summary struct {
	Passes, Removed, Retained, Damaged, Stranded, Requeued int
	// LapDone reports that the sweep reached the end of the ledger.
	LapDone bool
	// CapacityUsed and RecordCap are the slots in use after the last pass and the cap
	// (RecordCap zero: the backend did not report them).
	CapacityUsed, RecordCap int64
}

// Handle runs cleanup passes until a lap is done or the time is nearly up.
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
	cursor := ledger.Cursor("")
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < margin {
			break
		}
		rep, err := h.Ledger.Cleanup(ctx, cursor)
		if errors.Is(err, ledger.ErrBusy) {
			log.Info("cleanup: another cleanup holds maintenance")
			return s, nil
		}
		if err != nil {
			log.Error("cleanup pass failed: nothing removed in it", "err", err, "passes", s.Passes)
			return s, err
		}
		s.Passes++
		s.Removed += len(rep.Removed)
		s.Retained += rep.Retained
		s.Damaged += len(rep.Damaged)
		s.Stranded += len(rep.Stranded)
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
			break
		}
		cursor = rep.Next
	}
	log.Info("cleanup", "passes", s.Passes, "removed", s.Removed, "retained", s.Retained, "damaged", s.Damaged,
		"stranded", s.Stranded, "requeued", s.Requeued, "lap_done", s.LapDone)
	h.capacity(log, s)
	return s, nil
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
