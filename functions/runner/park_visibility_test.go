package runner_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// slowPark is the waiting runner's ledger handle: its park takes a second at the ledger
// (the ledger's clock moves on meanwhile, as it does while a loaded ledger syncs), and the
// holder's report, with its wake, lands just after the park was recorded and before the
// waiting runner hears its answer (reported waits for both).
type slowPark struct {
	ledger.Ledger
	clock    *ledger.ManualClock
	reported func()
}

func (l slowPark) AcquireSubject(ctx context.Context, q ledger.SubjectRequest) (ledger.SubjectGrant, error) {
	if q.Wake == "" {
		return l.Ledger.AcquireSubject(ctx, q)
	}
	l.clock.Advance(time.Second)
	g, err := l.Ledger.AcquireSubject(ctx, q)
	l.reported()
	return g, err
}

// A wake that lands while the waiting runner is still finishing its park is kept: the
// waiter's message stays visible, however the park's answer is reckoned against the
// visibility the runner set before parking. The parking runner changed the visibility again
// after its park whenever the park's answer, reckoned on its own clock, came a little earlier
// than the wait it was first told (a park slower at the ledger than the claim), and so set
// the woken message aside again until the grant's end.
func TestAWakeLandingAsTheParkIsAnsweredIsKept(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	entered, release := refuseAfterHolding(t, gh, "failure")
	w := newCommitWorld(t, gh)
	sq := newSQSQueue(w.clock.Now)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))

	holder := &runner.SQSHandler{Runner: w.runner("holder", w.open(), 5*time.Second), SQS: sq, QueueURL: "https://sqs.example/q"}
	sq.send(opened)
	first := sq.receive(10)
	var held sync.WaitGroup
	held.Add(1)
	go func() {
		defer held.Done()
		out, _ := holder.Handle(context.Background(), first)
		sq.done(first, out)
	}()
	t.Cleanup(func() { release(); held.Wait() })
	<-entered

	id := sq.send(edited)
	woken := func() bool { return sq.visible(id) }
	waiter := &runner.SQSHandler{SQS: sq, QueueURL: "https://sqs.example/q", Runner: w.runner("waiter", slowPark{
		Ledger: w.open(), clock: w.clock,
		reported: func() {
			release() // the older verdict's POSTs are refused, and its runner reports
			waitFor(t, "the holder's report to wake the parked message", woken)
		},
	}, 5*time.Second)}
	second := sq.receive(10)
	out, _ := waiter.Handle(context.Background(), second)
	sq.done(second, out)
	held.Wait()

	if !woken() {
		t.Fatalf("the waiting verdict's message, woken by the holder's report, was set aside again until %v (now %v)",
			sq.visibleAt(id), w.clock.Now())
	}
	w.clock.Advance(time.Second) // the waiter's row is free at once; the clock moves only for the next receive's sake
	sq.pollers(t, 1, func(int) *runner.Runner { return w.runner("next", w.open(), 5*time.Second) })
	waitFor(t, "the newer verdict standing at the report, the clock still", w.standsNow(edited))
}

// A receipt handle as long as SQS makes one (1,024 characters) is kept as the waiter's wake:
// the record names the waiting verdict, and the holder's report wakes it. A wake is the
// handle with a prefix naming its queue, and the record refused one of more than 1,024 bytes,
// so the longest handles were never parked and waited out the whole grant.
func TestTheLongestReceiptHandleIsParked(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	entered, release := refuseAfterHolding(t, gh, "failure")
	w := newCommitWorld(t, gh)
	sq := newSQSQueue(w.clock.Now)
	sq.handleLen = 1024
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))

	holder := &runner.SQSHandler{Runner: w.runner("holder", w.open(), 5*time.Second), SQS: sq, QueueURL: "https://sqs.example/q"}
	sq.send(opened)
	first := sq.receive(10)
	var held sync.WaitGroup
	held.Add(1)
	go func() {
		defer held.Done()
		out, _ := holder.Handle(context.Background(), first)
		sq.done(first, out)
	}()
	t.Cleanup(func() { release(); held.Wait() })
	<-entered

	id := sq.send(edited)
	waiter := &runner.SQSHandler{Runner: w.runner("waiter", w.open(), 5*time.Second), SQS: sq, QueueURL: "https://sqs.example/q"}
	second := sq.receive(10)
	if n := len(second.Records[0].ReceiptHandle); n != 1024 {
		t.Fatalf("a receipt handle of %d characters", n)
	}
	out, _ := waiter.Handle(context.Background(), second)
	sq.done(second, out)
	rec, err := w.l.InspectSubject(context.Background(), ledger.Subject{Publisher: "github " + w.srv.URL,
		Repository: commitRepo, SHA: headSHA, Context: statusCtx}.Key())
	if err != nil || rec.Waiter.Key != edited.Key || !strings.HasSuffix(rec.WaiterWake, second.Records[0].ReceiptHandle) {
		t.Fatalf("waiter %s with a wake of %d bytes (err %v): want the waiting verdict parked with its receipt handle",
			rec.Waiter.Key.Short(), len(rec.WaiterWake), err)
	}
	release()
	held.Wait()
	if !sq.visible(id) {
		t.Fatal("the holder's report did not wake the parked message")
	}
}
