package cleanup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

func TestStrandedRowsAreRequeued(t *testing.T) {
	ctx := context.Background()
	clock := ledger.NewManualClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	l, err := localfs.Open(ctx, filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Clock: clock,
		Create: true, StrandedAfter: time.Minute, SweepBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var want []ledger.Delivery
	for i := range 5 {
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: string(rune('a' + i))}}
		l.Admit(ctx, d)
		want = append(want, d)
	}
	done := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "done"}}
	l.Admit(ctx, done)
	c, _ := l.Claim(ctx, done.Key(), done.Binding.Digest(), "w", time.Minute)
	s, _ := l.Save(ctx, *c.Lease, []byte("r"))
	l.Complete(ctx, s)
	clock.Advance(2 * time.Minute)
	q := queue.NewLocal()
	h := &cleanup.Handler{Ledger: l, Queue: q}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sum, err := h.Handle(cctx)
	if err != nil || !sum.LapDone || sum.Stranded != 5 || sum.Requeued != 5 || sum.Passes < 3 {
		t.Fatalf("%+v %v", sum, err)
	}
	got := map[ledger.Key]ledger.Digest{}
	for q.Len() > 0 {
		m, _ := q.Receive(ctx)
		got[m.Key] = m.Binding
	}
	for _, d := range want {
		if got[d.Key()] != d.Binding.Digest() {
			t.Fatalf("stranded %s not re-enqueued with its binding", d.Binding.Identity)
		}
	}
}

// A short invocation still runs passes: the margin shrinks with the time it has.
func TestShortDeadlineStillCleans(t *testing.T) {
	ctx := context.Background()
	l, err := localfs.Open(ctx, filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sum, err := (&cleanup.Handler{Ledger: l, Queue: queue.NewLocal()}).Handle(cctx)
	if err != nil || sum.Passes == 0 || !sum.LapDone {
		t.Fatalf("%+v %v: a 5 s invocation with the default 10 s margin did nothing", sum, err)
	}
}

// The worst case in Lambda: a saved verdict waiting for its next publish attempt (released
// with notBefore) whose message went to the dead-letter queue. The scheduled cleanup (every 5
// minutes, at any phase) re-drives it at most the stranded threshold (15 minutes) plus one
// schedule period after the attempt was due, never before it was due.
func TestDeadLetteredRowIsRedrivenWithinThresholdAndSchedule(t *testing.T) {
	const every, threshold = 5 * time.Minute, 15 * time.Minute
	worst := time.Duration(0)
	for phase := time.Duration(0); phase < every; phase += 37 * time.Second {
		ctx := context.Background()
		start := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
		clock := ledger.NewManualClock(start)
		l, err := localfs.Open(ctx, filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Clock: clock,
			Create: true})
		if err != nil {
			t.Fatal(err)
		}
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "dlq"}}
		l.Admit(ctx, d)
		c, _ := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Minute)
		s, _ := l.Save(ctx, *c.Lease, []byte("r"))
		due := start.Add(2 * time.Hour) // the next publish attempt, after a failure
		if err := l.Release(ctx, s.Lease, due); err != nil {
			t.Fatal(err)
		}
		q := queue.NewLocal()
		h := &cleanup.Handler{Ledger: l, Queue: q}
		var redriven time.Time
		for tick := start.Add(phase); tick.Before(due.Add(time.Hour)); tick = tick.Add(every) {
			clock.Set(tick)
			if _, err := h.Handle(ctx); err != nil {
				t.Fatal(err)
			}
			if q.Len() > 0 {
				redriven = tick
				break
			}
		}
		l.Close()
		delay := redriven.Sub(due)
		if redriven.IsZero() || delay < threshold || delay > threshold+every {
			t.Fatalf("phase %v: re-driven %v after the attempt was due, want within [%v, %v]", phase, delay, threshold, threshold+every)
		}
		worst = max(worst, delay)
	}
	t.Logf("a dead-lettered row is re-driven at most %v after its attempt was due (threshold %v + schedule %v)", worst, threshold, every)
}

// passLedger answers Cleanup with one finished pass reporting the given capacity.
type passLedger struct {
	ledger.Ledger
	used, cap int64
}

func (p passLedger) Cleanup(context.Context, ledger.Cursor) (ledger.CleanupReport, error) {
	return ledger.CleanupReport{Done: true, CapacityUsed: p.used, RecordCap: p.cap}, nil
}

type gauges map[string]float64

func (g gauges) Gauge(name string, v float64, unit string) { g[name+" "+unit] = v }

// Cleanup reports the capacity in use as metrics after every run, and warns with a log line
// from 80% of the record cap on, before admissions are refused at the cap.
func TestCapacityMetricAndWarningAt80Percent(t *testing.T) {
	for _, c := range []struct {
		used int64
		warn bool
	}{{799, false}, {800, true}, {1000, true}} {
		logs := &bytes.Buffer{}
		g := gauges{}
		h := &cleanup.Handler{Ledger: passLedger{used: c.used, cap: 1000}, Queue: queue.NewLocal(),
			Log: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: g}
		sum, err := h.Handle(context.Background())
		if err != nil || sum.CapacityUsed != c.used || sum.RecordCap != 1000 {
			t.Fatalf("%d: %+v %v", c.used, sum, err)
		}
		if g["capacity_used Count"] != float64(c.used) || g["capacity_used_percent Percent"] != float64(c.used)/10 {
			t.Fatalf("%d: metrics %v", c.used, g)
		}
		warned := strings.Contains(logs.String(), `"level":"WARN","msg":"ledger capacity`)
		if warned != c.warn {
			t.Fatalf("%d of 1000 in use: warned %v, want %v\n%s", c.used, warned, c.warn, logs)
		}
	}
	// A backend that reports no capacity gets no capacity metric and no warning.
	g := gauges{}
	_, err := (&cleanup.Handler{Ledger: passLedger{}, Queue: queue.NewLocal(), Metrics: g}).Handle(context.Background())
	_, used := g["capacity_used Count"]
	_, pct := g["capacity_used_percent Percent"]
	if err != nil || used || pct {
		t.Fatalf("no capacity reported: %v %v", g, err)
	}
}

// cleanupLedger answers every Cleanup with err.
type cleanupLedger struct {
	ledger.Ledger
	err error
}

func (c cleanupLedger) Cleanup(context.Context, ledger.Cursor) (ledger.CleanupReport, error) {
	return ledger.CleanupReport{}, c.err
}

// cleanup_succeeded, the metric the "cleanup is not running" alarm watches, is reported by
// every run: 1 by a run that finished a pass, 0 by one that found another cleanup holding
// maintenance or whose pass failed (so the alarm sees a run that cleans nothing, and a new
// deployment whose cleanup has not run yet reports nothing at all).
func TestCleanupSucceededIsOneOnlyForARunThatFinishedAPass(t *testing.T) {
	for _, c := range []struct {
		name string
		l    ledger.Ledger
		want float64
	}{
		{"a finished pass", passLedger{}, 1},
		{"maintenance held elsewhere", cleanupLedger{err: ledger.ErrBusy}, 0},
		{"a failed pass", cleanupLedger{err: errors.New("store unavailable")}, 0},
	} {
		g := gauges{}
		_, err := (&cleanup.Handler{Ledger: c.l, Queue: queue.NewLocal(), Metrics: g}).Handle(context.Background())
		if got, ok := g["cleanup_succeeded Count"]; !ok || got != c.want || (err != nil) != (c.name == "a failed pass") {
			t.Errorf("%s: cleanup_succeeded %v (reported %v), want %v (metrics %v, err %v)", c.name, got, ok, c.want, g, err)
		}
	}
}

// A delivery admitted and never run (a runner that cannot start while SQS still hands out its
// message, or a message lost) is seen by the cleanup from the ledger itself: each run reports
// the age of the oldest unfinished row, by the ledger's clock, until its verdict is posted.
func TestOldestUnfinishedAgeOfARootWithAStuckRow(t *testing.T) {
	ctx := context.Background()
	clock := ledger.NewManualClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	l, err := localfs.Open(ctx, filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Clock: clock,
		Create: true, StrandedAfter: 24 * time.Hour, SweepBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	runLogged := func() (gauges, string) {
		t.Helper()
		g, logs := gauges{}, &bytes.Buffer{}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		sum, err := (&cleanup.Handler{Ledger: l, Queue: queue.NewLocal(), Metrics: g, Log: slog.New(slog.NewJSONHandler(logs, nil))}).Handle(cctx)
		if err != nil || !sum.LapDone {
			t.Fatalf("cleanup: %+v %v", sum, err)
		}
		return g, logs.String()
	}
	run := func() gauges {
		g, _ := runLogged()
		return g
	}
	if age, ok := run()["oldest_unfinished_age Seconds"]; !ok || age != 0 {
		t.Fatalf("an empty root: oldest_unfinished_age %v (reported %v), want 0", age, ok)
	}
	for i := range 3 { // finished rows, admitted before the stuck one, count for nothing
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: fmt.Sprint("done", i)}}
		l.Admit(ctx, d)
		c, _ := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Minute)
		s, _ := l.Save(ctx, *c.Lease, []byte("r"))
		if err := l.Complete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour)
	stuck := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "stuck"}}
	if _, err := l.Admit(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	clock.Advance(90 * time.Minute)
	g, logs := runLogged()
	if g["oldest_unfinished_age Seconds"] != 5400 {
		t.Fatalf("a row admitted 90 minutes ago and never run: oldest_unfinished_age %v, want 5400 s", g)
	}
	if !strings.Contains(logs, `"oldest_unfinished_age":"1h30m0s"`) {
		t.Fatalf("the cleanup's log line does not say it:\n%s", logs)
	}
	c, _ := l.Claim(ctx, stuck.Key(), stuck.Binding.Digest(), "w", time.Minute)
	s, _ := l.Save(ctx, *c.Lease, []byte("r"))
	if err := l.Complete(ctx, s); err != nil {
		t.Fatal(err)
	}
	if age, ok := run()["oldest_unfinished_age Seconds"]; !ok || age != 0 {
		t.Fatalf("once published: oldest_unfinished_age %v (reported %v), want 0", age, ok)
	}
}

// partLedger answers a pass that reads part of the ledger (Done false, oldest as given), then
// finds maintenance held: the run ends without reading the rest.
type partLedger struct {
	ledger.Ledger
	oldest, now time.Time
	calls       *int
}

func (p partLedger) Cleanup(context.Context, ledger.Cursor) (ledger.CleanupReport, error) {
	*p.calls++
	if *p.calls > 1 {
		return ledger.CleanupReport{}, ledger.ErrBusy
	}
	return ledger.CleanupReport{Next: "more", OldestUnfinished: p.oldest, HighWater: p.now}, nil
}

// A run that read part of the ledger reports the oldest unfinished row it saw, and no figure
// when it saw none: a zero would tell the alarm that nothing waits in the part it never read.
func TestAPartOfTheLedgerReportsNoAllClear(t *testing.T) {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		oldest time.Time
		want   float64
		ok     bool
	}{{time.Time{}, 0, false}, {now.Add(-2 * time.Hour), 7200, true}} {
		g, calls := gauges{}, 0
		sum, err := (&cleanup.Handler{Ledger: partLedger{oldest: c.oldest, now: now, calls: &calls}, Queue: queue.NewLocal(), Metrics: g}).
			Handle(context.Background())
		got, ok := g["oldest_unfinished_age Seconds"]
		if err != nil || sum.LapDone || ok != c.ok || got != c.want {
			t.Fatalf("oldest %v: reported %v %v, want %v %v (%+v %v)", c.oldest, got, ok, c.want, c.ok, sum, err)
		}
	}
}

// Catch-up runs after the passes, within the invocation's time less the margin, and its
// failure is the run's.
func TestCatchUpRunsAfterThePassesWithinTheTimeLeft(t *testing.T) {
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ran bool
	var left time.Duration
	h := &cleanup.Handler{Ledger: l, Queue: queue.NewLocal(), Margin: time.Second, CatchUp: func(ctx context.Context) error {
		ran = true
		dl, ok := ctx.Deadline()
		if ok {
			left = time.Until(dl)
		}
		return errors.New("hook refused")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = h.Handle(ctx)
	if !ran || err == nil || !strings.Contains(err.Error(), "hook refused") {
		t.Fatalf("catch-up ran %v, error %v", ran, err)
	}
	if left <= 0 || left > time.Minute-time.Second {
		t.Errorf("catch-up had %s, want the time left less the margin", left)
	}
}

// endlessLap is a ledger whose cleanup lap never ends within an invocation (a ledger larger
// than a run sweeps): each pass takes a moment and leaves more.
type endlessLap struct{ ledger.Ledger }

func (e endlessLap) Cleanup(ctx context.Context, cursor ledger.Cursor) (ledger.CleanupReport, error) {
	select {
	case <-time.After(10 * time.Millisecond):
	case <-ctx.Done():
		return ledger.CleanupReport{}, ctx.Err()
	}
	return ledger.CleanupReport{Next: "more"}, nil
}

// A lap longer than an invocation does not leave catch-up without time: the passes stop
// early enough for it to run, and it is handed a deadline not yet passed.
func TestCatchUpHasTimeWhenTheLapOutlastsTheInvocation(t *testing.T) {
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ran bool
	var expired error
	h := &cleanup.Handler{Ledger: endlessLap{l}, Queue: queue.NewLocal(), Margin: time.Second, CatchUp: func(ctx context.Context) error {
		ran, expired = true, ctx.Err()
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	s, err := h.Handle(ctx)
	if err != nil || s.Passes == 0 || s.LapDone {
		t.Fatalf("the passes: %+v %v, want some, the lap not done", s, err)
	}
	if !ran || expired != nil {
		t.Errorf("catch-up ran %v with its context %v, want it run with time left", ran, expired)
	}
}
