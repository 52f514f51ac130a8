package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// FaultOp is one ledger operation staged for a backend's fault-injection test: Prep brings a
// fresh delivery to the operation's starting state with a healthy handle and returns the
// operation, to be run on a faulty one. After lists the states the row may be in when the
// operation reported failure ("" for absent): nothing of the operation, or its whole effect.
type FaultOp struct {
	Name  string
	Prep  func(t testing.TB, l ledger.Ledger, clock *ledger.ManualClock) (ledger.Delivery, func(l ledger.Ledger) error)
	After []string
}

var faultSeq atomic.Int64

func faultDelivery(signedAt time.Time) ledger.Delivery {
	n := faultSeq.Add(1)
	body := fmt.Appendf(nil, `{"fault":%d,"t":%d}`, n, time.Now().UnixNano())
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "faults", Scheme: scheme, Identity: fmt.Sprintf("fault-%d-%d", n, time.Now().UnixNano()),
			BodyDigest: ledger.SumBody(body)},
		Change:   body,
		SignedAt: signedAt,
	}
}

// Must helpers for backends' own tests.

// MustAdmit admits d and expects a new row.
func MustAdmit(t testing.TB, l ledger.Ledger, d ledger.Delivery) {
	t.Helper()
	if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
}

// MustClaim claims d and expects the given outcome.
func MustClaim(t testing.TB, l ledger.Ledger, d ledger.Delivery, want ledger.ClaimOutcome) ledger.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), d.Key(), d.Binding.Digest(), "w", lease)
	if err != nil || c.Outcome != want {
		t.Fatalf("claim: %+v %v (want %v)", c, err, want)
	}
	return c
}

// MustSave saves report under lease.
func MustSave(t testing.TB, l ledger.Ledger, lease ledger.Lease, report string) ledger.Staged {
	t.Helper()
	s, err := l.Save(context.Background(), lease, []byte(report))
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	return s
}

// MustComplete completes s.
func MustComplete(t testing.TB, l ledger.Ledger, s ledger.Staged) {
	t.Helper()
	if err := l.Complete(context.Background(), s); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// FinishRow drives an existing row, whatever its state, to a terminal state.
func FinishRow(t testing.TB, l ledger.Ledger, clock *ledger.ManualClock, d ledger.Delivery) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "finisher", lease)
		if err != nil {
			t.Fatalf("finish: claim: %v", err)
		}
		switch c.Outcome {
		case ledger.ClaimDuplicate:
			return
		case ledger.Busy:
			clock.Set(c.RetryAt)
		case ledger.Execute:
			MustComplete(t, l, MustSave(t, l, *c.Lease, "finished"))
		case ledger.Publish:
			MustComplete(t, l, *c.Staged)
		default:
			t.Fatalf("finish: claim answered %v", c.Outcome)
		}
	}
	t.Fatalf("finish: row never finished")
}

// FaultOps lists every ledger operation, staged for fault injection.
func FaultOps() []FaultOp {
	ctx := context.Background()
	claimBy := func(d ledger.Delivery) func(ledger.Ledger) error {
		return func(l ledger.Ledger) error {
			_, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", lease)
			return err
		}
	}
	return []FaultOp{
		{"admit", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			return d, func(l ledger.Ledger) error { _, err := l.Admit(ctx, d); return err }
		}, []string{"", "pending"}},
		{"readmit-later-signature", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			later := d
			later.SignedAt = c.Now().Add(time.Second)
			return d, func(l ledger.Ledger) error { _, err := l.Admit(ctx, later); return err }
		}, []string{"pending"}},
		{"claim-execute", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(time.Time{})
			MustAdmit(t, l, d)
			return d, claimBy(d)
		}, []string{"pending", "running"}},
		{"claim-publish", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(time.Time{})
			MustAdmit(t, l, d)
			MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "r")
			c.Advance(time.Minute)
			return d, claimBy(d)
		}, []string{"saved"}},
		{"renew", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(time.Time{})
			MustAdmit(t, l, d)
			cl := MustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { _, err := l.Renew(ctx, *cl.Lease, time.Minute); return err }
		}, []string{"running"}},
		{"save", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(time.Time{})
			MustAdmit(t, l, d)
			cl := MustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { _, err := l.Save(ctx, *cl.Lease, []byte("verdict")); return err }
		}, []string{"running", "saved"}},
		{"complete", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			return d, func(l ledger.Ledger) error { return l.Complete(ctx, s) }
		}, []string{"saved", "done"}},
		{"abandon", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			return d, func(l ledger.Ledger) error { return l.Abandon(ctx, s, "provider answered 422") }
		}, []string{"saved", "abandoned"}},
		{"supersede", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			by := faultDelivery(c.Now()).Key()
			return d, func(l ledger.Ledger) error { return l.Supersede(ctx, s, by) }
		}, []string{"saved", "superseded"}},
		{"acquire-subject", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			q := faultSubjectRequest(d, s)
			return d, func(l ledger.Ledger) error { _, err := l.AcquireSubject(ctx, q); return err }
		}, []string{"saved"}},
		{"report-subject", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			g, err := l.AcquireSubject(ctx, faultSubjectRequest(d, s))
			if err != nil || g.Outcome != ledger.SubjectPost {
				t.Fatalf("acquire subject: %+v %v", g, err)
			}
			return d, func(l ledger.Ledger) error { _, err := l.ReportSubject(ctx, g, ledger.PostApplied); return err }
		}, []string{"saved"}},
		{"revive", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			s := MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
			if err := l.Abandon(ctx, s, "provider answered 422"); err != nil {
				t.Fatalf("abandon: %v", err)
			}
			return d, func(l ledger.Ledger) error { _, err := l.Revive(ctx, d.Key(), s.Lease.EvaluationID); return err }
		}, []string{"abandoned", "saved"}},
		{"release", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(time.Time{})
			MustAdmit(t, l, d)
			cl := MustClaim(t, l, d, ledger.Execute)
			return d, func(l ledger.Ledger) error { return l.Release(ctx, *cl.Lease, time.Time{}) }
		}, []string{"running", "pending"}},
		{"cleanup", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock) (ledger.Delivery, func(ledger.Ledger) error) {
			d := faultDelivery(c.Now())
			MustAdmit(t, l, d)
			MustComplete(t, l, MustSave(t, l, *MustClaim(t, l, d, ledger.Execute).Lease, "verdict"))
			c.Advance(2 * time.Hour)
			return d, func(l ledger.Ledger) error { _, err := l.Cleanup(ctx, ""); return err }
		}, []string{"done", ""}},
	}
}

// faultSubjectRequest asks to publish s's verdict on a subject of d's own (a commit no
// other operation publishes to).
func faultSubjectRequest(d ledger.Delivery, s ledger.Staged) ledger.SubjectRequest {
	return ledger.SubjectRequest{
		Subject: ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/faults",
			SHA: d.Key().String()[:40], Context: "amiss"},
		Order: s.Lease.Order(), EvaluationID: s.Lease.EvaluationID, HoldFor: time.Minute, Settle: time.Minute}
}

// RowState reads d's row: its state name ("" when absent) and the row. A row that cannot be
// read fails the test: every row must stay legible.
func RowState(t testing.TB, l ledger.Ledger, d ledger.Delivery) (string, ledger.Row) {
	t.Helper()
	row, err := l.Inspect(context.Background(), d.Key())
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return "", row
	}
	if err != nil {
		t.Fatalf("row not legible: %v", err)
	}
	return row.State.String(), row
}

// A Continuation is what runs next on a row after a fault: not only the same operation again,
// but whatever a restarted process, another worker or the sender may do.
type Continuation struct {
	Name string
	Run  func(t testing.TB, l ledger.Ledger, clock *ledger.ManualClock, d ledger.Delivery) error
}

// Continuations lists what may follow a fault. Each answers an error only when the contract
// broke (an answer it allows, such as Stale or ErrInvalid for a revive of a row that is not
// abandoned, is not one).
func Continuations() []Continuation {
	ctx := context.Background()
	allowed := func(err error) error {
		if err == nil || errors.Is(err, ledger.ErrInvalid) || errors.Is(err, ledger.ErrUnknownDelivery) ||
			errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrBusy) {
			return nil
		}
		return err
	}
	return []Continuation{
		{"the same work finished", func(testing.TB, ledger.Ledger, *ledger.ManualClock, ledger.Delivery) error { return nil }},
		{"a re-signed retry", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock, d ledger.Delivery) error {
			if !d.SignedAt.IsZero() {
				d.SignedAt = c.Now()
			}
			_, err := l.Admit(ctx, d)
			return err
		}},
		{"a cleanup pass", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock, d ledger.Delivery) error {
			_, err := l.Cleanup(ctx, "")
			return allowed(err)
		}},
		{"a claim by another owner that gives its lease back", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock, d ledger.Delivery) error {
			cl, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "other", lease)
			if err != nil {
				return allowed(err)
			}
			switch cl.Outcome {
			case ledger.Execute:
				return l.Release(ctx, *cl.Lease, time.Time{})
			case ledger.Publish:
				return l.Release(ctx, cl.Staged.Lease, time.Time{})
			}
			return nil
		}},
		{"an operator's revive", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock, d ledger.Delivery) error {
			_, err := l.Revive(ctx, d.Key(), "")
			return allowed(err)
		}},
		{"readers", func(t testing.TB, l ledger.Ledger, c *ledger.ManualClock, d ledger.Delivery) error {
			if _, err := l.Inspect(ctx, d.Key()); allowed(err) != nil {
				return err
			}
			if _, err := l.Report(ctx, d.Key()); allowed(err) != nil {
				return err
			}
			_, err := l.Rows(ctx, "", 100)
			return err
		}},
	}
}

// CheckAfterFault checks the row after op ran under a fault (err is what op answered) and
// before was the row before it: legible, nothing or the whole effect, fence never lower,
// capacity never understated; then it runs the continuation, checks again, finishes the row's
// work and runs cleanup to the end of a lap, so a later case starts from a settled store.
func CheckAfterFault(t testing.TB, l ledger.Ledger, clock *ledger.ManualClock, op FaultOp, what string, d ledger.Delivery, before ledger.Row, err error, next Continuation) {
	t.Helper()
	ctx := context.Background()
	state, after := RowState(t, l, d)
	if err != nil && !slices.Contains(op.After, state) {
		t.Fatalf("%s: failed operation left the row %q, want one of %q (error: %v)", what, state, op.After, err)
	}
	if state != "" && after.Fence < before.Fence {
		t.Fatalf("%s: fence went back from %d to %d", what, before.Fence, after.Fence)
	}
	if st, serr := l.Stats(ctx); serr != nil || st.CapacityUsed < st.Rows {
		t.Fatalf("%s: stats %+v %v: capacity understates", what, st, serr)
	}
	if cerr := next.Run(t, l, clock, d); cerr != nil {
		t.Fatalf("%s, then %s: %v", what, next.Name, cerr)
	}
	state2, after2 := RowState(t, l, d)
	if state2 != "" && state != "" && after2.Fence < after.Fence {
		t.Fatalf("%s, then %s: fence went back from %d to %d", what, next.Name, after.Fence, after2.Fence)
	}
	if state != "" && state2 == "" && !after.Removable(after.Now(clock.Now(), time.Time{})) {
		t.Fatalf("%s, then %s: the %s row vanished inside its retention", what, next.Name, state)
	}
	state = state2
	if state == "" && op.Name == "admit" {
		MustAdmit(t, l, d)
		state = "pending"
	}
	if state != "" {
		FinishRow(t, l, clock, d)
	}
	for cur := ledger.Cursor(""); ; {
		rep, err := l.Cleanup(ctx, cur)
		if err != nil {
			t.Fatalf("%s: cleanup after the fault: %v", what, err)
		}
		if rep.Done {
			break
		}
		cur = rep.Next
	}
}
