package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// A grant taken over by a host whose clock is ahead. Runner a posts the older verdict and is
// killed with the POST in flight; the provider applies it as late as the route's settle time
// allows after a gave up. Runner b, on a host whose clock is ahead of a's, takes the grant over
// as soon as its clock says the grant ended, posts the newer verdict, and confirms it by
// reading back once its clock says a's post has settled. Within the skew the hold's margin
// covers, the late post lands before that read-back, which finds it and posts the newer verdict
// again: the newer verdict stands last.

// holdFailures has gh hold every POST of a failing status in flight, created when release is
// called; entered is closed when the first one arrives. Call it once the world's server runs:
// the test's cleanup lets the held requests go before the server closes.
func holdFailures(t *testing.T, gh *githubtest.GitHub) (entered <-chan struct{}, release func()) {
	arrived, land := make(chan struct{}), make(chan struct{})
	var once, letGo sync.Once
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		if s.State == "failure" {
			once.Do(func() { close(arrived) })
			<-land // held in flight; created when let go
		}
		return githubtest.Behavior{}
	}
	release = func() { letGo.Do(func() { close(land) }) }
	t.Cleanup(release)
	return arrived, release
}

// skewedClock reads base ahead by by.
type skewedClock struct {
	base *ledger.ManualClock
	by   time.Duration
}

func (c skewedClock) Now() time.Time { return c.base.Now().Add(c.by) }

// takeOverWithSkew plays the scenario with b's clock skew ahead of a's, and answers whether the
// newer verdict's status is the last one created.
func takeOverWithSkew(t *testing.T, skew time.Duration) bool {
	const timeout = 5 * time.Second
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	entered, release := holdFailures(t, gh)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	granted := w.clock.Now() // a's grant, by a's clock (which does not move while a posts)
	dying := &killable{Ledger: w.l}
	a := w.runner("a", dying, timeout)
	done := make(chan struct{})
	go func() { a.Process(context.Background(), opened); close(done) }()
	<-entered
	// a is killed a second before it would have given up on the POST by itself (its requests
	// end 2 timeouts and a third of the hold's margin after the grant); the provider may apply
	// the POST until the settle time after that.
	killed := granted.Add(2*timeout + 10*time.Second/3 - time.Second)
	w.clock.Set(killed)
	dying.kill()
	lands := killed.Add(time.Minute)
	grantEnd := granted.Add(2*timeout + 10*time.Second)
	lb, err := localfs.Open(context.Background(), w.root, localfs.Config{Limits: ledger.DefaultLimits(), Clock: skewedClock{w.clock, skew}, FS: unsyncedFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	b := w.runner("b", lb, timeout)
	w.clock.Set(grantEnd.Add(-skew)) // b's clock says a's grant has ended
	if res, err := b.Process(context.Background(), edited); err != nil || res.Done {
		t.Fatalf("the newer verdict, posted while the dead runner's post could still land, was done: %+v %v", res, err)
	}
	landed := false
	land1 := func() {
		w.clock.Set(lands)
		release()
		<-done
		for len(gh.Created(commitRepo, headSHA)) < 2 { // the held POST is created once let go
			time.Sleep(time.Millisecond)
		}
		landed = true
	}
	confirm := grantEnd.Add(time.Minute - skew) // b's clock says a's post has settled
	if lands.Before(confirm) {
		land1()
	}
	w.clock.Set(confirm)
	w.process(b, edited)
	if !landed {
		land1()
	}
	w.process(b, opened)
	if r := w.row(opened); r.State != ledger.StateSuperseded {
		t.Fatalf("older delivery: %v", r.State)
	}
	got, _ := gh.Latest(commitRepo, headSHA, statusCtx)
	return got.State == "success"
}

func TestAHostAheadWithinTheHoldMarginTakingOverAGrantKeepsTheNewestStanding(t *testing.T) {
	if !takeOverWithSkew(t, 5*time.Second) {
		t.Fatal("the dead runner's late post of the older verdict stands over the newer one")
	}
}
