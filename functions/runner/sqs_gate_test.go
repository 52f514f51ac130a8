package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A record of a batch that finds no room at the publish gate, in an invocation without the time
// to wait for room (30 s left, its requests may take twice 20 s), is handed back to come again
// a second later, and its row is held off the next claim for that second: the message must not
// be made visible again at once (a visibility of 0 s), or it comes back before its row can be
// claimed, finds it busy, and each such return is one more receive counted towards the queue's
// maxReceiveCount. The runner runs on the wall clock here, as in Lambda.
func TestARecordWithoutRoomAtTheGateIsNotVisibleAgainAtOnce(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	release := make(chan struct{})
	var letGo sync.Once
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		<-release
		return githubtest.Behavior{}
	}
	w := newCommitWorld(t, gh)
	t.Cleanup(func() { letGo.Do(func() { close(release) }) })
	w.clock.Set(time.Now())
	msgs := w.admitPushes(nil, "acme/app", 3)
	r := w.runner("a", nil, 20*time.Second)
	r.Now = time.Now
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Concurrency = 2 // one request at a time to one repository
		}
		return rt, err
	}
	batch := sqsBatch(msgs)
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	handled := make(chan events.SQSEventResponse, 1)
	go func() {
		out, _ := h.Handle(ctx, batch)
		handled <- out
	}()
	// The post held, the two records behind it find no room and are handed back.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		vis.mu.Lock()
		n := len(vis.got)
		vis.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records handed back while one post is held, want 2", n)
		}
	}
	letGo.Do(func() { close(release) })
	out := <-handled
	if len(out.BatchItemFailures) != 2 {
		t.Fatalf("%d records came back, want the two that found no room", len(out.BatchItemFailures))
	}
	vis.mu.Lock()
	defer vis.mu.Unlock()
	for _, v := range vis.got {
		if v.VisibilityTimeout < 1 {
			var m int
			fmt.Sscanf(aws.ToString(v.ReceiptHandle), "rh%d", &m)
			row := w.row(msgs[m])
			t.Errorf("record %s handed back visible again after %d s: its row is held off until %v from now (state %v)",
				aws.ToString(v.ReceiptHandle), v.VisibilityTimeout, row.NotBefore.Sub(w.clock.Now()).Round(time.Millisecond), row.State)
		}
	}
}

// A batch of ten records for one repository, to a provider that answers at once, is published
// within its invocation: the records beyond the repository's share of the gate (two of four)
// wait for room rather than go back to the queue, where each return would be one more receive
// towards maxReceiveCount. Handed back, eight of ten came back from every such batch.
func TestABatchForOneRepositoryIsPublishedWithoutHandBacks(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	w.clock.Set(time.Now())
	msgs := w.admitPushes(nil, "acme/app", 10)
	r := w.runner("a", nil, 5*time.Second)
	r.Now = time.Now
	batch := sqsBatch(msgs)
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := h.Handle(ctx, batch)
	if err != nil || len(out.BatchItemFailures) != 0 || len(vis.got) != 0 {
		t.Fatalf("%d records came back (%d hand-backs), err %v: want the whole batch published", len(out.BatchItemFailures), len(vis.got), err)
	}
	if gh.Posts() != len(msgs) {
		t.Fatalf("%d posts for %d verdicts", gh.Posts(), len(msgs))
	}
}

// lostLeases is a ledger that refuses to renew the leases of the keys in lost, as when
// another runner took the row over.
type lostLeases struct {
	ledger.Ledger
	mu   sync.Mutex
	lost map[ledger.Key]bool
}

func (l *lostLeases) lose(k ledger.Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost[k] = true
}

func (l *lostLeases) Renew(ctx context.Context, ls ledger.Lease, d time.Duration) (ledger.Lease, error) {
	l.mu.Lock()
	lost := l.lost[ls.Key]
	l.mu.Unlock()
	if lost {
		return ledger.Lease{}, fmt.Errorf("renew: %w", ledger.ErrLeaseLost)
	}
	return l.Ledger.Renew(ctx, ls, d)
}

// A record waiting for room at the publish gate stops waiting when its lease is lost: its row
// is another runner's now, and waiting on would take room later to post under a lease that is
// no longer held. It goes back to the queue at once, while the requests that hold the room are
// still in flight. Waiting on the invocation instead, it waited minutes, as long as the
// invocation had time for its requests.
func TestARecordWaitingForRoomStopsWhenItsLeaseIsLost(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	w := newCommitWorld(t, gh)
	posts := holdRepository(t, gh, "acme/app")
	msgs := w.admitPushes(nil, "acme/app", 3)
	ll := &lostLeases{Ledger: w.l, lost: map[ledger.Key]bool{}}
	r := w.runner("a", ll, 2*time.Minute) // the held requests hold the room for minutes
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Concurrency = 4 // two requests at a time to one repository
		}
		return rt, err
	}
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // time to wait for room
	defer cancel()
	go h.Handle(ctx, sqsBatch(msgs))
	waitFor(t, "two posts held", func() bool { return posts.Held() == 2 })
	time.Sleep(50 * time.Millisecond) // the third record is waiting for room by now
	waiting := -1
	for i := range msgs {
		if !posts.HeldSHA(fmt.Sprintf("%040x", i+1)) { // admitPushes gives push i the commit i+1
			waiting = i
		}
	}
	ll.lose(msgs[waiting].Key)
	waitFor(t, "the waiting record handed back", func() bool {
		vis.mu.Lock()
		defer vis.mu.Unlock()
		return len(vis.got) >= 1
	})
	if n := posts.Held(); n != 2 {
		t.Fatalf("%d posts held when the waiting record went back, want the two still in flight", n)
	}
	posts.Release()
}
