package runner_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// Hand-over at the report. The older verdict's POST is in flight when the newer verdict asks
// to post and is told to wait for that grant; then the provider refuses the older POST (503,
// three times) and its runner reports it. The ledger's clock stands still throughout, so the
// grant the newer verdict was told to wait for never ends by itself: the newer verdict stands
// only because the older one's report hands the subject over.

// refuseAfterHolding holds the first POST of state in flight until released, then answers
// every POST of that state 503; other states are created at once.
func refuseAfterHolding(t *testing.T, gh *githubtest.GitHub, state string) (entered <-chan struct{}, release func()) {
	arrived, land := make(chan struct{}), make(chan struct{})
	var once, letGo sync.Once
	gh.Post = func(_ int, s githubtest.Created) githubtest.Behavior {
		if s.State != state {
			return githubtest.Behavior{}
		}
		once.Do(func() { close(arrived) })
		<-land
		return githubtest.Behavior{Code: http.StatusServiceUnavailable}
	}
	release = func() { letGo.Do(func() { close(land) }) }
	t.Cleanup(release)
	return arrived, release
}

// waitedAndSetAside is the premise of the hand-over: the newer verdict was recorded and told
// to wait (its row saved and handed back) while the older one holds the grant.
func (w *commitWorld) waitedAndSetAside(older, newer queue.Message) func() bool {
	return func() bool {
		rec, err := w.l.InspectSubject(context.Background(), ledger.Subject{Publisher: "github " + w.srv.URL,
			Repository: commitRepo, SHA: headSHA, Context: statusCtx}.Key())
		row := w.row(newer)
		return err == nil && rec.Newest.Key == newer.Key && rec.Holder.Key == older.Key && row.State == ledger.StateSaved && row.Owner == ""
	}
}

// standsNow is the outcome: the newer verdict's status stands and its row is done.
func (w *commitWorld) standsNow(newer queue.Message) func() bool {
	return func() bool {
		got, ok := w.gh.Latest(commitRepo, headSHA, statusCtx)
		return ok && got.State == "success" && w.row(newer).State == ledger.StateDone
	}
}

func TestServeHandsTheSubjectOverAtTheOlderVerdictsReport(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	entered, release := refuseAfterHolding(t, gh, "failure")
	w := newCommitWorld(t, gh)
	q := queue.NewLocalOn(w.clock)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	r := w.runner("serve", nil, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	// amiss serve's four workers: the older verdict's POST holds one, and leaves room at the
	// API for the newer verdict's (two workers would allow one request in flight to the API).
	go func() { (&runner.Local{Runner: r, Queue: q}).Run(ctx, 4); close(stopped) }()
	t.Cleanup(func() { release(); cancel(); q.Close(); <-stopped })
	q.Send(ctx, opened)
	<-entered
	q.Send(ctx, edited)
	waitFor(t, "the newer verdict told to wait and set aside", w.waitedAndSetAside(opened, edited))
	release()
	waitFor(t, "the newer verdict standing once the older one's POSTs were refused, the clock still", w.standsNow(edited))
	if n := len(gh.Created(commitRepo, headSHA)); n != 1 {
		t.Fatalf("%d statuses created, want the newer verdict's alone", n)
	}
}

// The same with the Lambda runner: three runners (processes of their own, each on its own
// ledger handle) take batches from one queue. The newer verdict's message is parked on the
// subject with its receipt handle, and the runner that reports the older verdict's refusal
// makes it visible again at once.
func TestLambdaHandsTheSubjectOverAtTheOlderVerdictsReport(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	entered, release := refuseAfterHolding(t, gh, "failure")
	w := newCommitWorld(t, gh)
	sq := newSQSQueue(w.clock.Now)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	t.Cleanup(release)
	sq.pollers(t, 3, func(i int) *runner.Runner { return w.runner(string(rune('a'+i)), w.open(), 5*time.Second) })
	sq.send(opened)
	<-entered
	id := sq.send(edited)
	waitFor(t, "the newer verdict told to wait and set aside", w.waitedAndSetAside(opened, edited))
	release()
	waitFor(t, "the newer verdict standing once the older one's POSTs were refused, the clock still", w.standsNow(edited))
	if n := len(gh.Created(commitRepo, headSHA)); n != 1 {
		t.Fatalf("%d statuses created, want the newer verdict's alone", n)
	}
	if n := sq.receives(id); n != 2 {
		t.Fatalf("the newer verdict's message was received %d times, want twice (told to wait, then woken)", n)
	}
}

// parksAfterReports is a ledger handle whose parks land only after a report did: the holder's
// report, and so its wake, comes before the waiter is parked.
type parksAfterReports struct {
	ledger.Ledger
	reported chan struct{}
	once     *sync.Once
}

func (l parksAfterReports) AcquireSubject(ctx context.Context, q ledger.SubjectRequest) (ledger.SubjectGrant, error) {
	if q.Wake != "" {
		<-l.reported
	}
	return l.Ledger.AcquireSubject(ctx, q)
}

func (l parksAfterReports) ReportSubject(ctx context.Context, g ledger.SubjectGrant, o ledger.PostOutcome) (ledger.SubjectGrant, error) {
	a, err := l.Ledger.ReportSubject(ctx, g, o)
	l.once.Do(func() { close(l.reported) })
	return a, err
}

// The older verdict's report lands after the newer verdict was set aside and before it is
// parked: no wake can name it, and the park, finding the grant over, brings it back at once.
func TestAReportLandingBeforeThePark(t *testing.T) {
	gh := githubtest.New(githubtest.Token(ghToken))
	entered, release := refuseAfterHolding(t, gh, "failure")
	w := newCommitWorld(t, gh)
	sq := newSQSQueue(w.clock.Now)
	opened := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
	edited := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
	t.Cleanup(release)
	reported, once := make(chan struct{}), &sync.Once{}
	t.Cleanup(func() { once.Do(func() { close(reported) }) })
	sq.pollers(t, 3, func(i int) *runner.Runner {
		return w.runner(string(rune('a'+i)), parksAfterReports{Ledger: w.open(), reported: reported, once: once}, 5*time.Second)
	})
	sq.send(opened)
	<-entered
	id := sq.send(edited)
	waitFor(t, "the newer verdict told to wait and set aside", w.waitedAndSetAside(opened, edited))
	release()
	waitFor(t, "the newer verdict standing once the older one's POSTs were refused, the clock still", w.standsNow(edited))
	if n := sq.receives(id); n != 2 {
		t.Fatalf("the newer verdict's message was received %d times, want twice", n)
	}
}
