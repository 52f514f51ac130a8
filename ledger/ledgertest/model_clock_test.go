package ledgertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// A ledger on the store's clock (S3) decides by the store's time alone; the host clocks of its
// handles only measure elapsed time. The bound a history records for each decision must be the
// store's then: a host clock ahead of it, read during the call, must not make a live lease
// "possibly ended" nor a row inside its retention "possibly removable". These tests record
// their calls through caller.call, as RunHistories does, with a handle whose host clock runs
// three minutes ahead and is read during every call.

// clockedHistory records calls of a store-clocked history through a caller.
type clockedHistory struct {
	w     *memWorld
	sink  *memSink
	c     *caller
	ahead *hostClock
}

func newClockedHistory() *clockedHistory {
	w, sink := newMemWorld(), &memSink{}
	env := &HistoryEnv{World: w, Sink: sink, Resolution: time.Second, StoreClocked: true}
	ahead := &hostClock{w: w}
	ahead.skew.Store(int64(3 * time.Minute))
	return &clockedHistory{w: w, sink: sink, c: &caller{env: env, host: ahead, decide: storeClock{w}}, ahead: ahead}
}

// record makes one call of client whose answer is o, reading the host clock ahead during it.
func (h *clockedHistory) record(client int, key ledger.Key, o Op) {
	h.c.id = client
	o.Key = key
	h.c.call(o, func(*Op) error {
		h.ahead.Now() // a handle's store clock measures elapsed time on its host clock
		return nil
	})
}

func (h *clockedHistory) linearizable() bool {
	var hist []porcupine.Operation
	for _, o := range h.sink.ops {
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
	}
	return porcupine.CheckOperations(Model(HistoryLimits(), 0, time.Second), hist)
}

// admitAndRun admits a delivery signed now and claims it (lease until now+historyLease).
func (h *clockedHistory) admitAndRun(key ledger.Key) time.Time {
	T := h.w.Now()
	signed := T.Truncate(time.Second)
	keep := HistoryLimits().SignedAgeCeiling + HistoryLimits().QueueCeiling
	h.record(0, key, Op{Kind: OpAdmit, SignedAt: signed.UnixNano(), Outcome: "admitted", OutEval: "e1", RetainUntil: signed.Add(keep).UnixNano()})
	h.record(1, key, Op{Kind: OpClaim, LeaseFor: historyLease, Outcome: "execute", OutEval: "e1", OutFence: 1, Expires: T.Add(historyLease).UnixNano()})
	return signed.Add(keep)
}

// TestModelRefusesASecondOwnerWhileTheStoreLeaseLives: client 2 is granted Execute 2 seconds
// into a 10-second lease by the store's clock (invariant 1 broken), while a host clock three
// minutes ahead was read. The history must be refused.
func TestModelRefusesASecondOwnerWhileTheStoreLeaseLives(t *testing.T) {
	h := newClockedHistory()
	key := historyDelivery(1, Epoch).Key()
	h.admitAndRun(key)
	h.w.Advance(2 * time.Second)
	h.record(2, key, Op{Kind: OpClaim, LeaseFor: historyLease, Outcome: "execute", OutEval: "e1", OutFence: 2,
		Expires: h.w.Now().Add(historyLease).UnixNano()})
	if last := h.sink.ops[len(h.sink.ops)-1]; last.Hi > h.w.Now().UnixNano() {
		t.Errorf("the decision's bound is %s ahead of the store's clock", time.Duration(last.Hi-h.w.Now().UnixNano()))
	}
	if h.linearizable() {
		t.Fatal("the model accepts a second Execute 2s into a live 10s lease of a store-clocked ledger")
	}
}

// TestModelRefusesARemovalInsideStoreRetention: a row removed 28 seconds before its retention
// ends by the store's clock, while a host clock three minutes ahead was read (a cleaner
// deciding on a fast host clock), must be refused.
func TestModelRefusesARemovalInsideStoreRetention(t *testing.T) {
	h := newClockedHistory()
	key := historyDelivery(1, Epoch).Key()
	retain := h.admitAndRun(key)
	h.record(1, key, Op{Kind: OpSave, Fence: 1, Eval: "e1", Phase: ledger.PhaseExecute, Report: "r"})
	h.record(1, key, Op{Kind: OpComplete, Eval: "e1", Report: "r"})
	h.w.Advance(2 * time.Second)
	h.record(9, key, Op{Kind: OpRemove, Eval: "e1"})
	if h.linearizable() {
		t.Fatalf("the model accepts a removal decided %s before the retention ends by the store's clock", retain.Sub(h.w.Now()))
	}
}

// TestModelAcceptsTheSameCallsOnTheStoreClock: the same calls with the second claim after the
// first lease ended by the store's clock are legal: the refusals above are the bound's doing.
func TestModelAcceptsTheSameCallsOnTheStoreClock(t *testing.T) {
	h := newClockedHistory()
	key := historyDelivery(1, Epoch).Key()
	h.admitAndRun(key)
	h.w.Advance(historyLease + 2*time.Second)
	h.record(2, key, Op{Kind: OpClaim, LeaseFor: historyLease, Outcome: "execute", OutEval: "e1", OutFence: 2,
		Expires: h.w.Now().Add(historyLease).UnixNano()})
	if !h.linearizable() {
		t.Fatal("the model refuses a claim taken over after the lease ended by the store's clock")
	}
}
