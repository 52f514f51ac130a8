package runner_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// amiss serve: a delivery that finds its repository's room at the publish gate taken waits for
// the slot, woken when the request holding it ends, instead of being handed back and claimed
// again a second later. One request at a time to the repository (concurrency 2); the first
// delivery's POST is held until the second has found no room. The runner's and the ledger's
// clock stand still, so a second delivery handed back would never come again: it is published
// because it waited for the slot.
func TestServeKeepsADeliveryWithoutRoomWaitingForTheSlot(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	held := holdRepository(t, gh, "acme/app")
	w := newCommitWorld(t, gh)
	q := queue.NewLocalOn(w.clock)
	msgs := w.admitPushes(nil, "acme/app", 2)
	r := w.runner("serve", nil, 10*time.Second)
	m := &counter{}
	r.Metrics = m
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Concurrency = 2 // one request at a time to one repository
		}
		return rt, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { (&runner.Local{Runner: r, Queue: q}).Run(ctx, 2); close(stopped) }()
	t.Cleanup(func() { held.Release(); cancel(); q.Close(); <-stopped })
	q.Send(ctx, msgs[0])
	waitFor(t, "the first delivery's POST held", func() bool { return held.Held() == 1 })
	q.Send(ctx, msgs[1])
	waitFor(t, "the second delivery finding no room (handed back, or waiting)", func() bool {
		row := w.row(msgs[1])
		return row.State == ledger.StateSaved && (row.Owner == "" || m.get("publish_gate_waits") == 1)
	})
	held.Release()
	waitFor(t, "the second delivery published once the slot was freed, the clocks still", func() bool {
		return w.row(msgs[1]).State == ledger.StateDone
	})
	if most := held.Most(); most != 1 {
		t.Fatalf("%d requests to the repository in flight at once, the route allows 1", most)
	}
	if n := m.get("publish_gate_waits"); n != 1 {
		t.Fatalf("%d waits for room counted, want the second delivery's", n)
	}
}

// With the default gate (four requests to the API, two to one repository) and amiss serve's
// four workers, a repository whose POSTs hang holds two workers posting; deliveries of it that
// find no room may wait for a slot only while the requests holding it are young: once they
// have been held a second, the provider is slow, and the waiting workers go back to work, so
// every delivery of another repository is published while the hanging ones are still held.
func TestWorkersStopWaitingForAHangingRepositorysSlot(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	slowPosts := holdRepository(t, gh, "acme/slow")
	w := newCommitWorld(t, gh)
	q := queue.NewLocalOn(w.clock)
	slow := w.admitPushes(q, "acme/slow", 6)
	r := w.runner("serve", nil, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the clocks keep time, as a server's do
		for tick := time.NewTicker(10 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			w.clock.Advance(10 * time.Millisecond)
		}
	}()
	stopped := make(chan struct{})
	go func() { (&runner.Local{Runner: r, Queue: q}).Run(ctx, 4); close(stopped) }()
	t.Cleanup(func() { slowPosts.Release(); cancel(); q.Close(); <-stopped })
	waitFor(t, "two POSTs of the hanging repository held", func() bool { return slowPosts.Held() == 2 })
	fast := w.admitPushes(q, "acme/fast", 4)
	waitFor(t, "every delivery of another repository published while the hanging ones are held", func() bool {
		for _, m := range fast {
			if w.row(m).State != ledger.StateDone {
				return false
			}
		}
		return true
	})
	if held := slowPosts.Held(); held != 2 {
		t.Fatalf("%d POSTs of the hanging repository in flight, want 2", held)
	}
	slowPosts.Release()
	waitFor(t, "the hanging repository's deliveries published once it answered", func() bool {
		for _, m := range slow {
			if w.row(m).State != ledger.StateDone {
				return false
			}
		}
		return true
	})
	if most := slowPosts.Most(); most != 2 {
		t.Fatalf("%d POSTs of one repository in flight at once, the gate allows 2", most)
	}
}

// With the default gate (four requests to one API) and amiss serve's four workers, an API
// whose POSTs hang (two repositories' worth of them) holds at most all but one of the workers,
// so a delivery to another API is published while they are held. The API's four requests
// took every worker, and the other API's delivery waited until they answered.
func TestADeliveryToAnotherAPIIsPublishedWhileOneAPIHangs(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	var mu sync.Mutex
	held, release := 0, make(chan struct{})
	var letGo sync.Once
	gh.Post = func(int, githubtest.Created) githubtest.Behavior {
		mu.Lock()
		held++
		mu.Unlock()
		<-release
		mu.Lock()
		held--
		mu.Unlock()
		return githubtest.Behavior{}
	}
	heldNow := func() int { mu.Lock(); defer mu.Unlock(); return held }
	w := newCommitWorld(t, gh)
	other := githubtest.New(githubtest.Token(ghToken))
	otherSrv := httptest.NewServer(other)
	t.Cleanup(otherSrv.Close)
	q := queue.NewLocalOn(w.clock)
	r := w.runner("serve", nil, 30*time.Second)
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil && name == "other" {
			rt.Publisher = publish.NewGitHub(otherSrv.URL, ghToken, otherSrv.Client())
			rt.Destination = "github " + otherSrv.URL
		}
		return rt, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the clocks keep time, as a server's do
		for tick := time.NewTicker(10 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			w.clock.Advance(10 * time.Millisecond)
		}
	}()
	stopped := make(chan struct{})
	go func() { (&runner.Local{Runner: r, Queue: q}).Run(ctx, 4); close(stopped) }()
	t.Cleanup(func() { letGo.Do(func() { close(release) }); cancel(); q.Close(); <-stopped })
	w.admitPushes(q, "acme/slow", 3)
	w.admitPushes(q, "acme/slower", 3)
	waitFor(t, "the hanging API's POSTs held", func() bool { return heldNow() >= 3 })

	s, _ := json.Marshal(change.Change{Provider: "github", Repository: "acme/app", SHA: headSHA, Event: change.Push})
	body := []byte("a push to another API")
	d := ledger.Delivery{Binding: ledger.Binding{Route: "other", Scheme: "github-sha256", Identity: string(body),
		BodyDigest: ledger.SumBody(body)}, Change: s}
	if _, err := w.l.Admit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m := queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
	q.Send(ctx, m)
	waitFor(t, "the other API's delivery published while the hanging API's POSTs are held", func() bool {
		return w.row(m).State == ledger.StateDone
	})
	if n := heldNow(); n < 3 {
		t.Fatalf("%d POSTs of the hanging API in flight: the premise ended", n)
	}
}
