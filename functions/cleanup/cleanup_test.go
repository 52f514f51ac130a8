package cleanup_test

import (
	"context"
	"path/filepath"
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
