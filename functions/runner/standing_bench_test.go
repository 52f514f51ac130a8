package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// Benchmarks of what stands on the commit, on the wall clock: a FileLedger that syncs (as amiss
// serve's does), a fake of GitHub's status API over HTTP, amiss serve's workers or three Lambda
// runners on an SQS queue. Figures, never thresholds: docs/benchmarks.md records them.

// benchWorld is a FileLedger on the wall clock, a fake GitHub, and routes posting to it.
type benchWorld struct {
	tb   testing.TB
	root string
	l    ledger.Ledger
	gh   *githubtest.GitHub
	srv  *httptest.Server
}

func newBenchWorld(tb testing.TB, gh *githubtest.GitHub) *benchWorld {
	tb.Helper()
	w := &benchWorld{tb: tb, root: filepath.Join(tb.TempDir(), "root"), gh: gh}
	w.l = w.open()
	w.srv = httptest.NewServer(gh)
	tb.Cleanup(w.srv.Close)
	return w
}

func (w *benchWorld) open() ledger.Ledger {
	w.tb.Helper()
	l, err := localfs.Open(context.Background(), w.root, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		w.tb.Fatal(err)
	}
	w.tb.Cleanup(func() { l.Close() })
	return l
}

// runner is a runner over l posting to the fake GitHub with the route's timeout, as amiss
// serve and the Lambda runner make it (their lease, their retry delay).
func (w *benchWorld) runner(owner string, l ledger.Ledger, timeout time.Duration, lease time.Duration) *runner.Runner {
	pub := publish.NewGitHub(w.srv.URL, ghToken, &http.Client{Timeout: timeout})
	return &runner.Runner{Ledger: l, Owner: owner, Lease: lease, RetryDelay: 5 * time.Second, Log: quietLog,
		Routes: func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: titleRule, Publisher: pub, Context: statusCtx, Destination: "github " + w.srv.URL,
				Timeout: timeout}, nil
		}}
}

// pullRequest admits a pull request event of title, signed at updatedAt.
func (w *benchWorld) pullRequest(title string, updatedAt time.Time) queue.Message {
	w.tb.Helper()
	s, _ := json.Marshal(change.Change{Provider: "github", Repository: commitRepo, SHA: headSHA, Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: title, TargetBranch: "main"}, Whole: change.TitleInput | change.PullInput})
	body := []byte(fmt.Sprintf(`{"action":%q,"n":%d}`, title, time.Now().UnixNano()))
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
		BodyDigest: ledger.SumBody(body)}, Change: s, BodyAt: updatedAt}
	if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		w.tb.Fatalf("admit %q: %+v %v", title, a, err)
	}
	return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}
}

func (w *benchWorld) row(m queue.Message) ledger.Row {
	r, err := w.l.Inspect(context.Background(), m.Key)
	if err != nil {
		w.tb.Fatal(err)
	}
	return r
}

// until waits for cond, failing after limit.
func (w *benchWorld) until(what string, limit time.Duration, cond func() bool) {
	w.tb.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			w.tb.Fatalf("waited %v for %s", limit, what)
		}
	}
}

// benchTimeout is the routes' publish timeout: the default, or AMISS_BENCH_PUBLISH_TIMEOUT. A
// grant lasts twice the timeout plus 10 s (70 s by default).
func benchTimeout(tb testing.TB) time.Duration {
	if v := os.Getenv("AMISS_BENCH_PUBLISH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			tb.Fatal(err)
		}
		return d
	}
	return 30 * time.Second
}

// percentile is the p-th percentile (0 to 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// A pull request opened with a title that breaks the rule and edited a moment later: two
// verdicts, one commit and context. Each scenario measures the time from the edit's webhook
// (its admission) to its status created at the provider and left standing, and, where the
// older verdict's POST ends in an answer, from that answer. The runners are amiss serve's
// (four workers over an in-process queue) or three Lambda runners taking batches from one
// SQS queue (each its own process, on its own ledger handle).
//
//	go test -run '^$' -bench NewestVerdictStands -benchtime 5x ./functions/runner/
func BenchmarkNewestVerdictStands(b *testing.B) {
	for _, mode := range []string{"serve", "lambda"} {
		for _, sc := range []string{"refused", "slow", "newest-first", "killed"} {
			b.Run(mode+"/"+sc, func(b *testing.B) {
				var fromWebhook, fromAnswer []time.Duration
				for range b.N {
					webhook, answer := standingTrial(b, mode, sc)
					fromWebhook = append(fromWebhook, webhook)
					if answer > 0 {
						fromAnswer = append(fromAnswer, answer)
					}
				}
				b.ReportMetric(percentile(fromWebhook, 50).Seconds(), "webhook-to-standing-p50-s")
				b.ReportMetric(percentile(fromWebhook, 100).Seconds(), "webhook-to-standing-max-s")
				if len(fromAnswer) > 0 {
					b.ReportMetric(percentile(fromAnswer, 50).Seconds(), "answer-to-standing-p50-s")
					b.ReportMetric(percentile(fromAnswer, 100).Seconds(), "answer-to-standing-max-s")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// standingTrial plays scenario sc once with the runners of mode, and answers the time from the
// newer webhook to its status standing, and from the older POST's last answer (zero: none).
func standingTrial(b *testing.B, mode, sc string) (fromWebhook, fromAnswer time.Duration) {
	b.Helper()
	timeout := benchTimeout(b)
	gh := githubtest.New(githubtest.Token(ghToken))
	var mu sync.Mutex
	var answered, stood time.Time
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	b.Cleanup(letGo)
	gh.Post = func(n int, s githubtest.Created) githubtest.Behavior {
		if s.State == "success" {
			mu.Lock()
			stood = time.Now()
			mu.Unlock()
			return githubtest.Behavior{}
		}
		if sc == "newest-first" {
			return githubtest.Behavior{}
		}
		heldOnce.Do(func() { close(held) })
		<-release
		var out githubtest.Behavior
		switch sc {
		case "refused":
			out.Code = http.StatusServiceUnavailable
		case "slow":
			time.Sleep(1500 * time.Millisecond)
		case "killed":
			out.Code = http.StatusServiceUnavailable // its runner is gone: nobody hears it
		}
		mu.Lock()
		answered = time.Now()
		mu.Unlock()
		return out
	}
	w := newBenchWorld(b, gh)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { letGo(); cancel(); wg.Wait() })
	var send func(queue.Message)
	switch mode {
	case "serve":
		q := queue.NewLocal()
		r := w.runner("serve", w.l, timeout, 30*time.Second)
		wg.Add(1)
		go func() { defer wg.Done(); (&runner.Local{Runner: r, Queue: q}).Run(ctx, 4) }()
		b.Cleanup(q.Close)
		send = func(m queue.Message) { q.Send(ctx, m) }
	case "lambda":
		sq := newSQSQueue(time.Now)
		for i := range 3 {
			r := w.runner(fmt.Sprint("lambda-", i), w.open(), timeout, time.Minute)
			wg.Add(1)
			go func() { defer wg.Done(); sq.poll(ctx, r, 3*time.Minute) }()
		}
		send = func(m queue.Message) { sq.send(m) }
	}
	now := time.Now().Truncate(time.Second)
	if sc == "newest-first" {
		start := time.Now()
		edited := w.pullRequest(goodTitle, now)
		send(edited)
		w.until("the edit's verdict done", time.Minute, func() bool { return w.row(edited).State == ledger.StateDone })
		opened := w.pullRequest(badTitle, now.Add(-time.Second))
		send(opened)
		w.until("the opening's verdict superseded", time.Minute, func() bool { return w.row(opened).State == ledger.StateSuperseded })
		mu.Lock()
		defer mu.Unlock()
		return stood.Sub(start), 0
	}
	opened := w.pullRequest(badTitle, now.Add(-time.Second))
	if sc == "killed" {
		// The older verdict's runner is killed while its POST is in flight: nothing of it reaches
		// the ledger any more, and its grant ends by itself.
		dying := &killable{Ledger: w.open()}
		r := w.runner("dying", dying, timeout, time.Minute)
		wg.Add(1)
		go func() { defer wg.Done(); r.Process(ctx, opened) }()
		<-held
		dying.kill()
	} else {
		send(opened)
		<-held
	}
	start := time.Now()
	edited := w.pullRequest(goodTitle, now)
	send(edited)
	subj := ledger.Subject{Publisher: "github " + w.srv.URL, Repository: commitRepo, SHA: headSHA, Context: statusCtx}.Key()
	w.until("the edit's verdict told to wait", time.Minute, func() bool {
		rec, err := w.l.InspectSubject(context.Background(), subj)
		row := w.row(edited)
		return err == nil && rec.Newest.Key == edited.Key && row.State == ledger.StateSaved && row.Owner == ""
	})
	if sc != "killed" {
		letGo()
	}
	// Killed, the older POST's outcome is unknown: the edit's verdict, posted once the grant
	// is over, is confirmed (read back) only once that POST has settled, a minute and more
	// later. It stands from its post.
	w.until("the edit's verdict posted", 2*(2*timeout+10*time.Second)+2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !stood.IsZero() && (sc == "killed" || w.row(edited).State == ledger.StateDone)
	})
	letGo()
	mu.Lock()
	defer mu.Unlock()
	if got, _ := gh.Latest(commitRepo, headSHA, statusCtx); got.State != "success" {
		b.Fatalf("the commit shows %q, want the edit's verdict", got.State)
	}
	fromWebhook = stood.Sub(start)
	if sc != "killed" {
		fromAnswer = stood.Sub(answered)
	}
	return fromWebhook, fromAnswer
}

// quietLog drops the runner's log lines.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
