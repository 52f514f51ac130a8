package ledgertest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of claims and leases: one owner at a time, fences, expiry, saved results.

func caseLifecycle(e *env) {
	d := e.delivery(time.Time{})
	admitted := e.clock.Now()
	a := e.admit(d, ledger.Admitted)
	if a.Key != d.Key() || a.EvaluationID == "" || a.State != ledger.StatePending {
		e.t.Fatalf("admission %+v", a)
	}
	e.clock.Advance(time.Second)
	c := e.claim(d, "w1", ledger.Execute)
	if !c.Lease.AdmittedAt.Equal(admitted) {
		e.t.Fatalf("lease says admitted at %v, want %v", c.Lease.AdmittedAt, admitted)
	}
	if c.Lease.Fence == 0 || c.Lease.Attempt != 1 || c.Lease.EvaluationID != a.EvaluationID || c.Lease.Route != d.Binding.Route {
		e.t.Fatalf("lease %+v", c.Lease)
	}
	e.sameBytes("change", c.Lease.Change, d.Change)
	if r := e.row(d); r.State != ledger.StateRunning {
		e.t.Fatalf("state %v, want running", r.State)
	}
	s := e.save(*c.Lease, "verdict:success")
	if s.Lease.Phase != ledger.PhasePublish || s.Lease.Fence != c.Lease.Fence {
		e.t.Fatalf("staged lease %+v", s.Lease)
	}
	if r := e.row(d); r.State != ledger.StateSaved {
		e.t.Fatalf("state %v, want saved", r.State)
	}
	e.complete(s)
	if r := e.row(d); r.State != ledger.StateDone {
		e.t.Fatalf("state %v, want done", r.State)
	}
	e.claim(d, "w2", ledger.ClaimDuplicate)
	e.admit(d, ledger.Duplicate)
	st := e.stats()
	if st.Rows != 1 || st.ByState[ledger.StateDone] != 1 || st.CapacityUsed != 1 {
		e.t.Fatalf("stats %+v", st)
	}
}

func caseUnknownKeyIsAnError(e *env) {
	d := e.delivery(time.Time{})
	_, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), "w", lease)
	wantErr(e.t, "claim of an unknown key", err, ledger.ErrUnknownDelivery)
	_, err = e.l.Inspect(e.ctx, d.Key())
	wantErr(e.t, "inspect of an unknown key", err, ledger.ErrUnknownDelivery)
}

func caseInvariant1ConcurrentClaimsGrantOneOwner(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	var execs, busy atomic.Int32
	errs := make(chan error, 32)
	parallel(32, func(i int) {
		c, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), fmt.Sprintf("w%d", i), lease)
		if err != nil {
			errs <- err
			return
		}
		switch c.Outcome {
		case ledger.Execute:
			execs.Add(1)
		case ledger.Busy:
			busy.Add(1)
		default:
			errs <- fmt.Errorf("unexpected %v", c.Outcome)
		}
	})
	close(errs)
	for err := range errs {
		if errors.Is(err, ledger.ErrBusy) {
			busy.Add(1)
			continue
		}
		e.t.Fatalf("claim: %v", err)
	}
	if execs.Load() != 1 || busy.Load() != 31 {
		e.t.Fatalf("%d Execute and %d Busy of 32 claims, want 1 and 31", execs.Load(), busy.Load())
	}
	// The same holds for publishing: one saved row, 32 claimers after the lease ended.
	c := e.claim(d, "late", ledger.Busy)
	e.clock.Set(c.RetryAt)
	c = e.claim(d, "w", ledger.Execute)
	e.save(*c.Lease, "r")
	e.clock.Set(c.Lease.Expires)
	var pubs atomic.Int32
	parallel(32, func(i int) {
		c, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), fmt.Sprintf("p%d", i), lease)
		if err == nil && c.Outcome == ledger.Publish {
			pubs.Add(1)
		}
	})
	if pubs.Load() != 1 {
		e.t.Fatalf("%d Publish grants of 32 claims, want 1", pubs.Load())
	}
}

func caseInvariant2FencesGrowAcrossReopen(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	var last uint64
	for i := range 5 {
		c := e.claim(d, "w", ledger.Execute)
		if c.Lease.Fence <= last {
			e.t.Fatalf("claim %d: fence %d not above %d", i, c.Lease.Fence, last)
		}
		last = c.Lease.Fence
		if i%2 == 0 {
			if err := e.l.Release(e.ctx, *c.Lease, time.Time{}); err != nil {
				e.t.Fatalf("release: %v", err)
			}
		} else {
			e.clock.Advance(lease)
		}
		e.reopen()
	}
	c := e.claim(d, "w", ledger.Execute)
	s := e.save(*c.Lease, "r")
	e.clock.Advance(lease)
	e.reopen()
	p := e.claim(d, "p", ledger.Publish)
	if p.Staged.Lease.Fence <= s.Lease.Fence {
		e.t.Fatalf("publish fence %d not above %d", p.Staged.Lease.Fence, s.Lease.Fence)
	}
}

func caseInvariant3ForgedExpiryIsRefused(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	forged := *c.Lease
	forged.Expires = forged.Expires.Add(24 * time.Hour)
	e.clock.Advance(lease + time.Second)
	_, err := e.l.Save(e.ctx, forged, []byte("r"))
	wantErr(e.t, "save with forged expiry", err, ledger.ErrLeaseLost)
	_, err = e.l.Renew(e.ctx, forged, lease)
	wantErr(e.t, "renew with forged expiry", err, ledger.ErrLeaseLost)
	// A forged fence is refused too.
	c = e.claim(d, "w2", ledger.Execute)
	forged = *c.Lease
	forged.Fence += 7
	_, err = e.l.Save(e.ctx, forged, []byte("r"))
	wantErr(e.t, "save with forged fence", err, ledger.ErrLeaseLost)
}

func caseInvariant4ExpiredOwnerCannotSave(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	e.clock.Set(c.Lease.Expires) // the expiry instant itself is no longer owned
	_, err := e.l.Save(e.ctx, *c.Lease, []byte("late"))
	wantErr(e.t, "save at expiry, nobody else claimed", err, ledger.ErrLeaseLost)
	if r := e.row(d); r.State != ledger.StateRunning || !r.Report.IsZero() {
		e.t.Fatalf("refused save left state %v report %+v", r.State, r.Report)
	}
	// The next claimer executes afresh, with the next attempt number.
	n := e.claim(d, "w2", ledger.Execute)
	if n.Lease.Attempt != 2 {
		e.t.Fatalf("attempt %d, want 2", n.Lease.Attempt)
	}
	_, err = e.l.Save(e.ctx, *c.Lease, []byte("late"))
	wantErr(e.t, "save by the old owner after takeover", err, ledger.ErrLeaseLost)
}

func caseInvariant5SavedResultIsPublishedWithIdenticalBytes(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	report := []byte("{\"state\":\"failure\",\"description\":\"bytes \x00\xff kept\"}")
	if _, err := e.l.Save(e.ctx, *c.Lease, report); err != nil {
		e.t.Fatalf("save: %v", err)
	}
	e.clock.Advance(lease) // the saver dies before publishing
	for i := range 3 {
		e.reopen()
		p := e.claim(d, fmt.Sprintf("p%d", i), ledger.Publish)
		e.sameBytes("staged report", p.Staged.Report, report)
		e.sameBytes("publishing lease's change", p.Staged.Lease.Change, d.Change)
		if p.EvaluationID != c.Lease.EvaluationID {
			e.t.Fatalf("evaluation id changed: %s, was %s", p.EvaluationID, c.Lease.EvaluationID)
		}
		if p.Staged.Lease.Attempt != i+1 {
			e.t.Fatalf("publish attempt %d, want %d", p.Staged.Lease.Attempt, i+1)
		}
		e.clock.Set(p.Staged.Lease.Expires)
	}
	p := e.claim(d, "last", ledger.Publish)
	e.complete(*p.Staged)
	e.claim(d, "after", ledger.ClaimDuplicate)
}

func caseInvariant6CompletionIsRepeatableAndGrantsNothing(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	s := e.save(*c.Lease, "r")
	e.complete(s)
	before := e.row(d)
	for range 3 {
		e.complete(s)
	}
	e.clock.Advance(48 * time.Hour)
	e.reopen()
	e.complete(s)
	after := e.row(d)
	if after.State != ledger.StateDone || after.Fence != before.Fence {
		e.t.Fatalf("repeated complete changed the row: %+v -> %+v", before, after)
	}
	for i := range 3 {
		dup := e.claim(d, fmt.Sprintf("w%d", i), ledger.ClaimDuplicate)
		if dup.EvaluationID != before.EvaluationID || dup.Lease != nil || dup.Staged != nil {
			e.t.Fatalf("duplicate claim granted work: %+v", dup)
		}
	}
	e.admit(d, ledger.Duplicate)
}

func caseInvariant8FreshEvaluationIDPerRow(e *env) {
	signed := e.clock.Now()
	d := e.delivery(signed)
	a1 := e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	old := e.save(*c.Lease, "r")
	e.complete(old)
	e.clock.Set(a1.RetainUntil.Add(e.tick()))
	if !removedKeys(e.cleanAll())[d.Key()] {
		e.t.Fatalf("ended row not removed")
	}
	// The same identity, signed again later (a sender reusing ids), makes a new row.
	d.SignedAt = e.clock.Now()
	a2 := e.admit(d, ledger.Admitted)
	if a2.EvaluationID == a1.EvaluationID {
		e.t.Fatalf("re-created row reused evaluation id %s", a1.EvaluationID)
	}
	err := e.l.Complete(e.ctx, old)
	wantErr(e.t, "complete of the forgotten row's staged result", err, ledger.ErrLeaseLost)
	if r := e.row(d); r.State != ledger.StatePending {
		e.t.Fatalf("old staged result touched the new row: %v", r.State)
	}
	seen := map[string]bool{}
	for range 20 {
		a := e.admit(e.delivery(time.Time{}), ledger.Admitted)
		if seen[a.EvaluationID] {
			e.t.Fatalf("evaluation id %s repeated", a.EvaluationID)
		}
		seen[a.EvaluationID] = true
	}
}

func caseExpiredOwnerCannotRenewButLivePublishLeaseCan(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	l, err := e.l.Renew(e.ctx, *c.Lease, 2*lease)
	if err != nil {
		e.t.Fatalf("renew live lease: %v", err)
	}
	e.clock.Advance(lease + time.Second) // past the first expiry, inside the renewed one
	s, err := e.l.Save(e.ctx, l, []byte("r"))
	if err != nil {
		e.t.Fatalf("save under renewed lease: %v", err)
	}
	// A live publishing lease makes a second claimer Busy, and can be renewed.
	b := e.claim(d, "other", ledger.Busy)
	if b.RetryAt.Before(e.clock.Now()) {
		e.t.Fatalf("busy retryAt %v is in the past", b.RetryAt)
	}
	if !b.Decided.Equal(e.clock.Now()) {
		e.t.Fatalf("busy decided at %v, want the ledger's now %v (the wait is RetryAt less Decided)", b.Decided, e.clock.Now())
	}
	e.clock.Set(b.RetryAt.Add(-time.Second))
	pl, err := e.l.Renew(e.ctx, s.Lease, lease)
	if err != nil {
		e.t.Fatalf("renew publishing lease: %v", err)
	}
	e.clock.Set(b.RetryAt.Add(time.Second))
	b2 := e.claim(d, "other", ledger.Busy)
	if !b2.RetryAt.After(b.RetryAt) {
		e.t.Fatalf("renewal did not move retryAt: %v then %v", b.RetryAt, b2.RetryAt)
	}
	s.Lease = pl
	e.complete(s)
	// Renewing after completion is a lost lease.
	_, err = e.l.Renew(e.ctx, pl, lease)
	wantErr(e.t, "renew after complete", err, ledger.ErrLeaseLost)
}

func caseReleaseHandsBackEarlyAndHoldsOffUntilNotBefore(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	notBefore := e.clock.Now().Add(5 * time.Second)
	if err := e.l.Release(e.ctx, *c.Lease, notBefore); err != nil {
		e.t.Fatalf("release: %v", err)
	}
	b := e.claim(d, "w2", ledger.Busy)
	if !b.RetryAt.Equal(notBefore) {
		e.t.Fatalf("retryAt %v, want %v", b.RetryAt, notBefore)
	}
	if wait := b.RetryAt.Sub(b.Decided); wait != 5*time.Second {
		e.t.Fatalf("busy wait (RetryAt less Decided) %v, want 5s", wait)
	}
	_, err := e.l.Save(e.ctx, *c.Lease, []byte("r"))
	wantErr(e.t, "save after release", err, ledger.ErrLeaseLost)
	e.clock.Set(notBefore)
	n := e.claim(d, "w2", ledger.Execute)
	err = e.l.Release(e.ctx, *c.Lease, time.Time{})
	wantErr(e.t, "release with a stale fence", err, ledger.ErrLeaseLost)
	// A publishing lease can be released too.
	s := e.save(*n.Lease, "r")
	if err := e.l.Release(e.ctx, s.Lease, time.Time{}); err != nil {
		e.t.Fatalf("release publishing lease: %v", err)
	}
	p := e.claim(d, "p", ledger.Publish)
	e.sameBytes("report", p.Staged.Report, []byte("r"))
}

// caseUnclaimHandsBackTheAttempt: a holder cut before its attempt decided anything (a
// shutdown) hands the attempt back with its lease; a Release keeps it counted. Unclaim is
// fenced: repeated, or landing after another grant, it hands nothing back.
func caseUnclaimHandsBackTheAttempt(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	if c.Lease.Attempt != 1 {
		e.t.Fatalf("first grant: attempt %d", c.Lease.Attempt)
	}
	if err := e.l.Unclaim(e.ctx, *c.Lease, time.Time{}); err != nil {
		e.t.Fatalf("unclaim: %v", err)
	}
	err := e.l.Unclaim(e.ctx, *c.Lease, time.Time{})
	wantErr(e.t, "unclaim repeated", err, ledger.ErrLeaseLost)
	c2 := e.claim(d, "w2", ledger.Execute)
	if c2.Lease.Attempt != 1 || c2.Lease.Failures != 0 {
		e.t.Fatalf("grant after an unclaim: attempt %d with %d failures, want 1 with 0 (handed back, no failure)",
			c2.Lease.Attempt, c2.Lease.Failures)
	}
	err = e.l.Unclaim(e.ctx, *c.Lease, time.Time{})
	wantErr(e.t, "unclaim of a lease granted before the current one", err, ledger.ErrLeaseLost)
	if err := e.l.Release(e.ctx, *c2.Lease, time.Time{}); err != nil {
		e.t.Fatalf("release: %v", err)
	}
	c3 := e.claim(d, "w3", ledger.Execute)
	if c3.Lease.Attempt != 2 || c3.Lease.Failures != 1 {
		e.t.Fatalf("grant after a release: attempt %d with %d failures, want 2 with 1 (a release is a failed attempt)",
			c3.Lease.Attempt, c3.Lease.Failures)
	}
	if r := e.row(d); r.Attempts != 2 || r.Failures != 1 {
		e.t.Fatalf("row counts %d attempts and %d failures, want 2 and 1", r.Attempts, r.Failures)
	}
	// The publishing phase hands back its own count.
	s := e.save(*c3.Lease, "r")
	if err := e.l.Release(e.ctx, s.Lease, time.Time{}); err != nil {
		e.t.Fatalf("release publishing lease: %v", err)
	}
	p1 := e.claim(d, "p", ledger.Publish)
	if err := e.l.Unclaim(e.ctx, p1.Staged.Lease, time.Time{}); err != nil {
		e.t.Fatalf("unclaim publishing lease: %v", err)
	}
	p2 := e.claim(d, "p2", ledger.Publish)
	if p2.Staged.Lease.Attempt != p1.Staged.Lease.Attempt {
		e.t.Fatalf("publish grant after an unclaim: attempt %d, want %d", p2.Staged.Lease.Attempt, p1.Staged.Lease.Attempt)
	}
	e.sameBytes("report", p2.Staged.Report, []byte("r"))
}

func caseRepeatedSaveAnswersTheSameStagedResult(e *env) {
	d := e.delivery(time.Time{})
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	s1 := e.save(*c.Lease, "r")
	s2 := e.save(*c.Lease, "r")
	if s1.Lease.Fence != s2.Lease.Fence || string(s2.Report) != "r" {
		e.t.Fatalf("repeated save: %+v vs %+v", s1, s2)
	}
	_, err := e.l.Save(e.ctx, *c.Lease, []byte("a different verdict"))
	wantErr(e.t, "save of a different report", err, ledger.ErrLeaseLost)
	p := e.row(d)
	if p.Report.Digest != ledger.SumBody([]byte("r")) {
		e.t.Fatalf("saved report changed")
	}
}

func caseAbandonedRowAnswersDuplicate(e *env) {
	d := e.delivery(e.clock.Now())
	a := e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	s := e.save(*c.Lease, "r")
	if err := e.l.Abandon(e.ctx, s, "provider answered 404"); err != nil {
		e.t.Fatalf("abandon: %v", err)
	}
	if err := e.l.Abandon(e.ctx, s, "again"); err != nil {
		e.t.Fatalf("repeated abandon: %v", err)
	}
	r := e.row(d)
	if r.State != ledger.StateAbandoned || r.Reason != "provider answered 404" {
		e.t.Fatalf("row %v reason %q", r.State, r.Reason)
	}
	e.claim(d, "w2", ledger.ClaimDuplicate)
	e.admit(d, ledger.Duplicate)
	// An abandon needs the live publishing lease.
	d2 := e.delivery(time.Time{})
	e.admit(d2, ledger.Admitted)
	c2 := e.claim(d2, "w", ledger.Execute)
	s2 := e.save(*c2.Lease, "r")
	e.clock.Advance(lease)
	wantErr(e.t, "abandon under an ended lease", e.l.Abandon(e.ctx, s2, "late"), ledger.ErrLeaseLost)
	// Abandoned rows are cleaned like done ones.
	e.clock.Set(a.RetainUntil)
	if removedKeys(e.cleanAll())[d.Key()] {
		e.t.Fatalf("abandoned row removed at the end instant of its retention")
	}
	e.clock.Set(a.RetainUntil.Add(e.tick()))
	if !removedKeys(e.cleanAll())[d.Key()] || !e.gone(d) {
		e.t.Fatalf("abandoned row past retention not removed")
	}
}
