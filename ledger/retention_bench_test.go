package ledger_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// BenchmarkRetention30Days simulates 30 days of a busy GitHub organisation (10,000 deliveries a
// day) through the ledger's own state machine (NewRow, Readmit, Claim, Save, Complete,
// Removable) with a cleanup every 5 minutes, and reports the rows retained at the end of each
// day: before body times (every body-only row permanent) and after (rows bounded by the body's
// repository.pushed_at, the default ceiling of 96 hours). Traffic: deliveries spread evenly over
// the day, each body time 0-60 s before its delivery, each row done within a minute, 2% of
// deliveries redelivered once by an operator within GitHub's 3 days, and 1% replayed by an
// attacker 97-120 hours later (after the row was forgotten): a replay that is admitted stops
// the simulation. Run with
//
//	go test ./ledger -run '^$' -bench Retention30Days -benchtime 1x -v
func BenchmarkRetention30Days(b *testing.B) {
	for _, c := range []struct {
		name    string
		ceiling time.Duration
	}{{"before", 0}, {"after", ledger.DefaultBodyAgeCeiling}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				days, refused := simulateRetention(b, c.ceiling, 30, 10_000)
				b.ReportMetric(float64(refused), "replays_stale")
				b.ReportMetric(float64(days[len(days)-1]), "rows_day30")
				b.ReportMetric(float64(days[9]), "rows_day10")
				var line strings.Builder
				for d, n := range days {
					fmt.Fprintf(&line, " d%d=%d", d+1, n)
				}
				b.Logf("%s: retained rows at the end of each day:%s", c.name, line.String())
			}
		})
	}
}

type simEvent struct {
	at   time.Time
	kind int // simAdmit, simRedeliver, simReplay
	n    int // delivery number
}

const (
	simAdmit = iota
	simRedeliver
	simReplay
)

type simEvents []simEvent

func (e simEvents) Len() int           { return len(e) }
func (e simEvents) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e simEvents) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *simEvents) Push(x any)        { *e = append(*e, x.(simEvent)) }
func (e *simEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// ends is cleanup's index of bounded rows by the end of their retention.
type ends []*ledger.Row

func (e ends) Len() int           { return len(e) }
func (e ends) Less(i, j int) bool { return e[i].RetainUntil.Before(e[j].RetainUntil) }
func (e ends) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *ends) Push(x any)        { *e = append(*e, x.(*ledger.Row)) }
func (e *ends) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// simulateRetention runs the simulation and returns the rows retained at the end of each day and
// the number of replays refused as Stale.
func simulateRetention(b *testing.B, ceiling time.Duration, days, perDay int) ([]int, int) {
	b.Helper()
	limits := ledger.DefaultLimits()
	limits.RecordCap = 10_000_000
	limits.BodyAgeCeiling = ceiling
	rng := rand.New(rand.NewPCG(12, 2026))
	start := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	rows := map[ledger.Key]*ledger.Row{}
	index := &ends{}
	bodyAt := map[int]time.Time{}
	delivery := func(n int) ledger.Delivery {
		body := fmt.Sprintf(`{"n":%d}`, n)
		digest := ledger.SumBody([]byte(body))
		return ledger.Delivery{Binding: ledger.Binding{Route: "gh", Scheme: "github-sha256", Identity: digest.String(), BodyDigest: digest},
			Change: []byte(`{}`), BodyAt: bodyAt[n]}
	}
	events := &simEvents{}
	gap := 24 * time.Hour / time.Duration(perDay)
	for n := range days * perDay {
		at := start.Add(time.Duration(n) * gap)
		bodyAt[n] = at.Add(-time.Duration(rng.IntN(60)) * time.Second).Truncate(time.Second)
		heap.Push(events, simEvent{at: at, kind: simAdmit, n: n})
		if rng.IntN(100) < 2 {
			heap.Push(events, simEvent{at: at.Add(time.Duration(rng.Int64N(int64(72 * time.Hour)))), kind: simRedeliver, n: n})
		}
		if rng.IntN(100) < 1 {
			heap.Push(events, simEvent{at: at.Add(97*time.Hour + time.Duration(rng.Int64N(int64(23*time.Hour)))), kind: simReplay, n: n})
		}
	}
	var highWater time.Time
	cleanup := func(now time.Time) {
		highWater = ledger.MaxTime(highWater, now)
		for index.Len() > 0 && (*index)[0].Removable(highWater) {
			r := heap.Pop(index).(*ledger.Row)
			delete(rows, r.Key)
		}
	}
	var out []int
	refused := 0
	nextCleanup := start.Add(5 * time.Minute)
	dayEnd := start.Add(24 * time.Hour)
	end := start.Add(time.Duration(days) * 24 * time.Hour)
	for events.Len() > 0 {
		ev := heap.Pop(events).(simEvent)
		for !ev.at.Before(nextCleanup) && nextCleanup.Before(end.Add(time.Nanosecond)) {
			cleanup(nextCleanup)
			nextCleanup = nextCleanup.Add(5 * time.Minute)
		}
		for !ev.at.Before(dayEnd) && !dayEnd.After(end) {
			out = append(out, len(rows))
			dayEnd = dayEnd.Add(24 * time.Hour)
		}
		if !ev.at.Before(end) {
			break
		}
		now := ledger.MaxTime(ev.at, highWater)
		d := delivery(ev.n)
		if r, ok := rows[d.Key()]; ok {
			o, _ := r.Readmit(d, limits, now)
			if ev.kind == simReplay && o != ledger.Stale && o != ledger.Duplicate {
				b.Fatalf("replay of delivery %d answered %v", ev.n, o)
			}
			if o == ledger.Stale {
				refused++
			}
			continue
		}
		r, o, err := ledger.NewRow(d, limits, now, fmt.Sprint(ev.n))
		if err != nil {
			b.Fatal(err)
		}
		if ev.kind != simAdmit && o == ledger.Admitted {
			b.Fatalf("delivery %d admitted again (kind %d) at %v: evaluated twice", ev.n, ev.kind, now)
		}
		if o != ledger.Admitted {
			if o == ledger.Stale {
				refused++
			}
			continue
		}
		// The runner finishes it within the minute.
		done := now.Add(time.Duration(1+rng.IntN(59)) * time.Second)
		c, err := r.Claim(r.Binding.Digest(), "runner", time.Minute, now)
		if err != nil || c.Outcome != ledger.Execute {
			b.Fatalf("claim: %v %v", c.Outcome, err)
		}
		l, _, err := r.Save(*c.Lease, ledger.ReportRef{Digest: ledger.SumBody([]byte("v")), Size: 1}, done)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Complete(ledger.Staged{Lease: l, Report: []byte("v")}, done); err != nil {
			b.Fatal(err)
		}
		rows[r.Key] = &r
		if !r.Permanent {
			heap.Push(index, &r)
		}
	}
	for len(out) < days {
		out = append(out, len(rows))
	}
	return out, refused
}
