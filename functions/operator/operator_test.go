package operator_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

type world struct {
	l     *localfs.Ledger
	clock *ledger.ManualClock
	q     *queue.Local
}

func newWorld(t *testing.T) *world {
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: clock, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &world{l: l, clock: clock, q: queue.NewLocal()}
}

// row admits delivery i and takes it to state.
func (w *world) row(t *testing.T, i int, state ledger.State) ledger.Key {
	t.Helper()
	ctx := context.Background()
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: fmt.Sprint(i)}, Change: []byte(`{}`)}
	if _, err := w.l.Admit(ctx, d); err != nil {
		t.Fatal(err)
	}
	if state == ledger.StatePending {
		return d.Key()
	}
	c, err := w.l.Claim(ctx, d.Key(), d.Binding.Digest(), "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if state == ledger.StateRunning {
		return d.Key()
	}
	s, err := w.l.Save(ctx, *c.Lease, []byte(fmt.Sprintf(`{"state":"failure","description":"verdict %d"}`, i)))
	if err != nil {
		t.Fatal(err)
	}
	switch state {
	case ledger.StateDone:
		err = w.l.Complete(ctx, s)
	case ledger.StateAbandoned:
		err = w.l.Abandon(ctx, s, "provider refused it for good: 422")
	}
	if err != nil {
		t.Fatal(err)
	}
	return d.Key()
}

func (w *world) queued(t *testing.T) map[ledger.Key]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[ledger.Key]bool{}
	for w.q.Len() > 0 {
		m, err := w.q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[m.Key] = true
	}
	return out
}

func TestRecoverQueuesEveryUnfinishedRow(t *testing.T) {
	w := newWorld(t)
	want := map[ledger.Key]bool{}
	for i, s := range []ledger.State{ledger.StatePending, ledger.StateRunning, ledger.StateSaved, ledger.StateDone, ledger.StateAbandoned} {
		k := w.row(t, i, s)
		if !s.Terminal() {
			want[k] = true
		}
	}
	n, err := operator.Recover(context.Background(), w.l, w.q, nil)
	got := w.queued(t)
	if err != nil || n != 3 || len(got) != 3 {
		t.Fatalf("recovered %d (%v), queued %d: want the 3 unfinished rows", n, err, len(got))
	}
	for k := range want {
		if !got[k] {
			t.Fatalf("unfinished row %s not queued", k)
		}
	}
}

func TestListByState(t *testing.T) {
	w := newWorld(t)
	for i := range 5 {
		w.row(t, i, ledger.StateAbandoned)
	}
	w.row(t, 9, ledger.StateDone)
	var got []ledger.Row
	if err := operator.List(context.Background(), w.l, ledger.StateAbandoned, func(r ledger.Row) error { got = append(got, r); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d abandoned rows listed, want 5", len(got))
	}
	n := 0
	operator.List(context.Background(), w.l, 0, func(ledger.Row) error { n++; return nil }, nil)
	if n != 6 {
		t.Fatalf("%d rows listed, want 6", n)
	}
}

func TestRepublish(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	abandoned := w.row(t, 1, ledger.StateAbandoned)
	done := w.row(t, 2, ledger.StateDone)
	row, err := operator.Republish(ctx, w.l, w.q, abandoned, "")
	if err != nil || row.State != ledger.StateSaved || !w.queued(t)[abandoned] {
		t.Fatalf("republish: %v, row %v", err, row.State)
	}
	// The revived row answers Publish with the frozen bytes.
	c, err := w.l.Claim(ctx, abandoned, row.Binding.Digest(), "o", time.Minute)
	if err != nil || c.Outcome != ledger.Publish || string(c.Staged.Report) != `{"state":"failure","description":"verdict 1"}` {
		t.Fatalf("claim after republish: %+v %v", c, err)
	}
	if _, err := operator.Republish(ctx, w.l, w.q, done, ""); !errors.Is(err, ledger.ErrInvalid) || w.q.Len() != 0 {
		t.Fatalf("republish of a done row: %v, %d queued", err, w.q.Len())
	}
	if _, err := operator.Republish(ctx, w.l, w.q, ledger.NewKey("r", "s", "nobody"), ""); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("republish of an unknown key: %v", err)
	}
	if _, err := operator.Republish(ctx, w.l, failing{}, w.row(t, 3, ledger.StateAbandoned), ""); !errors.Is(err, operator.ErrNotQueued) {
		t.Fatalf("republish with a failing queue: %v", err)
	}
}

type failing struct{}

func (failing) Send(context.Context, queue.Message) error { return errors.New("queue down") }

func TestRepublishAbandonedSince(t *testing.T) {
	w := newWorld(t)
	old := w.row(t, 1, ledger.StateAbandoned)
	w.clock.Advance(2 * time.Hour)
	recent := w.row(t, 2, ledger.StateAbandoned)
	w.row(t, 3, ledger.StatePending)
	var out []operator.Outcome
	err := operator.RepublishAbandoned(context.Background(), w.l, w.q, epoch.Add(time.Hour), func(o operator.Outcome) { out = append(out, o) }, nil)
	if err != nil || len(out) != 1 || out[0].Row.Key != recent || out[0].Err != nil || out[0].Row.State != ledger.StateSaved {
		t.Fatalf("%v %+v: want only the row abandoned in the last hour", err, out)
	}
	if r, _ := w.l.Inspect(context.Background(), old); r.State != ledger.StateAbandoned {
		t.Fatalf("the older row was revived: %v", r.State)
	}
	if q := w.queued(t); len(q) != 1 || !q[recent] {
		t.Fatalf("queued %v", q)
	}
}
