package ledgertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// history builds a sequential history of one key: each call returns before the next one.
type history struct {
	ops []porcupine.Operation
	t   int64
}

var mkey = ledger.Binding{Route: "m", Scheme: "standard-webhooks", Identity: "one"}.Key()

func at(d time.Duration) int64 { return Epoch.Add(d).UnixNano() }

// add appends a call decided at now (Lo = Hi = now).
func (h *history) add(now time.Duration, o Op) *history {
	o.Key = mkey
	o.Lo, o.Hi = at(now), at(now)
	o.Call, o.Return = h.t, h.t+1
	if o.Unknown {
		o.Return, o.Hi = Timeless, Timeless
	}
	h.t += 2
	h.ops = append(h.ops, porcupine.Operation{Input: o, Output: o, Call: o.Call, Return: o.Return})
	return h
}

func (h *history) linearizable() bool {
	return porcupine.CheckOperations(Model(Limits(), 0, 0), h.ops)
}

const lf = 30 * time.Second

func admitted() Op {
	return Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "admitted", OutEval: "e1", RetainUntil: at(5*time.Minute + time.Hour)}
}

func execute(fence uint64, now time.Duration) Op {
	return Op{Kind: OpClaim, LeaseFor: lf, Outcome: "execute", OutEval: "e1", OutFence: fence, Expires: at(now + lf)}
}

func publish(fence uint64, now time.Duration, report string) Op {
	return Op{Kind: OpClaim, LeaseFor: lf, Outcome: "publish", OutEval: "e1", OutFence: fence, Expires: at(now + lf), OutReport: report}
}

func save(fence uint64, report string) Op {
	return Op{Kind: OpSave, Fence: fence, Eval: "e1", Phase: ledger.PhaseExecute, Report: report}
}

// TestModelAcceptsALegalHistory: the lifecycle with a lease that runs out and a publication
// by the next claimer, a lost answer, and a removal after retention.
func TestModelAcceptsALegalHistory(t *testing.T) {
	h := (&history{}).
		add(0, admitted()).
		add(0, execute(1, 0)).
		add(time.Second, save(1, "r")).
		add(time.Minute, publish(2, time.Minute, "r")).
		add(time.Minute, Op{Kind: OpClaim, LeaseFor: lf, Outcome: "busy", OutEval: "e1"}).
		add(time.Minute, Op{Kind: OpComplete, Eval: "e1", Report: "r", Unknown: true}).
		add(2*time.Minute, Op{Kind: OpClaim, LeaseFor: lf, Outcome: "duplicate", OutEval: "e1"}).
		add(2*time.Minute, Op{Kind: OpAdmit, SignedAt: at(time.Minute), Outcome: "duplicate", OutEval: "e1", RetainUntil: at(6*time.Minute + time.Hour)}).
		add(2*time.Hour, Op{Kind: OpRemove, Eval: "e1"}).
		add(2*time.Hour, Op{Kind: OpAdmit, SignedAt: at(2 * time.Hour), Outcome: "admitted", OutEval: "e2", RetainUntil: at(2*time.Hour + 5*time.Minute + time.Hour)})
	if !h.linearizable() {
		t.Fatal("the model refuses a legal history")
	}
	// A claim whose answer was lost may have granted fence 1; the next grant shows fence 2.
	lost := (&history{}).
		add(0, admitted()).
		add(0, Op{Kind: OpClaim, LeaseFor: lf, Unknown: true}).
		add(time.Minute, execute(2, time.Minute))
	if !lost.linearizable() {
		t.Fatal("the model refuses a grant after a claim whose answer was lost")
	}
}

// TestModelRefusesKnownViolations: each history breaks one promise of the contract.
func TestModelRefusesKnownViolations(t *testing.T) {
	cases := map[string]*history{
		"ExecuteAfterSave": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(time.Minute, execute(2, time.Minute)),
		"SecondVerdictPublished": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(time.Minute, publish(2, time.Minute, "other")),
		"SecondVerdictSaved": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(2*time.Second, save(1, "other")),
		"TwoLiveOwners": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(5*time.Second, execute(2, 5*time.Second)),
		"ReusedFence":   (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Minute, execute(1, time.Minute)),
		"ExpiredOwnerSaves": (&history{}).add(0, admitted()).add(0, execute(1, 0)).
			add(time.Minute, save(1, "r")),
		"DuplicateBeforeDone": (&history{}).add(0, admitted()).
			add(0, Op{Kind: OpClaim, LeaseFor: lf, Outcome: "duplicate", OutEval: "e1"}),
		"AdmitDuplicateBeforeDone": (&history{}).add(0, admitted()).
			add(time.Second, Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "duplicate", OutEval: "e1", RetainUntil: at(5*time.Minute + time.Hour)}),
		"StaleRequestAdmitted": (&history{}).
			add(10*time.Minute, admitted()),
		"StaleAfterCleanupHighWater": (&history{}).
			add(0, Op{Kind: OpAdmit, SignedAt: at(0), HWFloor: at(10 * time.Minute), Outcome: "admitted", OutEval: "e1", RetainUntil: at(5*time.Minute + time.Hour)}),
		"UnfinishedRowRemoved": (&history{}).add(0, admitted()).add(0, execute(1, 0)).
			add(2*time.Hour, Op{Kind: OpRemove, Eval: "e1"}),
		"RowRemovedInsideItsRetention": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(2*time.Second, Op{Kind: OpComplete, Eval: "e1", Report: "r"}).
			add(time.Hour, Op{Kind: OpRemove, Eval: "e1"}),
		"ReplayAdmittedInsideRetention": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(2*time.Second, Op{Kind: OpComplete, Eval: "e1", Report: "r"}).
			add(3*time.Minute, Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "admitted", OutEval: "e2", RetainUntil: at(5*time.Minute + time.Hour)}),
		"LiveRowUnknown": (&history{}).add(0, admitted()).
			add(time.Second, Op{Kind: OpClaim, LeaseFor: lf, Err: ErrClassUnknownRow}),
		"EvaluationIDReused": (&history{}).add(0, admitted()).add(0, execute(1, 0)).add(time.Second, save(1, "r")).
			add(2*time.Second, Op{Kind: OpComplete, Eval: "e1", Report: "r"}).
			add(2*time.Hour, Op{Kind: OpRemove, Eval: "e1"}).
			add(2*time.Hour, Op{Kind: OpAdmit, SignedAt: at(2 * time.Hour), Outcome: "admitted", OutEval: "e1", RetainUntil: at(2*time.Hour + 5*time.Minute + time.Hour)}),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if h.linearizable() {
				t.Fatalf("the model accepts a history that breaks the contract")
			}
		})
	}
}

// TestModelForgetsARemovedRowsTimes: a row finished late (its last transition decided at
// 1h10m by a host ahead) and past its retention (1h5m) is removed; a new signature of the same
// request, fresh at 1h9m by a host behind, is admitted at that now. A removed row's own times no
// longer raise the ledger's now (only the high-water does), whether the history holds the
// cleanup's report of the removal or not (a cleanup cut off before it answered): the model
// must accept both, as the FileLedger's soak found it did only for the first.
func TestModelForgetsARemovedRowsTimes(t *testing.T) {
	late := func() *history {
		return (&history{}).
			add(0, admitted()).
			add(0, execute(1, 0)).
			add(time.Second, save(1, "r")).
			add(70*time.Minute, publish(2, 70*time.Minute, "r")).
			add(70*time.Minute, Op{Kind: OpComplete, Eval: "e1", Report: "r"})
	}
	again := Op{Kind: OpAdmit, SignedAt: at(68 * time.Minute), Outcome: "admitted", OutEval: "e2",
		RetainUntil: at(68*time.Minute + 5*time.Minute + time.Hour)}
	if h := late().add(66*time.Minute, Op{Kind: OpRemove, Eval: "e1"}).add(69*time.Minute, again); !h.linearizable() {
		t.Fatal("refused: a new signature admitted after the reported removal of the row")
	}
	if h := late().add(69*time.Minute, again); !h.linearizable() {
		t.Fatal("refused: a new signature admitted after a removal the history does not report")
	}
	// The removal's own floor still holds: a replay of the first signature stays refused.
	replay := Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "admitted", OutEval: "e2", RetainUntil: at(5*time.Minute + time.Hour)}
	if h := late().add(4*time.Minute, replay); h.linearizable() {
		t.Fatal("accepted: a replay admitted at a now before the removed row's retention ended")
	}
}
