// Package catchup asks providers again for the webhook deliveries that never reached the
// ledger. Providers do not redeliver a failed delivery on their own (GitHub, GitLab); they
// keep each attempt for a while and redeliver one on request. A run lists a hook's attempts
// since its cursor, finds the deliveries whose attempts all failed (no answer, or not a 2xx,
// short of a refusal of the body a redelivery would meet again: Attempt.Settles), and asks
// once for each one again; a redelivery is an ordinary webhook, which the ingress
// authenticates and the ledger deduplicates (a delivery the ledger already holds is answered
// duplicate, so asking for one that was admitted although its answer was lost is harmless).
//
// Guarantees, for each hook, whatever runs overlap, crash or are held:
//
//   - A delivery is asked for at most once per run, and never by two runs: an ask is recorded
//     in the hook's cursor (a ledger.StateStore record, written only on the version read)
//     before its request is sent, and a run that loses the write reads the cursor again and
//     skips what another run recorded. A run that dies between recording asks and sending them
//     costs those deliveries one ReaskAfter, never a second ask.
//   - A delivery is asked for again, while no attempt of it has succeeded, once its last ask is
//     ReaskAfter old (by the clocks of the hosts that run catch-up, which should agree within
//     a fraction of it).
//   - A delivery still failing when the provider's window closes (measured from its first
//     attempt) is reported lost, once: a log line with its id, event and repository, and the
//     given-up count. So is one the provider refuses to redeliver.
//   - A run is bounded in time (MaxRunTime), in requests for redelivery (MaxAsks) and in pages
//     listed (MaxPages). A run that cannot read back to where the last one left off within
//     MaxPages goes on from what it read and reports the span of attempts it did not read (a
//     log line with its bounds, counted as one given up): no later run could read it.
//   - A provider failing a redelivery request (a 5xx, no answer) ends the run's asks. A
//     provider asking a run to wait (Retry-After, a rate limit's reset) ends the run; the
//     wait is kept in the cursor, and runs before it ends send the provider nothing (by this
//     host's clock, at most providerapi.MaxProviderWait). The asks recorded and not sent are
//     handed back, so the next run asks for them, once.
package catchup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/ledger"
)

// Attempt is one attempt a provider made to deliver an event to a hook.
type Attempt struct {
	// ID is the provider's id of this attempt: what a redelivery request names.
	ID string
	// Delivery ties the attempts of one delivery together (GitHub's GUID, GitLab's
	// Idempotency-Key): a redelivery is a new attempt of the same delivery.
	Delivery string
	// At is when the provider made the attempt, by its clock.
	At time.Time
	// StatusCode is what the endpoint answered (0: nothing, it timed out or was unreachable).
	StatusCode int
	// Event and Repository say what the delivery was about, for operators.
	Event, Repository string
}

// Succeeded reports whether the endpoint took the attempt (a 2xx).
func (a Attempt) Succeeded() bool { return a.StatusCode/100 == 2 }

// Settles reports whether the attempt settles its delivery: the endpoint took it, or refused
// it by the route's policy or the ledger's limits for what its body holds, as amiss's
// ingress answers a repository or an API the route does not take (403), a delivery id it
// holds with another body (409), a body or a change too large (413). A redelivery sends the
// same body, which meets the same answer: asking for one cannot help. Every other answer
// (none, a 5xx, a 401 of a signature made with a secret being rotated, a 404 of a route being
// deployed, a 429 of a throttled stage, a 400 of a body the ingress could not read, which is
// also what a broken release answers every webhook until it is fixed) may go otherwise
// another time.
func (a Attempt) Settles() bool {
	switch a.StatusCode {
	case http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge:
		return true
	}
	return a.Succeeded()
}

// Source is one webhook whose attempts a provider lists.
type Source interface {
	// Name names the hook's cursor; it passes ledger.CheckState.
	Name() string
	// Describe names the hook for operators (the route, the provider and the hook).
	Describe() string
	// Window is how long after a delivery's first attempt the provider redelivers it.
	Window() time.Duration
	// Attempts hands the hook's attempts, newest first, a page at a time, to visit, which says
	// whether to read on; at most maxPages pages, then ErrListingCut if there are more.
	Attempts(ctx context.Context, maxPages int, visit func([]Attempt) (more bool, err error)) error
	// Redeliver asks the provider to deliver a's delivery again. A *providerapi.Error says
	// how it failed: Permanent is the provider's refusal for this delivery (too old).
	Redeliver(ctx context.Context, a Attempt) error
}

// ErrListingCut is what Source.Attempts answers when it stopped at its page bound while the
// provider had more: the run goes on with what it read, its cursor moves on from there, and
// the attempts older than those it read, back to where the last run left off, are reported
// not read.
var ErrListingCut = errors.New("catchup: the listing has more pages than one run reads")

// Defaults of a run.
const (
	DefaultMaxRunTime = 2 * time.Minute
	DefaultMaxAsks    = 100
	DefaultMaxPages   = 20
	DefaultReaskAfter = 15 * time.Minute
	// overlap is how far before the cursor a run lists again, for attempts the provider
	// records late or out of order.
	overlap = 10 * time.Minute
	// askBatch is how many asks one cursor write records before their requests are sent.
	askBatch = 10
	// maxOpen bounds the deliveries a cursor follows (its size: each is about 200 bytes).
	maxOpen = 1000
	// casTries bounds the retries of one cursor update lost to other runs.
	casTries = 20
)

// Runner runs catch-up for hooks. Set its fields before use; it is safe for concurrent use.
type Runner struct {
	// State keeps the cursors (the ledger).
	State ledger.StateStore
	// Now is this host's clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger
	// Metrics receives, per run, catchup_found_failed, catchup_redelivered and
	// catchup_given_up (counts). Nil: none.
	Metrics interface {
		Gauge(name string, v float64, unit string)
	}
	// RunID names this run in the cursor (default: the time and a random suffix).
	RunID string
	// MaxRunTime, MaxAsks, MaxPages and ReaskAfter bound a run (defaults above). ReaskAfter
	// must exceed MaxRunTime plus the time the provider takes to list a new attempt.
	MaxRunTime time.Duration
	MaxAsks    int
	MaxPages   int
	ReaskAfter time.Duration
	// Lookback is how far back a hook's first run lists (default and ceiling: the window).
	Lookback time.Duration
}

// Report is what one run did for one hook, as the cursor keeps the last one.
type Report struct {
	Hook  string    `json:"hook"`
	RunID string    `json:"run"`
	At    time.Time `json:"at"`
	// Listed counts the attempts read; Found the deliveries newly found failed; Asked the
	// redeliveries asked for (sent, or whose sending may have applied); Resolved the
	// followed deliveries seen settled (Attempt.Settles); Lost those given up, and a span of
	// attempts not read as one; Open those still followed.
	Listed, Found, Asked, Resolved, Lost, Open int
	// Cut: the listing stopped before the cursor: at its page bound (the cursor moved on
	// from what was read, and UnreadFrom and UnreadTo say what was not), or for time or an
	// error (the cursor did not move: the next run reads it again).
	Cut bool `json:",omitempty"`
	// UnreadFrom and UnreadTo (both included) bound the attempts a run cut at its page bound
	// did not read, by their time: failed deliveries among them are not followed. Lost counts
	// the span as one, except on a hook's first run (whose reach is only its lookback).
	UnreadFrom time.Time `json:",omitzero"`
	UnreadTo   time.Time `json:",omitzero"`
	Error      string    `json:",omitempty"`
	// WaitUntil is the wait the provider asked for, which this run was told of or kept:
	// no request is sent to it before then.
	WaitUntil time.Time `json:",omitzero"`
}

// Cursor is a hook's persisted catch-up state.
type Cursor struct {
	// Through is the newest attempt time every attempt up to which was judged.
	Through time.Time `json:"through"`
	// Open lists the deliveries found failed and not yet seen succeeding, by delivery.
	Open map[string]*Open `json:"open,omitempty"`
	// Last is the last run's report.
	Last *Report `json:"last,omitempty"`
	// WaitUntil: the provider asked to wait until then (a rate limit), by the clock of the
	// host told; runs before it send it nothing, unless it is further ahead than
	// providerapi.MaxProviderWait (a host clock that ran ahead).
	WaitUntil time.Time `json:"wait_until,omitzero"`
}

// Open is a failed delivery the cursor follows.
type Open struct {
	// First is its first attempt seen (the window runs from it); Newest its newest attempt
	// seen, which a redelivery request names, and NewestAt when that was made.
	First    time.Time `json:"first"`
	Newest   string    `json:"newest"`
	NewestAt time.Time `json:"newest_at"`
	Status   int       `json:"status"`
	Event    string    `json:"event,omitempty"`
	Repo     string    `json:"repo,omitempty"`
	// AskedAt is when a redelivery was last recorded as asked, by AskedRun; Asks counts them.
	AskedAt  time.Time `json:"asked_at,omitzero"`
	AskedRun string    `json:"asked_run,omitempty"`
	Asks     int       `json:"asks,omitempty"`
	// Refused: the provider refused to redeliver it (too old): it is lost.
	Refused bool `json:"refused,omitempty"`
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func orDefault[T int | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// ReadCursor reads a hook's cursor and its version (empty: none yet).
func ReadCursor(ctx context.Context, st ledger.StateStore, name string) (Cursor, string, error) {
	rec, err := st.ReadState(ctx, name)
	if err != nil || rec.Version == "" {
		return Cursor{Open: map[string]*Open{}}, rec.Version, err
	}
	var c Cursor
	dec := json.NewDecoder(bytes.NewReader(rec.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Cursor{}, "", fmt.Errorf("%w: catch-up cursor %s does not decode: %v", ledger.ErrCorrupt, name, err)
	}
	if c.Open == nil {
		c.Open = map[string]*Open{}
	}
	return c, rec.Version, nil
}

// update applies change to the hook's cursor and writes it on the version read, again from a
// fresh read each time another run wrote first. change must decide from the cursor it is
// given alone (it may run several times); it returns false to write nothing.
func (r *Runner) update(ctx context.Context, name string, change func(c *Cursor) bool) error {
	for try := 0; ; try++ {
		c, version, err := ReadCursor(ctx, r.State, name)
		if err != nil {
			return err
		}
		if !change(&c) {
			return nil
		}
		data, err := json.Marshal(c)
		if err != nil {
			return err
		}
		_, err = r.State.WriteState(ctx, name, data, version)
		if !errors.Is(err, ledger.ErrConflict) || try+1 >= casTries {
			return err
		}
	}
}

// Run catches one hook up. It returns the run's report and an error when the run could not
// list the hook, read or write its cursor, or was refused by the provider (a credential or a
// permission to fix); what it recorded stands.
func (r *Runner) Run(ctx context.Context, src Source) (Report, error) {
	start := r.now()
	runID := r.RunID
	if runID == "" {
		runID = fmt.Sprintf("%s-%04x", start.UTC().Format("20060102T150405Z"), start.UnixNano()&0xffff)
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(r.MaxRunTime, DefaultMaxRunTime))
	defer cancel()
	rep := Report{Hook: src.Describe(), RunID: runID, At: start}
	name := src.Name()
	window := src.Window()
	reask := orDefault(r.ReaskAfter, DefaultReaskAfter)

	cur, _, err := ReadCursor(ctx, r.State, name)
	if err != nil {
		return r.finish(ctx, name, rep, err)
	}
	if waiting(cur, start) {
		rep.WaitUntil = cur.WaitUntil
		return r.finish(ctx, name, rep, nil)
	}
	// List back to the cursor (less an overlap), or the lookback on a first run.
	lookback := window
	if r.Lookback > 0 && r.Lookback < window {
		lookback = r.Lookback
	}
	stop := start.Add(-lookback)
	if !cur.Through.IsZero() && cur.Through.Add(-overlap).After(stop) {
		stop = cur.Through.Add(-overlap)
	}
	var seen []Attempt
	reached := false
	lerr := src.Attempts(ctx, orDefault(r.MaxPages, DefaultMaxPages), func(page []Attempt) (bool, error) {
		old := 0
		for _, a := range page {
			if a.At.Before(stop) {
				old++ // judged by an earlier run
				continue
			}
			seen = append(seen, a)
		}
		if old > 0 {
			// The listing, newest first, reached the cursor: every later page is older still
			// (attempts recorded late or out of order are what the overlap is for).
			reached = true
			return false, nil
		}
		return len(page) > 0, nil
	})
	if lerr == nil && !reached {
		// The listing ended (no next page): everything the provider keeps was read.
		reached = true
	}
	var ferr error
	// outrun: the listing stopped at its page bound with more pages to go. Later runs would
	// page from the newest attempt again and reach less far each time, as attempts keep
	// coming: what this run did not read, no run reads. So the cursor moves on from what it
	// read, and the span it could not read is reported.
	outrun := errors.Is(lerr, ErrListingCut) && len(seen) > 0
	if lerr != nil {
		// A listing that failed on the way says nothing of what it missed: the next run reads
		// it again.
		switch wait := r.waitOf(lerr); {
		case wait > 0:
			rep.WaitUntil = r.now().Add(wait)
			r.log().Warn("catch-up: the provider asks to wait; no request is sent to it before then", "hook", src.Describe(),
				"wait_until", rep.WaitUntil, "error", lerr)
		case !errors.Is(lerr, ErrListingCut):
			ferr = fmt.Errorf("list the deliveries of %s: %w", src.Describe(), lerr)
		}
		reached = false
	}
	rep.Listed, rep.Cut = len(seen), !reached
	if providerapi.ClassOf(lerr) == providerapi.Operator {
		return r.finish(ctx, name, rep, ferr)
	}
	byDelivery := map[string][]Attempt{}
	newest := cur.Through
	var oldest time.Time // the oldest attempt read
	for _, a := range seen {
		byDelivery[a.Delivery] = append(byDelivery[a.Delivery], a)
		if a.At.After(newest) {
			newest = a.At
		}
		if oldest.IsZero() || a.At.Before(oldest) {
			oldest = a.At
		}
	}

	// Merge what was listed into the cursor, find what to ask for, and give up what is lost.
	var lost []Open
	var keys []string
	var unreadCounted bool
	now := r.now()
	err = r.update(ctx, name, func(c *Cursor) bool {
		lost, keys = nil, nil
		rep.UnreadFrom, rep.UnreadTo, unreadCounted = time.Time{}, time.Time{}, false
		found, resolved := 0, 0
		for d, as := range byDelivery {
			o := c.Open[d]
			if slices.ContainsFunc(as, Attempt.Settles) {
				if o != nil {
					delete(c.Open, d)
					resolved++
				}
				continue
			}
			newestA := slices.MaxFunc(as, func(a, b Attempt) int { return a.At.Compare(b.At) })
			oldestA := slices.MinFunc(as, func(a, b Attempt) int { return a.At.Compare(b.At) })
			if o == nil {
				if len(c.Open) >= maxOpen {
					continue // followed next run, once room is made: the cursor does not move past it
				}
				o = &Open{First: oldestA.At, Event: oldestA.Event, Repo: oldestA.Repository}
				c.Open[d] = o
				found++
			}
			if oldestA.At.Before(o.First) {
				o.First = oldestA.At
			}
			if newestA.At.After(o.NewestAt) || o.Newest == "" {
				o.Newest, o.NewestAt, o.Status = newestA.ID, newestA.At, newestA.StatusCode
			}
		}
		for d, o := range c.Open {
			if o.Refused || now.Sub(o.First) > window {
				lost = append(lost, *o)
				keys = append(keys, d)
				delete(c.Open, d)
			}
		}
		if (reached || outrun) && len(c.Open) < maxOpen && newest.After(c.Through) {
			if outrun && oldest.After(c.Through) {
				// Not read: from where the last run left off (a first run: its lookback)
				// to the oldest attempt read, both included (attempts of one second).
				rep.UnreadFrom, rep.UnreadTo, unreadCounted = c.Through, oldest, !c.Through.IsZero()
				if c.Through.IsZero() {
					rep.UnreadFrom = stop
				}
			}
			c.Through = newest
		}
		rep.Found, rep.Resolved, rep.Open = found, resolved, len(c.Open)
		return true
	})
	if err != nil {
		return r.finish(ctx, name, rep, errors.Join(ferr, err))
	}
	if !rep.UnreadTo.IsZero() {
		r.log().Warn("catch-up could not read a span of the hook's attempts: more were made since the last run than a run reads; "+
			"failed deliveries among them are not redelivered: find them on the provider's page of the hook and redeliver them by hand",
			"hook", src.Describe(), "unread_from", rep.UnreadFrom, "unread_to", rep.UnreadTo, "pages", orDefault(r.MaxPages, DefaultMaxPages),
			"first_run", !unreadCounted)
		if unreadCounted {
			rep.Lost++
		}
	}
	for i, o := range lost {
		r.log().Warn("catch-up gave up a delivery: still failing when the provider's redelivery window closed; deliver it by hand",
			"hook", src.Describe(), "delivery", keys[i], "attempt", o.Newest, "event", o.Event, "repository", o.Repo,
			"first_attempt", o.First, "last_status", o.Status, "asks", o.Asks, "refused", o.Refused)
	}
	rep.Lost += len(lost)

	// Ask, a batch at a time: record the batch's asks, then send them.
	budget := orDefault(r.MaxAsks, DefaultMaxAsks)
	for budget > 0 && ctx.Err() == nil && rep.WaitUntil.IsZero() {
		var batch []string
		var targets []Attempt
		err := r.update(ctx, name, func(c *Cursor) bool {
			batch, targets = nil, nil
			for _, d := range askable(c, now, reask) {
				if len(batch) == min(askBatch, budget) {
					break
				}
				o := c.Open[d]
				o.AskedAt, o.AskedRun = now, runID
				o.Asks++
				batch = append(batch, d)
				targets = append(targets, Attempt{ID: o.Newest, Delivery: d, Event: o.Event, Repository: o.Repo})
			}
			return len(batch) > 0
		})
		if err != nil {
			return r.finish(ctx, name, rep, errors.Join(ferr, err))
		}
		if len(batch) == 0 {
			break
		}
		budget -= len(batch)
		sent, stopErr := r.send(ctx, src, targets, &rep)
		if sent < len(targets) {
			// Hand back the asks recorded and never sent, when they are still this run's.
			unsent := batch[sent:]
			if err := r.update(ctx, name, func(c *Cursor) bool {
				changed := false
				for _, d := range unsent {
					if o := c.Open[d]; o != nil && o.AskedRun == runID && o.AskedAt.Equal(now) {
						o.AskedAt, o.AskedRun = time.Time{}, ""
						o.Asks--
						changed = true
					}
				}
				return changed
			}); err != nil {
				stopErr = errors.Join(stopErr, err)
			}
		}
		if stopErr != nil {
			return r.finish(ctx, name, rep, errors.Join(ferr, stopErr))
		}
		if sent < len(targets) {
			break // the provider asked to wait, or failed: the rest is a later run's
		}
	}
	return r.finish(ctx, name, rep, ferr)
}

// askable lists the followed deliveries a run may ask for now, oldest first: never asked, or
// asked ReaskAfter ago or more (its redelivery failed too, was lost, or its run died before
// sending it). An ask recorded by a run still at work is younger than that.
func askable(c *Cursor, now time.Time, reask time.Duration) []string {
	var out []string
	for d, o := range c.Open {
		switch {
		case o.Refused:
		case o.AskedAt.IsZero(), now.Sub(o.AskedAt) >= reask:
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := c.Open[out[i]], c.Open[out[j]]
		if !a.First.Equal(b.First) {
			return a.First.Before(b.First)
		}
		return out[i] < out[j]
	})
	return out
}

// send sends the batch's requests in order and returns how many were sent (their outcome
// known or not). A refusal of one delivery marks it refused; a wait the provider asks for, or
// the provider failing, stops the batch; a credential or permission refused stops the run
// with its error.
func (r *Runner) send(ctx context.Context, src Source, targets []Attempt, rep *Report) (int, error) {
	for i, a := range targets {
		if ctx.Err() != nil {
			return i, nil
		}
		err := src.Redeliver(ctx, a)
		switch {
		case err == nil, providerapi.Unknown(err):
			rep.Asked++
			r.log().Info("catch-up asked for a redelivery", "hook", src.Describe(), "delivery", a.Delivery, "attempt", a.ID,
				"event", a.Event, "repository", a.Repository, "error", errString(err))
			if st := providerapi.StatusOf(err); err != nil && (st == 0 || st >= 500) {
				// The provider failed (a 500, a gateway's 502 or 504, no answer) and may have
				// applied the request: it stays asked, and the rest waits for a later run
				// rather than going to a provider that fails. An answer of the provider that
				// the endpoint failed (GitLab's 422) is not the provider failing.
				r.log().Warn("catch-up: the provider failed a redelivery request; the remaining asks are a later run's", "hook", src.Describe(),
					"error", err)
				return i + 1, nil
			}
		case providerapi.ClassOf(err) == providerapi.Permanent:
			rep.Asked++
			if uerr := r.update(ctx, src.Name(), func(c *Cursor) bool {
				if o := c.Open[a.Delivery]; o != nil {
					o.Refused = true
					return true
				}
				return false
			}); uerr != nil {
				return i + 1, uerr
			}
			r.log().Warn("catch-up: the provider refuses to redeliver a delivery; it is lost at the next run", "hook", src.Describe(),
				"delivery", a.Delivery, "attempt", a.ID, "event", a.Event, "repository", a.Repository, "error", err)
		case providerapi.ClassOf(err) == providerapi.Transient:
			if wait := r.waitOf(err); wait > 0 {
				rep.WaitUntil = r.now().Add(wait)
			}
			r.log().Warn("catch-up: the provider asks to wait; the remaining asks are a later run's", "hook", src.Describe(),
				"retry_after", providerapi.RetryAfterOf(err), "wait_until", rep.WaitUntil, "error", err)
			return i, nil
		default:
			return i, fmt.Errorf("redeliver %s of %s: %w", a.ID, src.Describe(), err)
		}
	}
	return len(targets), nil
}

// waiting reports whether c keeps a wait that holds at now. A wait further ahead than any a
// provider can ask for (written by a host whose clock ran ahead) holds for none: it must not
// stop catch-up for longer than the longest wait.
func waiting(c Cursor, now time.Time) bool {
	return now.Before(c.WaitUntil) && c.WaitUntil.Sub(now) <= providerapi.MaxProviderWait
}

// waitOf is the wait a transient error asks for (a rate limit, Retry-After), bounded by
// providerapi.MaxProviderWait; zero for any other error.
func (r *Runner) waitOf(err error) time.Duration {
	if providerapi.ClassOf(err) != providerapi.Transient {
		return 0
	}
	return min(providerapi.RetryAfterOf(err), providerapi.MaxProviderWait)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// finish records the run's report in the cursor, measures it and returns it with err.
func (r *Runner) finish(ctx context.Context, name string, rep Report, err error) (Report, error) {
	if err != nil {
		rep.Error = err.Error()
	}
	// The report is written even when the run's time is up: it is what an operator reads.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if uerr := r.update(wctx, name, func(c *Cursor) bool {
		rep.Open = len(c.Open)
		c.Last = &rep
		switch {
		case rep.WaitUntil.After(c.WaitUntil):
			c.WaitUntil = rep.WaitUntil
		case !waiting(*c, r.now()):
			c.WaitUntil = time.Time{} // over: the cursor keeps no wait
		}
		return true
	}); uerr != nil && err == nil {
		err = uerr
	}
	if r.Metrics != nil {
		r.Metrics.Gauge("catchup_found_failed", float64(rep.Found), "Count")
		r.Metrics.Gauge("catchup_redelivered", float64(rep.Asked), "Count")
		r.Metrics.Gauge("catchup_given_up", float64(rep.Lost), "Count")
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	r.log().Log(ctx, level, "catch-up run", "hook", rep.Hook, "run", rep.RunID, "listed", rep.Listed, "found_failed", rep.Found,
		"redelivered", rep.Asked, "resolved", rep.Resolved, "given_up", rep.Lost, "open", rep.Open, "cut", rep.Cut,
		"wait_until", rep.WaitUntil, "error", rep.Error)
	return rep, err
}
