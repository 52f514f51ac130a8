package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A runner paused between its grant and its POST (a stopped process, a long GC) past its row's
// lease and its grant wakes up after the next runner published the newer verdict: it must send
// nothing. Its requests are bounded by a deadline it took before it asked for the grant, on its
// own clock, that ends before the grant does; and by its row's lease.

// pausingPublisher pauses the first post of the older verdict until its context is done and
// the test lets it go, then posts through the real publisher. It notes whether the post's
// context had a deadline within hold of the moment the post began (the grant, asked for before
// it, lasts hold from the ledger's decision).
type pausingPublisher struct {
	publish.Publisher
	hold           time.Duration
	paused, resume chan struct{}
	once           sync.Once
	bounded        bool
}

func (p *pausingPublisher) Publish(ctx context.Context, s publish.Status) error {
	pause := false
	if s.State == "failure" {
		p.once.Do(func() { pause = true })
	}
	if pause {
		dl, ok := ctx.Deadline()
		p.bounded = ok && !dl.After(time.Now().Add(p.hold))
		close(p.paused)
		<-ctx.Done() // the whole of the pause the deadline allows, and more
		<-p.resume
	}
	return p.Publisher.Publish(ctx, s)
}

func TestARunnerPausedPastItsGrantSendsNothing(t *testing.T) {
	const timeout = 50 * time.Millisecond
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	a := w.runner("a", nil, timeout)
	p := &pausingPublisher{hold: 2*timeout + 10*time.Second, paused: make(chan struct{}), resume: make(chan struct{})}
	routes := a.Routes
	a.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			p.Publisher = rt.Publisher
			rt.Publisher = p
		}
		return rt, err
	}
	var resumed sync.Once
	t.Cleanup(func() { resumed.Do(func() { close(p.resume) }) })
	done := make(chan struct{})
	go func() { a.Process(context.Background(), opened); close(done) }()
	<-p.paused
	if !p.bounded {
		t.Fatal("the post under the grant has no deadline within the grant")
	}
	// While a is paused: past its row's lease and its grant, the next runner publishes the
	// newer verdict, which stands once a's post, counted as unknown, has settled.
	w.clock.Advance(time.Hour)
	w.process(w.runner("b", nil, timeout), edited)
	w.standing("success", 1)
	resumed.Do(func() { close(p.resume) })
	<-done
	if gh.Posts() != 1 {
		t.Fatalf("the paused runner posted after its grant: %d POSTs, %+v", gh.Posts(), gh.Created(commitRepo, headSHA))
	}
	w.process(w.runner("b", nil, timeout), opened)
	w.standing("success", 1)
	if r := w.row(opened); r.State != ledger.StateSuperseded {
		t.Fatalf("older delivery: %v", r.State)
	}
}
