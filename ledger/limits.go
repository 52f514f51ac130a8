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
	// MaxSubjectBytes bounds a row's subject.
	MaxSubjectBytes int `json:"max_subject_bytes"`
	// MaxReportBytes bounds a saved report.
	MaxReportBytes int `json:"max_report_bytes"`
}

// DefaultLimits are the limits of a root created without explicit settings.
func DefaultLimits() Limits {
	return Limits{
		RecordCap:        1_000_000,
		SignedAgeCeiling: 5 * time.Minute,
		QueueCeiling:     72 * time.Hour,
		FutureSkew:       time.Minute,
		MaxSubjectBytes:  32 << 10,
		MaxReportBytes:   64 << 10,
	}
}

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
	case l.MaxSubjectBytes <= 0 || l.MaxSubjectBytes > 1<<20:
		return fmt.Errorf("%w: subject ceiling must be in (0, 1 MiB], got %d", ErrInvalid, l.MaxSubjectBytes)
	case l.MaxReportBytes <= 0 || l.MaxReportBytes > 4<<20:
		return fmt.Errorf("%w: report ceiling must be in (0, 4 MiB], got %d", ErrInvalid, l.MaxReportBytes)
	}
	return nil
}

// Diff describes how stored limits differ from configured ones ("" when they match).
func (l Limits) Diff(configured Limits) string {
	if l == configured {
		return ""
	}
	return fmt.Sprintf("root records %+v, configuration asks for %+v", l, configured)
}

// AcceptedAge is the signed age a route accepts: its own narrowing, never more than the
// ceiling. A zero route age means the ceiling.
func (l Limits) AcceptedAge(routeMaxAge time.Duration) time.Duration {
	if routeMaxAge > 0 && routeMaxAge < l.SignedAgeCeiling {
		return routeMaxAge
	}
	return l.SignedAgeCeiling
}

// Fresh reports whether a request signed at signedAt is inside the accepted window at now.
// The end instant (signedAt plus the accepted age) is still inside.
func (l Limits) Fresh(signedAt time.Time, routeMaxAge time.Duration, now time.Time) bool {
	if now.After(signedAt.Add(l.AcceptedAge(routeMaxAge))) {
		return false
	}
	return !signedAt.After(now.Add(l.FutureSkew))
}

// RetainUntil is the end of retention of a row whose latest signed time is signedAt: past it,
// every request signed at or before signedAt is stale for every route.
func (l Limits) RetainUntil(signedAt time.Time) time.Time {
	return signedAt.Add(l.SignedAgeCeiling + l.QueueCeiling)
}
