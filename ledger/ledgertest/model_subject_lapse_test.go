package ledgertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// A grant ends at a request to post only once the ledger's now has reached the grant's end,
// and every later decision on the record is made at that now or after (the record keeps the
// time it changed). So a grant ended by its own verdict's request leaves no room for a
// second grant before the first one's end, and its holder's report after that request is
// lost. The histories here give each call its own interval in real time and by the clocks.
func TestSubjectModelEndsALapsedGrantOnlyPastItsEnd(t *testing.T) {
	subj := ledger.SubjectKey{0xb}
	older, newer := ledger.Key{1}, ledger.Key{2}
	const hold = 20 * time.Second
	const oldAt, newAt = 0, time.Minute
	// call is one call: made at call, returned at ret (never, if ret is 0: its answer was
	// lost), deciding at a now within [lo, hi] (hi is Timeless for a lost answer).
	type call struct {
		call, ret time.Duration
		lo, hi    time.Duration
		op        Op
	}
	mk := func(verdict ledger.Key, eventAt time.Duration, o Op) Op {
		o.Subject, o.Key, o.EventAt, o.AdmittedAt, o.HoldFor = subj, verdict, at(eventAt), at(0), hold
		return o
	}
	acquire := func(v ledger.Key, eventAt time.Duration, outcome ledger.SubjectOutcome, fence uint64) Op {
		return mk(v, eventAt, Op{Kind: OpAcquireSubject, Outcome: outcome.String(), OutFence: fence})
	}
	lostAcquire := func(v ledger.Key, eventAt time.Duration) Op {
		return mk(v, eventAt, Op{Kind: OpAcquireSubject, Unknown: true})
	}
	report := func(v ledger.Key, eventAt time.Duration, fence uint64, post ledger.PostOutcome, answer ledger.SubjectOutcome) Op {
		return mk(v, eventAt, Op{Kind: OpReportSubject, Fence: fence, Post: post.String(), Outcome: answer.String()})
	}
	lost := func(v ledger.Key, eventAt time.Duration, fence uint64) Op {
		return mk(v, eventAt, Op{Kind: OpReportSubject, Fence: fence, Post: ledger.PostApplied.String(), Err: ErrClassLeaseLost})
	}
	at1 := func(d time.Duration, op Op) call { return call{d, d, d, d, op} }
	check := func(calls ...call) bool {
		var ops []porcupine.Operation
		for i, c := range calls {
			o := c.op
			o.Client, o.Call, o.Return, o.Lo, o.Hi = i, int64(c.call), int64(c.ret), at(c.lo), at(c.hi)
			if o.Unknown {
				o.Return, o.Hi = Timeless, Timeless
			}
			ops = append(ops, porcupine.Operation{ClientId: i, Input: o, Output: o, Call: o.Call, Return: o.Return})
		}
		return porcupine.CheckOperations(Model(Limits(), 0, 0), ops)
	}
	legal := map[string][]call{
		"a lost request by the holder's verdict, past the grant's end, loses the holder's report": {
			at1(0, acquire(older, oldAt, ledger.SubjectPost, 1)),
			{hold + time.Second, 0, hold + time.Second, 0, lostAcquire(older, oldAt)},
			at1(hold+2*time.Second, lost(older, oldAt, 1)),
		},
		"a newer verdict takes over a lapsed grant while the holder's own request is lost": {
			at1(0, acquire(older, oldAt, ledger.SubjectPost, 1)),
			{time.Second, 0, time.Second, 0, lostAcquire(older, oldAt)},
			at1(hold+time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)),
			at1(hold+2*time.Second, lost(older, oldAt, 1)),
		},
	}
	for name, calls := range legal {
		if !check(calls...) {
			t.Errorf("%s: the model refuses a legal history", name)
		}
	}
	illegal := map[string][]call{
		// The lost request could end the older verdict's grant only at a now past its end
		// (20 s); the newer verdict was granted at 2 s, by every clock, while it lived.
		"a lost request by the holder's verdict ends its grant before its end": {
			at1(0, acquire(older, oldAt, ledger.SubjectPost, 1)),
			{time.Second, 0, time.Second, 0, lostAcquire(older, oldAt)},
			at1(2*time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)),
		},
		"a wait answered past the grant's end lets a grant be given before it": {
			at1(0, acquire(older, oldAt, ledger.SubjectPost, 1)),
			{time.Second, hold + time.Second, time.Second, hold + time.Second, acquire(older, oldAt, ledger.SubjectWait, 0)},
			at1(2*time.Second, acquire(newer, newAt, ledger.SubjectPost, 2)),
		},
		// The request at 21 s surely found the grant (ending by 20 s) over and ended it.
		"a report accepted after its own verdict's request surely ended the grant": {
			at1(0, acquire(older, oldAt, ledger.SubjectPost, 1)),
			at1(hold+time.Second, acquire(older, oldAt, ledger.SubjectWait, 0)),
			at1(hold+2*time.Second, report(older, oldAt, 1, ledger.PostApplied, ledger.SubjectStanding)),
		},
	}
	for name, calls := range illegal {
		if check(calls...) {
			t.Errorf("%s: the model accepts it", name)
		}
	}
}
