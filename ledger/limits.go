package ledger

import (
	"fmt"
	"time"
)

// Limits are the settings a ledger root records when it is created. Opening a root with
// different limits fails closed with ErrRootMismatch: two processes can never disagree about
// the shape of the record.
type Limits struct {
	// RecordCap is the number of rows the ledger holds at most.
	RecordCap int64 `json:"record_cap"`
	// SignedAgeCeiling is the longest signed age any route accepts.
	SignedAgeCeiling time.Duration `json:"signed_age_ceiling"`
	// QueueCeiling is how long a delivery may wait in the queue and in the sender's retry
	// schedule; it lengthens retention of signed rows.
	QueueCeiling time.Duration `json:"queue_ceiling"`
	// FutureSkew is how far ahead of the ledger's now a signed time may be.
	FutureSkew time.Duration `json:"future_skew"`
	// MaxChangeBytes bounds a row's change. Its JSON name is the name roots store it under,
	// kept as it was written.
	MaxChangeBytes int `json:"max_subject_bytes"`
	// MaxReportBytes bounds a saved report.
	MaxReportBytes int `json:"max_report_bytes"`
	// BodyAgeCeiling is the longest accepted age of a time the provider itself sets inside a
	// signed body (Delivery.BodyAt): such a delivery is accepted while its body time is at most
	// this old by the ledger's effective now, and its row is retained until every copy of the
	// body has gone stale. Zero: body times are not used, and every delivery whose signature
	// proves no time keeps a permanent marker. A root created before body times existed records
	// none and reads as zero; it adopts a configured ceiling once (see Reconcile).
	BodyAgeCeiling time.Duration `json:"body_age_ceiling,omitempty"`
	// BodyTimesSince is when a root created without a body-age ceiling adopted one: the
	// ledger's effective now at the adoption (zero for a root created with its ceiling). It is
	// recorded by the root, never configured, and Diff ignores it. No row bounded by a body
	// time ends before BodyTimesSince + BodyPolicyGrace, so that a handle opened under the
	// older policy (which would admit a replay of a forgotten body as a new permanent row) has
	// re-read the root and stopped before any such row can be forgotten.
	BodyTimesSince time.Time `json:"body_times_since,omitzero"`
}

// BodyPolicyGrace is how long after a root adopts a body-age ceiling no row bounded by a body
// time may end: longer than any handle takes to re-read the root it opened (the S3 ledger
// re-reads it every minute, the FileLedger at every decision) plus the life of a request held
// in flight (a SigV4-signed S3 request lands within 15 minutes of signing or never).
const BodyPolicyGrace = time.Hour

// MaxBodyAgeCeiling bounds the body-age ceiling: providers redeliver for days, not months,
// and a longer ceiling would make body-time rows permanent in all but name.
const MaxBodyAgeCeiling = 30 * 24 * time.Hour

// DefaultLimits are the limits of a root created without explicit settings.
func DefaultLimits() Limits {
	return Limits{
		RecordCap:        1_000_000,
		SignedAgeCeiling: 5 * time.Minute,
		QueueCeiling:     72 * time.Hour,
		FutureSkew:       time.Minute,
		MaxChangeBytes:   32 << 10,
		MaxReportBytes:   64 << 10,
		BodyAgeCeiling:   DefaultBodyAgeCeiling,
	}
}

// DefaultBodyAgeCeiling is the body-age ceiling of a root created without explicit settings:
// GitHub lets an operator redeliver a delivery for 3 days, and a day more covers the time a
// provider may take to send an event at all.
const DefaultBodyAgeCeiling = 96 * time.Hour

// Validate reports limits no root can be created with.
func (l Limits) Validate() error {
	switch {
	case l.RecordCap <= 0:
		return fmt.Errorf("%w: record cap must be positive, got %d", ErrInvalid, l.RecordCap)
	case l.SignedAgeCeiling <= 0:
		return fmt.Errorf("%w: signed-age ceiling must be positive, got %s", ErrInvalid, l.SignedAgeCeiling)
	case l.QueueCeiling < 0:
		return fmt.Errorf("%w: queue ceiling must not be negative, got %s", ErrInvalid, l.QueueCeiling)
	case l.FutureSkew < 0:
		return fmt.Errorf("%w: future skew must not be negative, got %s", ErrInvalid, l.FutureSkew)
	case l.MaxChangeBytes <= 0 || l.MaxChangeBytes > 1<<20:
		return fmt.Errorf("%w: change ceiling must be in (0, 1 MiB], got %d", ErrInvalid, l.MaxChangeBytes)
	case l.MaxReportBytes <= 0 || l.MaxReportBytes > 4<<20:
		return fmt.Errorf("%w: report ceiling must be in (0, 4 MiB], got %d", ErrInvalid, l.MaxReportBytes)
	case l.BodyAgeCeiling < 0 || l.BodyAgeCeiling > MaxBodyAgeCeiling:
		return fmt.Errorf("%w: body-age ceiling must be in [0, %s], got %s", ErrInvalid, MaxBodyAgeCeiling, l.BodyAgeCeiling)
	case !l.BodyTimesSince.IsZero() && l.BodyAgeCeiling == 0:
		return fmt.Errorf("%w: a body-times adoption time without a body-age ceiling", ErrInvalid)
	}
	return nil
}

// CheckDelivery reports a delivery that no root with these limits stores: one the contract
// does not allow (ErrInvalid, see Delivery.Validate) or one whose change is over
// MaxChangeBytes (ErrTooLarge). It decides on the delivery alone, never on stored state, so
// a backend calls it before it reads or writes anything: a refused delivery leaves no trace.
func (l Limits) CheckDelivery(d Delivery) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if len(d.Change) > l.MaxChangeBytes {
		return fmt.Errorf("%w: change of %d bytes, ceiling %d", ErrTooLarge, len(d.Change), l.MaxChangeBytes)
	}
	return nil
}

// CheckReport reports a report over MaxReportBytes (ErrTooLarge): Save refuses it before it
// writes anything, never truncating it.
func (l Limits) CheckReport(report []byte) error {
	if len(report) > l.MaxReportBytes {
		return fmt.Errorf("%w: report of %d bytes, ceiling %d", ErrTooLarge, len(report), l.MaxReportBytes)
	}
	return nil
}

// configured is l as a configuration states it: without what only the root records.
func (l Limits) configured() Limits {
	l.BodyTimesSince = time.Time{}
	return l
}

// Diff describes how stored limits differ from configured ones ("" when they match).
// BodyTimesSince, which only a root records, is not compared.
func (l Limits) Diff(configured Limits) string {
	if l.configured() == configured.configured() {
		return ""
	}
	return fmt.Sprintf("root records %+v, configuration asks for %+v", l.configured(), configured.configured())
}

// Reconcile decides how a root recording the limits l opens with the configured ones. Equal
// limits open as they are. A root that records no body-age ceiling (created before body times,
// or with them switched off) and is opened with one adopts it: adopt is true and the returned
// limits carry the ceiling and now as BodyTimesSince; the backend records them in the root
// before it admits anything under them. This change is safe in the one direction it allows:
// rows written as permanent stay permanent (each row records its own lifetime), and no row is
// ever forgotten that an older handle could still re-admit (BodyPolicyGrace). Every other
// difference (another ceiling, switching body times off, any other limit) is ErrRootMismatch:
// a policy the root recorded is never silently reinterpreted.
func (l Limits) Reconcile(configured Limits, now time.Time) (Limits, bool, error) {
	if d := l.Diff(configured); d == "" {
		return l, false, nil
	}
	adopted := l
	adopted.BodyAgeCeiling = configured.BodyAgeCeiling
	if l.BodyAgeCeiling == 0 && configured.BodyAgeCeiling > 0 && adopted.Diff(configured) == "" {
		adopted.BodyTimesSince = now.Round(0).UTC()
		return adopted, true, nil
	}
	if l.BodyAgeCeiling != configured.BodyAgeCeiling && adopted.Diff(configured) == "" {
		if configured.BodyAgeCeiling == 0 {
			return l, false, fmt.Errorf("%w: the root bounds body-time rows by a body-age ceiling of %s and has forgotten "+
				"rows under it; switching body times off would admit a replay of a forgotten body as new: start a new root",
				ErrRootMismatch, l.BodyAgeCeiling)
		}
		return l, false, fmt.Errorf("%w: the root records a body-age ceiling of %s, the configuration asks for %s; "+
			"a recorded ceiling never changes (narrow it per route with max_body_age, or start a new root)",
			ErrRootMismatch, l.BodyAgeCeiling, configured.BodyAgeCeiling)
	}
	return l, false, fmt.Errorf("%w: %s", ErrRootMismatch, l.Diff(configured))
}

// AcceptedAge is the signed age a route accepts: its own narrowing, never more than the
// ceiling. A zero route age means the ceiling.
func (l Limits) AcceptedAge(routeMaxAge time.Duration) time.Duration {
	return narrowed(l.SignedAgeCeiling, routeMaxAge)
}

// AcceptedBodyAge is the body age a route accepts: its own narrowing, never more than the
// body-age ceiling. A zero route age means the ceiling.
func (l Limits) AcceptedBodyAge(routeMaxBodyAge time.Duration) time.Duration {
	return narrowed(l.BodyAgeCeiling, routeMaxBodyAge)
}

func narrowed(ceiling, route time.Duration) time.Duration {
	if route > 0 && route < ceiling {
		return route
	}
	return ceiling
}

// Fresh reports whether a request signed at signedAt is inside the accepted window at now.
// The end instant (signedAt plus the accepted age) is still inside.
func (l Limits) Fresh(signedAt time.Time, routeMaxAge time.Duration, now time.Time) bool {
	return l.inWindow(signedAt, l.AcceptedAge(routeMaxAge), now)
}

// FreshBody reports whether a body whose provider-set time is bodyAt is inside the accepted
// window at now: at most the accepted body age old (the end instant is inside) and at most
// FutureSkew ahead.
func (l Limits) FreshBody(bodyAt time.Time, routeMaxBodyAge time.Duration, now time.Time) bool {
	return l.inWindow(bodyAt, l.AcceptedBodyAge(routeMaxBodyAge), now)
}

func (l Limits) inWindow(at time.Time, age time.Duration, now time.Time) bool {
	if now.After(at.Add(age)) {
		return false
	}
	return !at.After(now.Add(l.FutureSkew))
}

// RetainUntil is the end of retention of a row whose latest signed time is signedAt: past it,
// every request signed at or before signedAt is stale for every route.
func (l Limits) RetainUntil(signedAt time.Time) time.Time {
	return signedAt.Add(l.SignedAgeCeiling + l.QueueCeiling)
}

// BodyRetainUntil is the end of retention of a row bounded by the body time bodyAt: past it,
// every copy of the body is stale for every route. It is never before BodyTimesSince +
// BodyPolicyGrace on a root that adopted body times.
func (l Limits) BodyRetainUntil(bodyAt time.Time) time.Time {
	until := bodyAt.Add(l.BodyAgeCeiling)
	if !l.BodyTimesSince.IsZero() {
		until = MaxTime(until, l.BodyTimesSince.Add(BodyPolicyGrace))
	}
	return until
}
