package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// slowBuildWithADuplicate makes r's next route build take 60 s by the ledger's clock, twice
// the 30 s lease, in steps a renewal (every 5 ms) can follow, and then has a duplicate
// message's runner claim the row. It returns what that claim got, once the build has run.
func slowBuildWithADuplicate(w *world, r *runner.Runner) func() (ledger.Claim, error) {
	build := r.Routes
	var once sync.Once
	var other ledger.Claim
	otherErr := errors.New("the route was never built")
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		once.Do(func() {
			for range 3 {
				w.clock.Advance(20 * time.Second)
				time.Sleep(50 * time.Millisecond)
			}
			other, otherErr = w.l.Claim(ctx, w.msg.Key, w.msg.Binding, "b", time.Minute)
		})
		return build(ctx, name)
	}
	return func() (ledger.Claim, error) { return other, otherErr }
}

// TestALongRouteBuildKeepsItsLease: building the route (a secret read) may take longer than
// the lease, up to two margins before the invocation's deadline. The lease is renewed while
// the route is built, so a duplicate message's claim meanwhile is answered Busy, and the
// first runner's verdict is saved and published once. Before, nothing renewed it until the
// evaluation began: the duplicate claimed the row, and the first runner's attempt was lost.
func TestALongRouteBuildKeepsItsLease(t *testing.T) {
	w := newWorld(t)
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	duplicate := slowBuildWithADuplicate(w, r)
	res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg)
	if other, otherErr := duplicate(); otherErr != nil || other.Outcome != ledger.Busy {
		t.Fatalf("a duplicate's claim while the route was built: %v %v, want Busy: the lease ran out under the build",
			other.Outcome, otherErr)
	}
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if got := w.pub.all(); len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v, want one success", got)
	}
}

// TestALongRouteBuildKeepsThePublishingLease: the same for a saved verdict whose publication
// is retried: the lease is renewed while the route is built, so a duplicate message's claim
// is answered Busy and the verdict is published once.
func TestALongRouteBuildKeepsThePublishingLease(t *testing.T) {
	w := newWorld(t)
	w.pub.fail = []error{outage(503)}
	r := w.runner("a", verdict(evaluate.Success, "all rules hold"))
	if res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg); err != nil || res.Done {
		t.Fatalf("first attempt (the provider answers 503): %+v %v", res, err)
	}
	if len(w.pub.all()) != 0 {
		t.Fatal("published although the provider failed")
	}
	w.clock.Advance(time.Hour) // past the publication's retry time
	duplicate := slowBuildWithADuplicate(w, r)
	res, err := r.Process(runner.FirstOfInvocation(context.Background()), w.msg)
	if other, otherErr := duplicate(); otherErr != nil || other.Outcome != ledger.Busy {
		t.Fatalf("a duplicate's claim while the publishing route was built: %v %v, want Busy", other.Outcome, otherErr)
	}
	if err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	if got := w.pub.all(); len(got) != 1 || got[0].State != evaluate.Success {
		t.Fatalf("published %+v, want one success", got)
	}
}
