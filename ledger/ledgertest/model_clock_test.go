package ledgertest

import (
	"context"
	"math/rand/v2"
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

// On a store of nodes, a handle estimates the store's time as the latest Date it was answered
// with plus the time its host measured since, and decides a lease on its cached row at that
// estimate without asking the store. When its node's clock stepped back after that answer,
// the estimate runs ahead of every clock of the store by the step until the handle is answered
// again: it is a reading of the clock the ledger decides on, which the history's bound of the
// ledger's now must count, and no more than it.

// steppedBackHandle is a handle on a node whose clock was 50 s ahead when it answered a claim
// and stepped back home 5 s later, before the holder renews on its cached row.
type steppedBackHandle struct {
	w       *memWorld
	sink    *memSink
	c       *caller
	local   ledger.Clock // the host clock the handle was given (Options.Clock)
	node    NodeClock    // the node as the handle sees it (Options.StoreClock)
	date    time.Time    // the latest Date the handle was answered with
	dateAt  time.Time    // the local reading when it arrived
	expires time.Time    // the claim's lease end
}

func newSteppedBackHandle(t *testing.T) *steppedBackHandle {
	w, sink := newMemWorld(), &memSink{}
	env := &HistoryEnv{World: w, Sink: sink, Resolution: time.Second, StoreClocked: true,
		Config: HistoryConfig{StoreSkew: time.Minute}}
	h := &steppedBackHandle{w: w, sink: sink}
	env.Open = func(_ context.Context, o Options) (ledger.Ledger, error) {
		h.local, h.node = o.Clock, o.StoreClock.(NodeClock)
		return nil, nil
	}
	c, err := newCaller(context.Background(), env, 1, false, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	c.node.offset.Store(int64(50 * time.Second)) // the node's clock stepped forward
	key := historyDelivery(1, Epoch).Key()
	keep := HistoryLimits().SignedAgeCeiling + HistoryLimits().QueueCeiling
	signed := c.node.Now().Truncate(time.Second) // signed by the node's clock
	c.call(Op{Key: key, Kind: OpAdmit, SignedAt: signed.UnixNano()}, func(o *Op) error {
		h.answer()
		o.Outcome, o.OutEval, o.RetainUntil = "admitted", "e1", signed.Add(keep).UnixNano()
		return nil
	})
	c.call(Op{Key: key, Kind: OpClaim, LeaseFor: historyLease}, func(o *Op) error {
		now := h.answer()
		h.expires = now.Add(historyLease)
		o.Outcome, o.OutEval, o.OutFence, o.Expires = "execute", "e1", 1, h.expires.UnixNano()
		return nil
	})
	c.node.offset.Store(0) // and back home
	w.Advance(5 * time.Second)
	return h
}

// answer is an answer of the store reaching the handle: it keeps the Date, and answers its
// estimate then, as objstore's clock does.
func (h *steppedBackHandle) answer() time.Time {
	h.date, h.dateAt = h.node.Answer().Truncate(time.Second), h.local.Now()
	return h.date
}

// estimate is the handle's estimate of the store's time, made without asking.
func (h *steppedBackHandle) estimate() time.Time { return h.date.Add(h.local.Now().Sub(h.dateAt)) }

// renew records the holder's renewal on its cached row, decided at the handle's estimate
// moved by beyond.
func (h *steppedBackHandle) renew(beyond time.Duration) {
	key := historyDelivery(1, Epoch).Key()
	h.c.call(Op{Key: key, Kind: OpRenew, Fence: 1, Eval: "e1", Phase: ledger.PhaseExecute, LeaseFor: historyLease}, func(o *Op) error {
		now := h.estimate().Add(beyond)
		if !now.Before(h.expires) {
			o.Err = ErrClassLeaseLost
			return ledger.ErrLeaseLost
		}
		o.Expires = now.Add(historyLease).UnixNano()
		return nil
	})
}

func (h *steppedBackHandle) linearizable() bool {
	var hist []porcupine.Operation
	for _, o := range h.sink.ops {
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
	}
	return porcupine.CheckOperations(Model(HistoryLimits(), 0, time.Second), hist)
}

// TestARenewalOnTheEstimateAfterTheNodeSteppedBackIsLegal: the holder renews 5 s into its
// 10 s lease by its handle's estimate (50 s ahead of the base, while every node's clock now
// reads the base), on its cached row: the lease is live by the clock the ledger decides on,
// and the renewal is legal.
func TestARenewalOnTheEstimateAfterTheNodeSteppedBackIsLegal(t *testing.T) {
	h := newSteppedBackHandle(t)
	h.renew(0)
	if !h.linearizable() {
		for _, o := range h.sink.ops {
			t.Logf("%s: now in [%v, %v] after the epoch, lease until %v", o.Kind, time.Duration(o.Lo-Epoch.UnixNano()),
				time.Duration(o.Hi-Epoch.UnixNano()), time.Duration(o.Expires-Epoch.UnixNano()))
		}
		t.Fatalf("the model refuses a renewal decided at the handle's estimate of the store's time")
	}
}

// TestARenewalBeyondTheEstimateIsRefused: the same renewal decided 2 s past the handle's
// estimate, a time no clock of the store nor the handle's estimate ever read, is refused: the
// bound counts the estimate, nothing more.
func TestARenewalBeyondTheEstimateIsRefused(t *testing.T) {
	h := newSteppedBackHandle(t)
	h.renew(2 * time.Second)
	if h.linearizable() {
		t.Fatal("the model accepts a renewal decided past every reading of the store's clocks and the handle's estimate")
	}
}
