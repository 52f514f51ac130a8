package ledgertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestModelRefusesAReplayAdmittedAfterItsRowWasForgotten: the model judges freshness
// from the bounds of each call's own clock readings, and keeps no time in its state, so a call
// that overlaps a removal may be linearized after it and still be judged fresh at a time
// before it. The history below is the one a held reservation PUT produces on the S3 ledger
// (objstore TestHeldReservationDoesNotReadmitAForgottenDelivery):
//
//	client 1: admit(d signed at 0) called at 4m ....................... returns Admitted e2
//	client 2:   admit(d) Admitted e1, execute, save, complete (at 4m)
//	cleaner:    remove e1 (at 66m: retention 65m is over; the high-water says d is stale)
//	client 2:                                                                  claim: Execute e2
//
// d is evaluated twice (e1 and e2); every linearization puts client 1's admission after the
// removal, at a ledger time past 66m where d is stale. The model must refuse it.
func TestModelRefusesAReplayAdmittedAfterItsRowWasForgotten(t *testing.T) {
	var ops []porcupine.Operation
	add := func(client int, call, ret int64, lo, hi time.Duration, o Op) {
		o.Key, o.Client, o.Call, o.Return, o.Lo, o.Hi = mkey, client, call, ret, at(lo), at(hi)
		ops = append(ops, porcupine.Operation{ClientId: client, Input: o, Output: o, Call: call, Return: ret})
	}
	retain := at(5*time.Minute + time.Hour)
	add(1, 0, 100, 4*time.Minute, 66*time.Minute,
		Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "admitted", OutEval: "e2", RetainUntil: retain})
	add(2, 1, 2, 4*time.Minute, 4*time.Minute,
		Op{Kind: OpAdmit, SignedAt: at(0), Outcome: "admitted", OutEval: "e1", RetainUntil: retain})
	add(2, 3, 4, 4*time.Minute, 4*time.Minute, execute(1, 4*time.Minute))
	add(2, 5, 6, 4*time.Minute, 4*time.Minute, save(1, "r"))
	add(2, 7, 8, 4*time.Minute, 4*time.Minute, Op{Kind: OpComplete, Eval: "e1", Report: "r"})
	add(3, 9, 10, 66*time.Minute, 66*time.Minute, Op{Kind: OpRemove, Eval: "e1"})
	add(2, 101, 102, 66*time.Minute, 66*time.Minute,
		Op{Kind: OpClaim, LeaseFor: lf, Outcome: "execute", OutEval: "e2", OutFence: 1, Expires: at(66*time.Minute + lf)})
	if porcupine.CheckOperations(Model(Limits(), 0, 0), ops) {
		t.Fatal("the model accepts a signed delivery admitted and evaluated again after its row was removed as stale: " +
			"freshness is judged by the call's own clock bounds, not at a ledger time after the removal it is ordered after")
	}
}
