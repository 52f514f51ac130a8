package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// memStore is a Store of one row in memory that records how each decision asked its result to
// be written, and writes it only when asked.
type memStore struct {
	row    ledger.StoredRow
	now    time.Time
	writes []ledger.Write
}

func (m *memStore) ReadRow(ctx context.Context, key ledger.Key) (ledger.StoredRow, error) {
	return m.row, nil
}

func (m *memStore) UpdateRow(ctx context.Context, key ledger.Key, timeless bool, decide func(*ledger.StoredRow, time.Time) (ledger.Write, error)) error {
	row := m.row
	row.Report = append([]byte(nil), m.row.Report...)
	w, err := decide(&row, m.now)
	m.writes = append(m.writes, w)
	if w != ledger.WriteNothing && w != ledger.ReadDurable {
		m.row = row
	}
	return err
}

func (m *memStore) ReadSubject(context.Context, ledger.SubjectKey) (ledger.SubjectRecord, bool, error) {
	return ledger.SubjectRecord{}, false, nil
}

func (m *memStore) UpdateSubject(context.Context, ledger.SubjectKey, bool, func(*ledger.SubjectRecord, bool, time.Time, time.Time) (ledger.Write, error)) error {
	return errors.New("no subject records here")
}

func (m *memStore) SubjectAsked(ledger.Key, ledger.SubjectKey) {}

func (m *memStore) last(t *testing.T, want ledger.Write, what string) {
	t.Helper()
	if len(m.writes) == 0 || m.writes[len(m.writes)-1] != want {
		t.Fatalf("%s asked for writes %v, want %v last", what, m.writes, want)
	}
}

// TestEachOperationAsksForTheWriteItsAnswerNeeds pins the durability every single-record
// operation asks of a backend: what someone outside the host relies on once answered is
// durable first; a repeat answered from what was read makes that durable; a refusal that
// recorded the effective now is written; a finished row is written as one.
func TestEachOperationAsksForTheWriteItsAnswerNeeds(t *testing.T) {
	ctx := context.Background()
	limits := ledger.DefaultLimits()
	row, _ := rowIn(t, "pending")
	m := &memStore{row: ledger.StoredRow{Row: row}, now: t0}
	rs := ledger.NewRecords(m, m, limits)
	digest := row.Binding.Digest()

	c, err := rs.Claim(ctx, row.Key, digest, "w", leaseFor)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	m.last(t, ledger.WriteLossy, "an Execute grant")
	if c2, err := rs.Claim(ctx, row.Key, digest, "v", leaseFor); err != nil || c2.Outcome != ledger.Busy {
		t.Fatalf("second claim: %v %v", c2.Outcome, err)
	}
	m.last(t, ledger.WriteNothing, "a Busy answer")
	lease, err := rs.Renew(ctx, *c.Lease, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteLossy, "a renewal")
	report := []byte("the report")
	staged, err := rs.Save(ctx, lease, report)
	if err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteDurable, "a Save")
	if string(m.row.Report) != string(report) {
		t.Fatalf("the row keeps %q, want the saved report", m.row.Report)
	}
	if _, err := rs.Save(ctx, lease, report); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.ReadDurable, "a repeated Save")
	if err := rs.Release(ctx, staged.Lease, time.Time{}); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteLossy, "a Release")
	c, err = rs.Claim(ctx, row.Key, digest, "w", leaseFor)
	if err != nil || c.Outcome != ledger.Publish || string(c.Staged.Report) != string(report) {
		t.Fatalf("claim of a saved row: %v %q %v", c.Outcome, c.Staged.Report, err)
	}
	m.last(t, ledger.WriteDurable, "a Publish grant")
	if got, err := rs.Report(ctx, row.Key); err != nil || string(got) != string(report) {
		t.Fatalf("report: %q %v", got, err)
	}

	// The publishing lease ends: a Complete refused, an Abandon refused and recorded.
	m.now = t0.Add(time.Hour)
	if err := rs.Abandon(ctx, *c.Staged, "gave up"); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("abandon under an ended lease: %v, want ErrLeaseLost", err)
	}
	m.last(t, ledger.WriteLossy, "a refusal that recorded the effective now")
	if !m.row.Row.SeenAt.Equal(m.now) {
		t.Fatalf("the refusal left SeenAt %v, want %v", m.row.Row.SeenAt, m.now)
	}
	if err := rs.Abandon(ctx, *c.Staged, "gave up"); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("abandon again: %v, want ErrLeaseLost", err)
	}
	m.last(t, ledger.WriteNothing, "a refusal that recorded nothing new")

	// A live lease again: Abandon finishes the row, keeping its report for Revive.
	m.now = t0.Add(2 * time.Hour)
	c, err = rs.Claim(ctx, row.Key, digest, "w", leaseFor)
	if err != nil || c.Outcome != ledger.Publish {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if err := rs.Abandon(ctx, *c.Staged, "gave up"); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteEnd, "an Abandon")
	if string(m.row.Report) != string(report) {
		t.Fatalf("the abandoned row keeps %q, want its report", m.row.Report)
	}
	if _, err := rs.Revive(ctx, row.Key, ""); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteDurable, "a Revive")
	if _, err := rs.Revive(ctx, row.Key, ""); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.ReadDurable, "a repeated Revive")
	c, err = rs.Claim(ctx, row.Key, digest, "w", leaseFor)
	if err != nil || c.Outcome != ledger.Publish {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if err := rs.Complete(ctx, *c.Staged); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteEnd, "a Complete")
	if len(m.row.Report) != 0 {
		t.Fatalf("the done row keeps a report of %d bytes", len(m.row.Report))
	}
	if err := rs.Complete(ctx, *c.Staged); err != nil {
		t.Fatal(err)
	}
	m.last(t, ledger.WriteNothing, "a repeated Complete")
	if _, err := rs.Report(ctx, row.Key); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("report of a done row: %v, want ErrInvalid", err)
	}
}

// TestAnAbandonedRowWithoutItsReportIsNotRevived: a row abandoned by a version that did not keep
// its report cannot be published again, and is refused before its decision changes anything.
func TestAnAbandonedRowWithoutItsReportIsNotRevived(t *testing.T) {
	row, _ := rowIn(t, "abandoned")
	m := &memStore{row: ledger.StoredRow{Row: row}, now: t0}
	rs := ledger.NewRecords(m, m, ledger.DefaultLimits())
	if _, err := rs.Revive(context.Background(), row.Key, ""); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("revive: %v, want ErrInvalid", err)
	}
	m.last(t, ledger.WriteNothing, "a refused Revive")
	if m.row.Row.State != ledger.StateAbandoned {
		t.Fatalf("the row is %v, want abandoned", m.row.Row.State)
	}
	if _, err := rs.Report(context.Background(), row.Key); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("report: %v, want ErrInvalid", err)
	}
}

// staleFirstStore is memStore run as a backend that decides on a copy first (an object store's
// cached copy): every decision runs first on the row as it was before the last write, its
// result thrown away, then on the row as it is. The Store contract says only the last run
// answers.
type staleFirstStore struct {
	memStore
	prev *ledger.StoredRow
}

func (m *staleFirstStore) UpdateRow(ctx context.Context, key ledger.Key, timeless bool, decide func(*ledger.StoredRow, time.Time) (ledger.Write, error)) error {
	if m.prev != nil {
		stale := *m.prev
		stale.Report = append([]byte(nil), m.prev.Report...)
		decide(&stale, m.now) // a decision on a copy whose write would lose: decided again
	}
	was := m.row
	n := len(m.writes)
	err := m.memStore.UpdateRow(ctx, key, timeless, decide)
	if w := m.writes[n]; w != ledger.WriteNothing && w != ledger.ReadDurable {
		m.prev = &was
	}
	return err
}

// TestOnlyTheLastRunOfADecisionAnswers: a backend may run a decision more than once (on a
// copy, then on a fresh read); every operation answers what its last run decided, as if it had
// run once on the row as it is.
func TestOnlyTheLastRunOfADecisionAnswers(t *testing.T) {
	row, _ := rowIn(t, "pending")
	run := func(s interface {
		ledger.RowStore
		ledger.SubjectStore
	}) []string {
		ctx := context.Background()
		rs := ledger.NewRecords(s, s, ledger.DefaultLimits())
		digest := row.Binding.Digest()
		var out []string
		note := func(v any, err error) {
			if c, ok := v.(ledger.Claim); ok { // the answer, not where it is held
				lease, staged := ptr(c.Lease), ptr(c.Staged)
				c.Lease, c.Staged = nil, nil
				v = fmt.Sprintf("%+v lease %+v staged %+v", c, lease, staged)
			}
			out = append(out, fmt.Sprintf("%+v / %v", v, err))
		}
		c, err := rs.Claim(ctx, row.Key, digest, "w", leaseFor)
		note(c, err)
		if err != nil || c.Lease == nil {
			t.Fatalf("claim: %v", err)
		}
		note(rs.Claim(ctx, row.Key, digest, "v", leaseFor))
		lease, err := rs.Renew(ctx, *c.Lease, leaseFor)
		note(lease, err)
		staged, err := rs.Save(ctx, lease, []byte("the report"))
		note(staged, err)
		note(rs.Save(ctx, lease, []byte("the report")))
		note(nil, rs.Release(ctx, staged.Lease, time.Time{}))
		p, err := rs.Claim(ctx, row.Key, digest, "x", leaseFor)
		note(p, err)
		if p.Staged == nil {
			t.Fatalf("publish claim: %v %v", p.Outcome, err)
		}
		note(*p.Staged, nil)
		note(nil, rs.Abandon(ctx, *p.Staged, "refused"))
		note(rs.Report(ctx, row.Key))
		note(rs.Revive(ctx, row.Key, ""))
		q, err := rs.Claim(ctx, row.Key, digest, "y", leaseFor)
		note(q, err)
		if q.Staged == nil {
			t.Fatalf("publish claim after the revive: %v %v", q.Outcome, err)
		}
		note(*q.Staged, nil)
		note(nil, rs.Complete(ctx, *q.Staged))
		note(rs.Report(ctx, row.Key))
		note(rs.Inspect(ctx, row.Key))
		return out
	}
	once := run(&memStore{row: ledger.StoredRow{Row: row}, now: t0})
	twice := run(&staleFirstStore{memStore: memStore{row: ledger.StoredRow{Row: row}, now: t0}})
	for i := range once {
		if once[i] != twice[i] {
			t.Errorf("answer %d decided once:\n  %s\ndecided on a stale copy first:\n  %s", i, once[i], twice[i])
		}
	}
}

// ptr is what p points to, or nil.
func ptr[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
