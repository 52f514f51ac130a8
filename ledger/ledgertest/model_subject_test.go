package ledgertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// The subject model refuses what would let an older verdict stand over a newer one: a grant to
// the older after the newer was recorded, two grants live at once, a superseded answer naming
// another verdict, a report accepted under a grant taken over. And it accepts the protocol's
// own histories.
func TestSubjectModelRefusesAnOlderVerdictPostedAfterANewerOne(t *testing.T) {
	subj := ledger.SubjectKey{0xa}
	older, newer := ledger.Key{1}, ledger.Key{2}
	const hold = 20 * time.Second
	mk := func(verdict ledger.Key, eventAt time.Duration, o Op) Op {
		o.Subject, o.Key, o.EventAt, o.AdmittedAt, o.HoldFor = subj, verdict, at(eventAt), at(0), hold
		return o
	}
	acquire := func(v ledger.Key, eventAt time.Duration, outcome ledger.SubjectOutcome, fence uint64) Op {
		return mk(v, eventAt, Op{Kind: OpAcquireSubject, Outcome: outcome.String(), OutFence: fence})
	}
	report := func(v ledger.Key, eventAt time.Duration, fence uint64, post ledger.PostOutcome, answer ledger.SubjectOutcome) Op {
		return mk(v, eventAt, Op{Kind: OpReportSubject, Fence: fence, Post: post.String(), Outcome: answer.String()})
	}
	superseded := func(v ledger.Key, eventAt time.Duration, by ledger.Key) Op {
		o := acquire(v, eventAt, ledger.SubjectSuperseded, 0)
		o.By = by
		return o
	}
	type step struct {
		now time.Duration
		op  Op
	}
	check := func(steps ...step) bool {
		var ops []porcupine.Operation
		for i, s := range steps {
			o := s.op
			o.Client, o.Call, o.Return, o.Lo, o.Hi = i, int64(2*i), int64(2*i+1), at(s.now), at(s.now)
			ops = append(ops, porcupine.Operation{ClientId: i, Input: o, Output: o, Call: o.Call, Return: o.Return})
		}
		return porcupine.CheckOperations(Model(Limits(), 0, 0), ops)
	}
	const oldAt, newAt = 0, time.Minute
	horizon := Limits().SubjectHorizon()
	legal := map[string][]step{
		"the newer first, the older superseded": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, report(newer, newAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
			{2 * time.Second, superseded(older, oldAt, newer)},
		},
		"the older mid-post, the newer waits, then posts": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{time.Second, acquire(newer, newAt, ledger.SubjectWait, 0)},
			{2 * time.Second, report(older, oldAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
			{3 * time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)},
			{4 * time.Second, report(newer, newAt, 2, ledger.PostApplied, ledger.SubjectStanding)},
			{5 * time.Second, superseded(older, oldAt, newer)},
		},
		"a grant that ended without a report is taken over": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{hold + time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)},
			{hold + 2*time.Second, mk(older, oldAt, Op{Kind: OpReportSubject, Fence: 1, Post: "applied", Err: ErrClassLeaseLost})},
		},
		"a grant that ended without a report is ended by its own verdict asking again": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{hold + time.Second, acquire(older, oldAt, ledger.SubjectWait, 0)}, // its post may still land
			{hold + 2*time.Second, mk(older, oldAt, Op{Kind: OpReportSubject, Fence: 1, Post: "applied", Err: ErrClassLeaseLost})},
			{hold + 3*time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)},
		},
		"a record forgotten past the horizon: a new one grants the older verdict (late, it reads back)": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, report(newer, newAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
			{newAt + horizon + time.Second, acquire(older, oldAt, ledger.SubjectPost, 1)},
		},
	}
	for name, steps := range legal {
		if !check(steps...) {
			t.Errorf("%s: the model refuses a legal history", name)
		}
	}
	illegal := map[string][]step{
		"the older granted after the newer was recorded": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, report(newer, newAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
			{2 * time.Second, acquire(older, oldAt, ledger.SubjectPost, 2)},
		},
		"the older granted while the newer waits": {
			{0, acquire(newer, newAt, ledger.SubjectWait, 0)},
			{time.Second, acquire(older, oldAt, ledger.SubjectPost, 1)},
		},
		"two grants live at once": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)},
		},
		"a superseded answer naming another verdict": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, superseded(older, oldAt, ledger.Key{9})},
		},
		"a report accepted under a grant taken over": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{hold + time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)},
			{hold + 2*time.Second, report(older, oldAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
		},
		"a grant lost while it surely lives": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{time.Second, acquire(older, oldAt, ledger.SubjectWait, 0)},
			{2 * time.Second, mk(older, oldAt, Op{Kind: OpReportSubject, Fence: 1, Post: "applied", Err: ErrClassLeaseLost})},
		},
		"standing without a report": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, acquire(newer, newAt, ledger.SubjectStanding, 0)},
		},
		"the older granted on a new record before the newer was past the horizon": {
			{0, acquire(newer, newAt, ledger.SubjectPost, 1)},
			{time.Second, report(newer, newAt, 1, ledger.PostApplied, ledger.SubjectStanding)},
			{newAt + horizon - time.Second, acquire(older, oldAt, ledger.SubjectPost, 1)},
		},
		"a fence that does not grow": {
			{0, acquire(older, oldAt, ledger.SubjectPost, 1)},
			{time.Second, report(older, oldAt, 1, ledger.PostRefused, ledger.SubjectRetry)},
			{2 * time.Second, acquire(newer, newAt, ledger.SubjectPost, 1)},
		},
	}
	for name, steps := range illegal {
		if check(steps...) {
			t.Errorf("%s: the model accepts it", name)
		}
	}
}
