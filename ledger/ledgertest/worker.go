package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Worker drives deliveries the way a runner would (admit, claim, evaluate and save, publish,
// complete), for backends' concurrency tests across goroutines or processes.
type Worker struct {
	Ledger ledger.Ledger
	Owner  string
	Lease  time.Duration
	// Tolerate says which errors are transient for the test: the round is given up and the
	// delivery retried later. A lost lease is always tolerated.
	Tolerate func(error) bool
	// Report makes the verdict saved for delivery i under a fence.
	Report func(i int, fence uint64) []byte
	// OnSaved and OnPublish record what the worker saved and what it "published".
	OnSaved   func(i int, fence uint64, report []byte)
	OnPublish func(i int, report []byte)
	// Pause, when set, is called where a runner would evaluate and wait for the provider.
	Pause func(evaluating bool)
}

func (w *Worker) tolerated(err error) bool {
	return errors.Is(err, ledger.ErrLeaseLost) || (w.Tolerate != nil && w.Tolerate(err))
}

// Step runs one round for delivery i; done reports that its row answered Duplicate.
func (w *Worker) Step(ctx context.Context, i int, d ledger.Delivery) (done bool, err error) {
	if _, err := w.Ledger.Admit(ctx, d); err != nil {
		if w.tolerated(err) {
			return false, nil
		}
		return false, fmt.Errorf("admit %d: %w", i, err)
	}
	c, err := w.Ledger.Claim(ctx, d.Key(), d.Binding.Digest(), w.Owner, w.Lease)
	if err != nil {
		if w.tolerated(err) {
			return false, nil
		}
		return false, fmt.Errorf("claim %d: %w", i, err)
	}
	var staged ledger.Staged
	switch c.Outcome {
	case ledger.ClaimDuplicate:
		return true, nil
	case ledger.Busy:
		return false, nil
	case ledger.Execute:
		if w.Pause != nil {
			w.Pause(true)
		}
		report := w.Report(i, c.Lease.Fence)
		s, err := w.Ledger.Save(ctx, *c.Lease, report)
		if err != nil {
			if w.tolerated(err) {
				return false, nil
			}
			return false, fmt.Errorf("save %d: %w", i, err)
		}
		if w.OnSaved != nil {
			w.OnSaved(i, s.Lease.Fence, report)
		}
		staged = s
	case ledger.Publish:
		staged = *c.Staged
	default:
		return false, fmt.Errorf("claim %d: %v", i, c.Outcome)
	}
	if w.OnPublish != nil {
		w.OnPublish(i, staged.Report)
	}
	if w.Pause != nil {
		w.Pause(false)
	}
	// A Complete that fails leaves the row saved: the next claim answers Publish with the same
	// verdict.
	if err := w.Ledger.Complete(ctx, staged); err != nil && !w.tolerated(err) {
		return false, fmt.Errorf("complete %d: %w", i, err)
	}
	return false, nil
}

// Run goes over the deliveries in random order, round after round, until every one answers
// Duplicate, or fails when the deadline passes first.
func (w *Worker) Run(ctx context.Context, ds []ledger.Delivery, deadline time.Duration) error {
	left := map[int]bool{}
	for i := range ds {
		left[i] = true
	}
	until := time.Now().Add(deadline)
	for len(left) > 0 {
		if time.Now().After(until) {
			return fmt.Errorf("%s: %d deliveries left at the deadline", w.Owner, len(left))
		}
		for _, i := range rand.Perm(len(ds)) {
			if !left[i] {
				continue
			}
			done, err := w.Step(ctx, i, ds[i])
			if err != nil {
				return err
			}
			if done {
				delete(left, i)
			}
		}
	}
	return nil
}
