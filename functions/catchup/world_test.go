package catchup_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// base is what every provider's catch-up world shares: the real ingress, queue and runner over
// a FileLedger on a manual clock, the ingress's mode of answering, and what catch-up logs and
// counts. A provider's world embeds it with that provider's fakes.
type base struct {
	t      *testing.T
	clock  *ledger.ManualClock
	cfg    *config.Config
	ledger *localfs.Ledger
	q      *queue.Local
	mode   atomic.Int32
	logs   *syncBuffer
	gauges *gauges
	// publisher posts a route's verdicts to the provider's fake.
	publisher func(baseURL string) publish.Publisher
	n         int
}

// newBase parses yaml (the routes), opens a new root for them at 2026-07-01 12:00 and starts the
// ingress, holding secrets, behind the mode of answering; it returns the ingress's base URL
// (webhooks go to /hooks/{route}).
func newBase(t *testing.T, b *base, yaml string, secrets secretsMap, publisher func(baseURL string) publish.Publisher) string {
	t.Helper()
	b.t, b.publisher = t, publisher
	b.clock = ledger.NewManualClock(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: cfg.Limits(), Clock: b.clock, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	b.cfg, b.ledger, b.q = cfg, l, queue.NewLocalOn(b.clock)
	b.logs, b.gauges = &syncBuffer{}, &gauges{m: map[string]float64{}}
	in := &ingress.Handler{Config: cfg, Ledger: l, Queue: b.q, Secrets: secrets}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{route}", func(rw http.ResponseWriter, r *http.Request) {
		serveIn(t, in, ingressMode(b.mode.Load()), rw, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (b *base) runner() *catchup.Runner {
	return &catchup.Runner{State: b.ledger, Now: b.clock.Now, Metrics: b.gauges,
		Log: slog.New(slog.NewTextHandler(b.logs, nil))}
}

// runAll runs r over each source, failing the test on an error, and returns their reports.
func (b *base) runAll(r *catchup.Runner, sources []catchup.Source) []catchup.Report {
	b.t.Helper()
	var out []catchup.Report
	for _, s := range sources {
		rep, err := r.Run(context.Background(), s)
		if err != nil {
			b.t.Fatalf("catch-up of %s: %v", s.Describe(), err)
		}
		out = append(out, rep)
	}
	return out
}

// drain runs the runner over every queued message.
func (b *base) drain() {
	b.t.Helper()
	r := &runner.Runner{Ledger: b.ledger, Owner: "r", Lease: 30 * time.Second, RenewEvery: time.Hour, RetryDelay: time.Second, Now: b.clock.Now,
		Routes: func(_ context.Context, name string) (*runner.Route, error) {
			rt := b.cfg.Route(name)
			ev, err := evaluate.NewRules(rt.Rules)
			if err != nil {
				return nil, err
			}
			return &runner.Route{Evaluator: ev, Publisher: b.publisher(rt.Publish.BaseURL), Context: rt.Publish.Context}, nil
		}}
	for i := 0; b.q.Len() > 0; i++ {
		if i > 200 {
			b.t.Fatal("the queue never drained")
		}
		res, err := (&runner.Local{Runner: r, Queue: b.q}).Next(context.Background())
		if err != nil {
			b.t.Fatal(err)
		}
		if !res.Done && res.RetryAt.After(b.clock.Now()) {
			b.clock.Set(res.RetryAt)
		}
	}
}

// checkAsked compares the resends a provider carried out per delivery of hook (got) with want.
func checkAsked(t *testing.T, hook any, got, want map[string]int) {
	t.Helper()
	for id, n := range want {
		if got[id] != n {
			t.Errorf("%+v: delivery %s redelivered %d times, want %d", hook, id, got[id], n)
		}
	}
	for id, n := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%+v: delivery %s redelivered %d times, want none", hook, id, n)
		}
	}
}

// gaveUpLine is the last line logged for a delivery catch-up gave up.
func (b *base) gaveUpLine() string {
	line := ""
	for _, l := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(l, "gave up a delivery") {
			line = l
		}
	}
	return line
}

type secretsMap map[string]string

func (s secretsMap) Get(_ context.Context, ref string) (string, error) {
	if v, ok := s[strings.TrimPrefix(ref, "env:")]; ok {
		return v, nil
	}
	return "", fmt.Errorf("no secret %s", ref)
}

// ingressMode is how the ingress endpoint answers: up, down (503, as a throttled stage or a
// broken release), hung (no answer until the sender gives up), admitting and then failing
// (the ledger has the delivery; its sender saw a 502), unreachable (the connection is
// closed without an answer), or broken (a release whose parser refuses every webhook as
// malformed: 400).
type ingressMode int32

const (
	up ingressMode = iota
	down
	hung
	admitThenFail
	unreachable
	broken
)

// serveIn answers a webhook as the ingress in mode does.
func serveIn(t *testing.T, in http.Handler, mode ingressMode, rw http.ResponseWriter, r *http.Request) {
	switch mode {
	case down:
		http.Error(rw, "stage throttled", http.StatusServiceUnavailable)
	case hung:
		io.Copy(io.Discard, r.Body) // the server notices the sender leave only once the body is read
		<-r.Context().Done()        // the sender gives up first
	case unreachable:
		providerapitest.Cut(rw)
	case broken:
		http.Error(rw, `{"outcome":"malformed","message":"the body is not a push this release can read"}`, http.StatusBadRequest)
	case admitThenFail:
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, r)
		if rec.Code != http.StatusAccepted {
			t.Errorf("the ingress answered %d %s", rec.Code, rec.Body)
		}
		http.Error(rw, "bad gateway", http.StatusBadGateway)
	default:
		in.ServeHTTP(rw, r)
	}
}

// deliveryTimeout is how long the fakes' attempts wait for the ingress: long enough for any
// answer on a loaded machine; hungTimeout is theirs while the ingress hangs, which they wait
// out.
const (
	deliveryTimeout = 30 * time.Second
	hungTimeout     = 2 * time.Second
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type gauges struct {
	mu sync.Mutex
	m  map[string]float64
}

func (g *gauges) Gauge(name string, v float64, _ string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[name] += v
}

func (g *gauges) get(name string) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[name]
}
