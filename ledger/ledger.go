package ledger

import (
	"context"
	"fmt"
	"time"
)

// Ledger is the delivery ledger contract. Every method is safe for concurrent use, from one
// process or many, and each one is a single atomic decision: when it returns an error, the
// store holds either nothing of the operation or its whole effect.
type Ledger interface {
	// Admit records an authenticated delivery with its change. A delivery with a signed
	// issue time is checked for freshness against the ledger's effective now in the same
	// transaction (Stale when too old for the accepted age or too far ahead). Admit answers
	// Admitted for a new row, Pending for a row not yet finished (re-enqueueing it is safe),
	// Duplicate for a done or abandoned row, BindingConflict when the key is bound to another
	// body, and Full when the record cap is in use. A re-admission presenting a later signed
	// time records it, lengthening retention and never widening acceptance. Admission never
	// lists the store and issues a bounded number of operations.
	Admit(ctx context.Context, d Delivery) (Admission, error)

	// Claim is the one coordination step. It answers Execute with a lease whose fence is
	// strictly greater than any fence granted before for the row; Publish with the frozen
	// result when one was saved; Busy while another owner's lease is live; Duplicate once the
	// row is done or abandoned; BindingConflict when bindingDigest does not match. A key with
	// no row is ErrUnknownDelivery.
	Claim(ctx context.Context, key Key, bindingDigest Digest, owner string, leaseFor time.Duration) (Claim, error)

	// Renew extends a live lease, executing or publishing. It answers ErrLeaseLost when the
	// fence is stale or the row's own lease has ended by the ledger's effective now; the
	// expiry carried in the lease is never read.
	Renew(ctx context.Context, lease Lease, leaseFor time.Duration) (Lease, error)

	// Save freezes the report as the row's result and stages it for publication; the saver
	// keeps its lease, now a publishing lease. It answers ErrLeaseLost when the lease is stale
	// or has ended, even when nobody else claimed since, and ErrTooLarge (writing nothing)
	// when the report is over its ceiling. Repeating a Save that landed answers the same
	// staged result.
	Save(ctx context.Context, lease Lease, report []byte) (Staged, error)

	// Complete marks a saved row done. Repeating it on a done row succeeds and grants
	// nothing.
	Complete(ctx context.Context, staged Staged) error

	// Abandon ends a saved row that can never be published, keeping the reason and the
	// frozen report (for Revive). The holder must own a live publishing lease. The row answers
	// Duplicate afterwards and is cleaned like a done one. Repeating it on an abandoned row
	// succeeds.
	Abandon(ctx context.Context, staged Staged, reason string) error

	// Release gives a lease back early so the next claim need not wait for expiry; no claim
	// is granted before notBefore. Releasing an executing lease records a failed attempt
	// (the next executing lease's Failures). A stale fence answers ErrLeaseLost.
	Release(ctx context.Context, lease Lease, notBefore time.Time) error

	// Unclaim gives a lease back as Release does and hands back the attempt its grant
	// counted, for a holder cut (a shutdown) before the attempt could decide anything: the
	// next grant in the same phase carries the Attempt this lease had. It is fenced as
	// Release is: a repeated or late Unclaim answers ErrLeaseLost and hands nothing back.
	Unclaim(ctx context.Context, lease Lease, notBefore time.Time) error

	// Supersede ends a saved row whose verdict must never be posted, because the subject's
	// record answered SubjectSuperseded: by names the newer verdict (zero for a late verdict
	// that found another status standing). The holder must own a live publishing lease. The
	// row answers Duplicate afterwards, keeps no report, and is cleaned like a done one.
	// Repeating it on a superseded row succeeds.
	Supersede(ctx context.Context, staged Staged, by Key) error

	// AcquireSubject registers a saved verdict with the record of its subject and asks for the
	// right to post it, in one read-modify-write of that record (SubjectRecord.Acquire decides;
	// a subject with no record gets a new one). The caller holds the row's publishing lease.
	// It answers SubjectPost with a fenced grant, SubjectWait while another post is in flight,
	// SubjectSuperseded when a newer verdict is recorded, or SubjectStanding when this verdict
	// is known to stand. A park (q.Wake set: a verdict told to wait, its message set aside)
	// never grants: it names the verdict the waiter of the live grant, or answers when to come
	// back.
	AcquireSubject(ctx context.Context, q SubjectRequest) (SubjectGrant, error)

	// ReportSubject records what became of the post made under a grant (SubjectRecord.Report
	// decides), in one read-modify-write of the subject's record, and hands back the wake of
	// the verdict parked on that grant (SubjectGrant.Wake). A grant that is no longer the
	// record's is ErrLeaseLost.
	ReportSubject(ctx context.Context, g SubjectGrant, o PostOutcome) (SubjectGrant, error)

	// InspectSubject returns a copy of the record of a subject, or ErrUnknownSubject.
	InspectSubject(ctx context.Context, key SubjectKey) (SubjectRecord, error)

	// Revive returns an abandoned row to saved with the report it froze, byte for byte, so
	// that it is published again and never evaluated again (an operator's remedy once the
	// cause of the abandonment is fixed). evaluationID, when not empty, must be the row's, so
	// an operator revives exactly the row they inspected. A saved row is answered unchanged;
	// a pending, running or done row is ErrInvalid, and so is an abandoned row whose report
	// was not kept. It returns the row as it now stands.
	Revive(ctx context.Context, key Key, evaluationID string) (Row, error)

	// Cleanup runs one bounded pass starting at cursor (empty for the start). It removes only
	// rows that are done, abandoned or superseded, not permanent, and whose retention ended
	// strictly before the effective now, after persisting that now as the high-water; and
	// subject records that SubjectRecord.Removable allows. It reports what
	// it removed, how many rows it kept, the rows it could not read (skipped, never removed)
	// and the stranded rows (not finished, no live lease, idle longer than the threshold).
	// When it cannot list or read the store it removes nothing and returns an error. Only one
	// cleanup runs at a time; another one answers ErrBusy.
	Cleanup(ctx context.Context, cursor Cursor) (CleanupReport, error)

	// Stats reports counts by state, capacity use and the high-water clock. It reads every
	// row and is meant for operators, never the request path.
	Stats(ctx context.Context) (Stats, error)

	// Inspect returns a copy of the row stored for key, or ErrUnknownDelivery.
	Inspect(ctx context.Context, key Key) (Row, error)

	// Report returns the report a saved or abandoned row froze, byte for byte, for operators.
	// A done row keeps no report (ErrInvalid, as for a row that saved none); a key without a
	// row is ErrUnknownDelivery.
	Report(ctx context.Context, key Key) ([]byte, error)

	// Rows lists up to limit rows after cursor (empty: from the start) in the backend's
	// key order, for operators and never for the request path. A row that cannot be read is
	// listed in Damaged, never skipped silently; a listing that fails is an error. Next is
	// empty once the listing is finished.
	Rows(ctx context.Context, cursor Cursor, limit int) (RowPage, error)

	// Close releases the handle's resources. It writes nothing.
	Close() error
}

// Delivery is an authenticated webhook as the ingress admits it.
type Delivery struct {
	// Binding fixes what the key is bound to.
	Binding Binding
	// Change is the bounded, normalised change the runner evaluates, opaque to the ledger.
	Change []byte
	// SignedAt is the issue time the signature proves. The zero time means the signature
	// proves none, and the row is permanent.
	SignedAt time.Time
	// MaxAge is the route's accepted signed age. Zero means the controller's ceiling; a value
	// above the ceiling is clamped to it, so a route can only narrow.
	MaxAge time.Duration
	// BodyAt is a time the provider itself set inside the signed body, at or after the event,
	// that no sender chooses (the tables in docs/providers say which field, per provider and
	// event kind). Like a signed time it bounds the replay lifetime: the delivery is accepted
	// while BodyAt is within the accepted body age of the ledger's effective now, and its row
	// is retained until every copy of the body has gone stale. The zero time means the body
	// carries no such time; so does any BodyAt on a root that records no body-age ceiling: the
	// row is then permanent. A delivery has at most one of SignedAt and BodyAt.
	BodyAt time.Time
	// MaxBodyAge is the route's accepted body age. Zero means the body-age ceiling; a value
	// above it is clamped to it, so a route can only narrow.
	MaxBodyAge time.Duration
}

// Key returns the delivery key.
func (d Delivery) Key() Key { return d.Binding.Key() }

// Validate reports a delivery the contract cannot store.
func (d Delivery) Validate() error {
	b := d.Binding
	if b.Route == "" || b.Scheme == "" || b.Identity == "" {
		return fmt.Errorf("%w: binding needs route, scheme and identity", ErrInvalid)
	}
	if d.MaxAge < 0 || d.MaxBodyAge < 0 {
		return fmt.Errorf("%w: negative accepted age", ErrInvalid)
	}
	if !d.SignedAt.IsZero() && !d.BodyAt.IsZero() {
		return fmt.Errorf("%w: a delivery has a signed time or a body time, not both", ErrInvalid)
	}
	return nil
}

// Timed reports whether the delivery carries a time its freshness is decided on (a signed
// time or a body time). A backend must decide the admission of a timed delivery on the
// ledger's effective now, the persisted high-water included: after a row was forgotten, only
// the high-water keeps a replay of it stale when the clock steps back.
func (d Delivery) Timed() bool { return !d.SignedAt.IsZero() || !d.BodyAt.IsZero() }

// Lifetime says what bounds a row's replay memory.
type Lifetime int

// Lifetimes.
const (
	// LifetimePermanent: nothing the signature proves says when the delivery stops being
	// acceptable; the row is never forgotten.
	LifetimePermanent Lifetime = iota + 1
	// LifetimeSigned: a signed issue time (a header the signature covers) bounds it.
	LifetimeSigned
	// LifetimeBody: a provider-set time inside the signed body bounds it.
	LifetimeBody
)

// Lifetimes lists every lifetime kind.
var Lifetimes = []Lifetime{LifetimePermanent, LifetimeSigned, LifetimeBody}

var lifetimeNames = map[Lifetime]string{LifetimePermanent: "permanent", LifetimeSigned: "signed", LifetimeBody: "body"}

func (k Lifetime) String() string {
	if n, ok := lifetimeNames[k]; ok {
		return n
	}
	return fmt.Sprintf("Lifetime(%d)", int(k))
}

// replayTime is the time that bounds the delivery's replay lifetime under the limits l, and
// whether it is a body time. The zero time means none: the row is permanent.
func (d Delivery) replayTime(l Limits) (time.Time, bool) {
	switch {
	case !d.SignedAt.IsZero():
		return d.SignedAt, false
	case !d.BodyAt.IsZero() && l.BodyAgeCeiling > 0:
		return d.BodyAt, true
	}
	return time.Time{}, false
}

// eventTime is the event's time as the signature proves it: the signed time, or the body time
// whatever the root's body-age ceiling (zero: none).
func (d Delivery) eventTime() time.Time {
	if !d.SignedAt.IsZero() {
		return d.SignedAt
	}
	return d.BodyAt
}

// fresh reports whether the delivery's replay time (t, a body time when body) is inside the
// window the route accepts at now.
func (d Delivery) fresh(l Limits, t time.Time, body bool, now time.Time) bool {
	if body {
		return l.FreshBody(t, d.MaxBodyAge, now)
	}
	return l.Fresh(t, d.MaxAge, now)
}

// AdmitOutcome is Admit's answer.
type AdmitOutcome int

// The answers of Admit.
const (
	Admitted AdmitOutcome = iota + 1
	Pending
	Duplicate
	BindingConflict
	Stale
	Full
)

var admitNames = map[AdmitOutcome]string{Admitted: "admitted", Pending: "pending", Duplicate: "duplicate",
	BindingConflict: "binding-conflict", Stale: "stale", Full: "full"}

func (o AdmitOutcome) String() string {
	if s, ok := admitNames[o]; ok {
		return s
	}
	return fmt.Sprintf("AdmitOutcome(%d)", int(o))
}

// Admission is the result of Admit.
type Admission struct {
	Outcome AdmitOutcome
	Key     Key
	// EvaluationID and State describe the row, when there is one.
	EvaluationID string
	State        State
	// RetainUntil is the end of the row's retention (zero when permanent).
	RetainUntil time.Time
	// Lifetime says what bounds the row's replay memory.
	Lifetime Lifetime
}

// Err maps the refusals to sentinel errors: Full to ErrFull and Stale to ErrStale; every other
// outcome is nil.
func (a Admission) Err() error {
	switch a.Outcome {
	case Full:
		return ErrFull
	case Stale:
		return ErrStale
	}
	return nil
}

// ClaimOutcome is Claim's answer.
type ClaimOutcome int

// The answers of Claim.
const (
	Execute ClaimOutcome = iota + 1
	Publish
	Busy
	ClaimDuplicate
	ClaimConflict
)

var claimNames = map[ClaimOutcome]string{Execute: "execute", Publish: "publish", Busy: "busy",
	ClaimDuplicate: "duplicate", ClaimConflict: "binding-conflict"}

func (o ClaimOutcome) String() string {
	if s, ok := claimNames[o]; ok {
		return s
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// Claim is the result of Claim.
type Claim struct {
	Outcome ClaimOutcome
	// Lease is set for Execute.
	Lease *Lease
	// Staged is set for Publish.
	Staged *Staged
	// EvaluationID is the row's evaluation id (every outcome but ClaimConflict).
	EvaluationID string
	// RetryAt is when a Busy row may be claimed again, by the ledger's clock.
	RetryAt time.Time
	// Decided is the ledger's time when it answered Busy: RetryAt less Decided is the wait,
	// which a caller whose own clock is off adds to its own time (set for Busy).
	Decided time.Time
}

// Phase says what a lease entitles its holder to do.
type Phase int

// Lease phases.
const (
	PhaseExecute Phase = iota + 1
	PhasePublish
)

func (p Phase) String() string {
	switch p {
	case PhaseExecute:
		return "execute"
	case PhasePublish:
		return "publish"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// Lease is a fenced grant of ownership. Only the fence and the evaluation id are ever
// checked; Expires is advisory, for the holder's own scheduling.
type Lease struct {
	Key           Key
	BindingDigest Digest
	// Route is the route the delivery arrived on, from the row's binding (never from the
	// queue message).
	Route        string
	EvaluationID string
	Fence        uint64
	Owner        string
	Phase        Phase
	// Attempt counts Execute grants for the row, this one included; for a publishing lease
	// it counts publish grants.
	Attempt int
	// Expires is advisory: the ledger's own record decides.
	Expires time.Time
	// PublishSince is, for a publishing lease, when the row's result was saved or last
	// revived: the start of its publish budget (zero for rows saved by older versions).
	PublishSince time.Time
	// AdmittedAt is when the row was admitted, by the ledger's clock.
	AdmittedAt time.Time
	// EventAt is the event's time as the provider signed it (the row's EventAt; zero: none).
	EventAt time.Time
	// Failures counts, for an executing lease, the earlier attempts released as failed
	// (Release of an executing lease); attempts handed back (Unclaim) or lost (their holder
	// died, or lost its lease) are not failures.
	Failures int
	// Change is the row's change, handed to the evaluator and to the publisher.
	Change []byte
}

// Order places the lease's verdict among the verdicts of its subject.
func (l Lease) Order() Order { return Order{Key: l.Key, EventAt: l.EventAt, AdmittedAt: l.AdmittedAt} }

// RowPage is one page of Rows.
type RowPage struct {
	Rows    []Row
	Damaged []DamagedRow
	Next    Cursor
}

// Staged is a frozen result awaiting publication, with the lease to publish it under.
type Staged struct {
	Lease  Lease
	Report []byte
}

// State is a row's place in the lifecycle.
type State int

// Row states.
const (
	StatePending State = iota + 1
	StateRunning
	StateSaved
	StateDone
	StateAbandoned
	// StateSuperseded: the verdict was never posted because a newer one on the same subject
	// was recorded first (Row.SupersededBy names it).
	StateSuperseded
)

var stateNames = map[State]string{StatePending: "pending", StateRunning: "running", StateSaved: "saved",
	StateDone: "done", StateAbandoned: "abandoned", StateSuperseded: "superseded"}

// States lists every state in lifecycle order.
var States = []State{StatePending, StateRunning, StateSaved, StateDone, StateAbandoned, StateSuperseded}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Terminal reports whether the state is done, abandoned or superseded.
func (s State) Terminal() bool { return s == StateDone || s == StateAbandoned || s == StateSuperseded }

// MarshalText encodes the state by name.
func (s State) MarshalText() ([]byte, error) {
	if _, ok := stateNames[s]; !ok {
		return nil, fmt.Errorf("ledger: unknown state %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a state name.
func (s *State) UnmarshalText(b []byte) error {
	for k, v := range stateNames {
		if v == string(b) {
			*s = k
			return nil
		}
	}
	return fmt.Errorf("ledger: unknown state %q", b)
}

// Cursor is the opaque position of a cleanup pass; the empty cursor starts a new lap.
type Cursor string

// CleanupReport is what one Cleanup pass did and found.
type CleanupReport struct {
	// Removed lists the rows this pass forgot.
	Removed []RemovedRow
	// Retained counts the rows the pass read and kept.
	Retained int
	// Damaged lists rows that could not be read: skipped, counted as retained, never removed.
	Damaged []DamagedRow
	// Stranded lists unfinished rows with no live lease, idle longer than the threshold.
	Stranded []StrandedRow
	// OldestUnfinished is the admission time of the oldest unfinished row (pending, running
	// or saved, whatever its lease) the pass read, zero when it read none: how long the
	// delivery waiting longest has waited for its verdict to be posted. The earliest of a lap's
	// passes' times is the ledger's: a lap of passes reads every row once, or, in a backend
	// whose passes read only what is due (objstore), reads again the oldest rows it found
	// unfinished before.
	OldestUnfinished time.Time
	// RemovedSubjects counts the subject records this pass forgot, and Subjects those it kept.
	RemovedSubjects, Subjects int
	// HighWater is the effective now the pass persisted before deleting.
	HighWater time.Time
	// CapacityUsed and RecordCap are the slots in use after the pass and the cap, as the
	// backend's capacity records hold them (RecordCap zero: the backend did not report them).
	CapacityUsed, RecordCap int64
	// Next is where the next pass continues; Done reports that this pass finished a lap.
	Next Cursor
	Done bool
}

// RemovedRow names a forgotten row.
type RemovedRow struct {
	Key          Key
	EvaluationID string
}

// DamagedRow names a row that could not be read, and why.
type DamagedRow struct {
	// Name is the file or object that failed.
	Name string
	Err  error
}

// StrandedRow is enough to re-enqueue a row: the queue message carries key and binding.
type StrandedRow struct {
	Key           Key
	BindingDigest Digest
	State         State
	// Since is the row's last transition.
	Since time.Time
}

// Stats is the operator's view of a ledger.
type Stats struct {
	Rows    int64
	ByState map[State]int64
	// ByLifetime counts the rows by what bounds their replay memory.
	ByLifetime map[Lifetime]int64
	Damaged    int64
	// Subjects counts the subject records (one per commit and status context published to,
	// kept until SubjectRecord.Removable).
	Subjects     int64
	CapacityUsed int64
	Limits       Limits
	HighWater    time.Time
	// Now is the effective now the figures below were taken at: backends set it before they
	// count (zero: the high-water is used).
	Now time.Time
	// AdmittedLastDay counts the rows created in the day before Now, and EndingNextDay the
	// rows whose retention ends in the day after it: the day's admissions and the rows cleanup
	// may forget in the next one.
	AdmittedLastDay, EndingNextDay int64
}

// CapacityWarning is the share of the record cap in use at which cleanup warns (a log line
// and a metric), long before admissions are refused.
const CapacityWarning = 0.8

// DaysToFull projects when the record cap will be reached at the current admission rate: the
// free capacity divided by the net growth per day (the rows admitted in the last day, less
// those whose retention ends in the next one). ok is false when the ledger does not grow at
// this rate: every admission of the last day is matched by a row that will be forgotten,
// as body-time and signed rows are once a window of traffic is retained.
func (s Stats) DaysToFull() (days float64, ok bool) {
	growth := s.AdmittedLastDay - s.EndingNextDay
	if growth <= 0 {
		return 0, false
	}
	free := s.Limits.RecordCap - s.CapacityUsed
	if free < 0 {
		free = 0
	}
	return float64(free) / float64(growth), true
}
