package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Lease keeping. The ledger decides ownership; the runner keeps its lease by renewing it
// before the window closes (timed on the monotonic clock), and losing it cancels the work's
// context. Every time the runner hands the ledger, and every ledger time it turns into a
// queue delay, is reckoned through the last grant it heard (leaseClock), never from its own
// wall clock.

// leaseClock reckons the ledger's time from a grant, so that no time this runner hands the
// ledger comes from its own wall clock: the ledger granted or renewed a lease for leaseFor at
// granted (its expiry less leaseFor) by its own clock, no sooner than sent by the runner's
// clock, and the runner's clock is trusted only for the time elapsed since (monotonic in
// production). granted and sent always come from the same request.
type leaseClock struct {
	lease    ledger.Lease // the lease held (after Save, the publishing lease)
	leaseFor time.Duration
	granted  time.Time
	sent     time.Time
}

func newLeaseClock(l ledger.Lease, leaseFor time.Duration, sent time.Time) leaseClock {
	return leaseClock{lease: l, leaseFor: leaseFor, granted: l.Expires.Add(-leaseFor), sent: sent}
}

// after is the ledger's time d from now: at least what the ledger's clock will read after d
// (the grant was made no sooner than sent).
func (r *Runner) after(c leaseClock, d time.Duration) time.Time {
	return c.granted.Add(r.now().Sub(c.sent)).Add(d)
}

// local is this runner's time when the ledger's clock reads at (such as a lease's end): the
// wait from the grant, added to the time the request for it was sent. A Result's RetryAt is
// always this runner's time, since the queue's delay is reckoned by this runner's clock.
func (c leaseClock) local(at time.Time) time.Time {
	return c.sent.Add(at.Sub(c.granted))
}

// decidedClock reckons the ledger's time from a Busy answer as leaseClock does from a grant:
// the ledger decided it at c.Decided by its clock, and this runner reads now on its own. A
// ledger that names no decision time has its retry time taken for this runner's.
func decidedClock(c ledger.Claim, now time.Time) leaseClock {
	if c.Decided.IsZero() {
		return leaseClock{granted: c.RetryAt, sent: c.RetryAt}
	}
	return leaseClock{granted: c.Decided, sent: now}
}

// retryAt is this runner's time for w: a wait from its now, or an instant on the ledger's
// clock reckoned through lc's grant.
func (r *Runner) retryAt(w when, lc leaseClock) time.Time {
	if w.clock == ledgerClock {
		return lc.local(w.at)
	}
	return r.now().Add(w.wait)
}

// keeper renews a lease until stopped; losing it cancels the work's context. Its fields are
// changed only by its own methods, each under mu: the renewals (held, renewed), the Save that
// swaps the executing lease for the publishing one (beginSave, endSave), and its end.
type keeper struct {
	mu    chan struct{} // guards the fields below
	lease ledger.Lease
	// granted and sent are the ledger's time of the last grant or renewal whose answer this
	// runner heard, and the runner's time just before it sent that request (leaseClock).
	granted, sent time.Time
	// gen changes when the lease is swapped (after Save): a renewal answered for an older
	// lease changes nothing.
	gen int
	// saving is set while a Save is in flight: a renewal of the executing lease that lands
	// after the Save is refused, and the Save's answer, not the refusal, decides.
	saving bool
	ending sync.Once
	lost   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

func (r *Runner) keep(ctx context.Context, cancel context.CancelFunc, lc leaseClock) *keeper {
	leaseFor := lc.leaseFor
	k := &keeper{mu: make(chan struct{}, 1), lease: lc.lease, granted: lc.granted, sent: lc.sent,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	every := r.RenewEvery
	if every <= 0 {
		every = max(leaseFor/3, time.Millisecond) // a ticker needs a positive interval
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(every) // tickers run on the monotonic clock
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Never past the invocation's deadline less the margin, as at the claim: a lease
			// left by an invocation killed at its deadline would hold off the next claim.
			d := r.leaseFor(ctx)
			if d <= 0 {
				continue // the lease granted last runs out by itself
			}
			cur, gen := k.held()
			sent := r.now()
			nl, err := r.Ledger.Renew(ctx, cur, d)
			select {
			case <-k.stop:
				return // halted meanwhile: the work has ended, and this answer decides nothing
			default:
			}
			if k.renewed(gen, nl, d, sent, err) {
				r.count("lease_lost")
				close(k.lost)
				cancel()
				return
			}
		}
	}()
	return k
}

func (k *keeper) lock()   { k.mu <- struct{}{} }
func (k *keeper) unlock() { <-k.mu }

// held is the lease to renew, and its generation, which renewed compares.
func (k *keeper) held() (ledger.Lease, int) {
	k.lock()
	defer k.unlock()
	return k.lease, k.gen
}

// renewed records the answer to a renewal of the lease held at generation gen, asked for d
// and sent at sent by the runner's clock, and reports whether it lost the lease. A grant moves
// the clock (the lease, granted and sent, from that one request) only when the lease was not
// swapped meanwhile. The lease is lost only when the ledger says so of the lease still held
// and no Save is in flight: a refusal for a swapped lease, or one that lands after a Save,
// decides nothing (the Save's answer does).
func (k *keeper) renewed(gen int, nl ledger.Lease, d time.Duration, sent time.Time, err error) bool {
	k.lock()
	defer k.unlock()
	current := gen == k.gen
	if err == nil && current {
		k.lease, k.granted, k.sent = nl, nl.Expires.Add(-d), sent
	}
	return errors.Is(err, ledger.ErrLeaseLost) && current && !k.saving
}

// beginSave marks a Save in flight under the kept lease, and answers the clock to save with:
// the lease held and its last grant heard. Until endSave, a renewal the ledger refuses as lost
// loses nothing (a renewal of the executing lease that lands after the Save is refused), and
// the keeper goes on renewing, so that a slow Save does not let the lease run out.
func (k *keeper) beginSave(leaseFor time.Duration) leaseClock {
	k.lock()
	defer k.unlock()
	k.saving = true
	return leaseClock{lease: k.lease, leaseFor: leaseFor, granted: k.granted, sent: k.sent}
}

// endSave ends the Save beginSave marked, and answers the clock to go on with. kept is the
// publishing lease of the verdict the Save kept (nil: it kept nothing, and lc, the clock the
// Save was made with, is answered as it is). From then on the keeper renews kept, and an
// answer to a renewal of the executing lease changes nothing; kept is reckoned through the
// last grant heard, since Save keeps the row's expiry, which a renewal whose answer was lost
// may have moved.
func (k *keeper) endSave(kept *ledger.Lease, lc leaseClock) leaseClock {
	k.lock()
	defer k.unlock()
	k.saving = false
	if kept != nil {
		k.lease = *kept
		k.gen++
		lc.lease, lc.granted, lc.sent = *kept, k.granted, k.sent
	}
	return lc
}

// clock is the kept lease with its last grant heard.
func (k *keeper) clock(leaseFor time.Duration) leaseClock {
	k.lock()
	defer k.unlock()
	return leaseClock{lease: k.lease, leaseFor: leaseFor, granted: k.granted, sent: k.sent}
}

func (k *keeper) isLost() bool {
	select {
	case <-k.lost:
		return true
	default:
		return false
	}
}

// halt tells the keeper to renew no more, without waiting for a renewal in flight, whose
// answer then changes nothing and counts nothing.
func (k *keeper) halt() {
	k.ending.Do(func() { close(k.stop) })
}

// end stops the renewals and waits for the keeper to be done.
func (k *keeper) end() {
	k.halt()
	<-k.done
}
