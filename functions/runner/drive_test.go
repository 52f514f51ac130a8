package runner_test

import (
	"context"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
)

// shutDown processes the world's message n times, each cut by a shutdown (its context
// cancelled) 50 ms in, the clock moved a minute after each (past a lease not handed back).
func shutDown(w *world, r *runner.Runner, n int) {
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		r.Process(ctx, w.msg)
		w.clock.Advance(time.Minute)
	}
}

// untilDone processes the world's message until it is done, at most n times, the clock moved
// a minute after each.
func untilDone(w *world, r *runner.Runner, n int) {
	for range n {
		if res, _ := r.Process(context.Background(), w.msg); res.Done {
			return
		}
		w.clock.Advance(time.Minute)
	}
}

// slowAtFirst is an evaluator that runs until its context ends for its first n calls (slow
// evaluations a shutdown cuts) and answers success after; *calls counts the calls.
func slowAtFirst(n int, calls *int) evaluate.Evaluator {
	return evalFunc(func(ctx context.Context, _ subject.Subject) (evaluate.Verdict, error) {
		*calls++
		if *calls <= n {
			<-ctx.Done()
			return evaluate.Verdict{}, ctx.Err()
		}
		return evaluate.Verdict{State: evaluate.Success, Description: "all rules hold"}, nil
	})
}

// followRetries processes the world's message until it is done, at most n times, moving the
// clock to each result's retry time (a minute on when that is not later); it reports the
// claims made.
func followRetries(w *world, r *runner.Runner, n int) int {
	for i := 1; i <= n; i++ {
		res, _ := r.Process(context.Background(), w.msg)
		if res.Done {
			return i
		}
		if res.RetryAt.After(w.clock.Now()) {
			w.clock.Set(res.RetryAt)
		} else {
			w.clock.Advance(time.Minute)
		}
	}
	return n
}
