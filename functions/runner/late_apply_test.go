package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
)

// A status API that applies POSTs only after the runner gave up on them, in the worst order:
// the newer verdict's first, then the older one's over it. Neither verdict may be called
// standing until both have settled; then the newer one, read back, is found covered and posted
// again, and the older one is superseded.
func TestPostsAppliedAfterTheClientGaveUpInTheWorstOrderLeaveTheNewestStanding(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	held := map[string]chan struct{}{"failure": make(chan struct{}), "success": make(chan struct{})}
	var mu sync.Mutex
	first := map[string]bool{}
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		mu.Lock()
		hold := !first[s.State]
		first[s.State] = true
		mu.Unlock()
		if hold {
			<-held[s.State] // applied once let go, long after the client gave up
		}
		return githubtest.Behavior{}
	}
	w := newCommitWorld(t, gh)
	var letGo sync.Once
	t.Cleanup(func() { letGo.Do(func() { close(held["failure"]); close(held["success"]) }) })
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	r := w.runner("a", nil, 100*time.Millisecond)
	var retry time.Time
	for _, m := range []queue.Message{opened, edited} {
		res, _ := r.Process(context.Background(), m)
		if res.Done {
			t.Fatalf("delivery %s was done although its POST's outcome is unknown", m.Key.Short())
		}
		retry = res.RetryAt
	}
	land := func(state string, n int) {
		close(held[state])
		waitFor(t, fmt.Sprintf("the held %s post to land (%d statuses)", state, n), func() bool {
			return len(gh.Created(commitRepo, headSHA)) >= n
		})
	}
	letGo.Do(func() {
		land("success", 1) // the newer verdict's post lands first,
		land("failure", 2) // the older one's over it
	})
	if retry.After(w.clock.Now()) {
		w.clock.Set(retry)
	}
	w.process(r, edited)
	w.process(r, opened)
	w.standing("success", 3)
	if gh.Posts() != 3 {
		t.Fatalf("%d POSTs: the newer verdict was not read back before it was posted again", gh.Posts())
	}
	w.wantSuperseded(opened, edited)
}
