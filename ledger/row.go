package ledger

import (
	"bytes"
	"fmt"
	"time"
)

// Row is the backend-neutral record of one delivery. Backends store it (each in its own
// format) and apply the transition methods below inside one atomic read-modify-write; the
// methods never do I/O and decide everything from the row and the effective now.
type Row struct {
	Key          Key     `json:"key"`
	Binding      Binding `json:"binding"`
	EvaluationID string  `json:"evaluation_id"`
	State        State   `json:"state"`
	// Change is the bounded, normalised change the runner evaluates (Delivery.Change). Its
	// JSON name "subject" is the stored rows' format, kept as it was written.
	Change []byte `json:"subject,omitempty"`
	// Permanent rows have no provable end and are never cleaned.
	Permanent bool `json:"permanent"`
	// SignedAt is the latest signed time seen for the identity; RetainUntil follows from it.
	SignedAt time.Time `json:"signed_at,omitzero"`
	// BodyTime reports that SignedAt is a provider-set time inside the signed body rather
	// than a signed header time (Delivery.BodyAt); RetainUntil then follows from the body-age
	// ceiling.
	BodyTime    bool      `json:"body_time,omitempty"`
	RetainUntil time.Time `json:"retain_until,omitzero"`
	// EventAt is the event's time as the provider signed it, fixed at admission: the first
	// signed time, or the body time (even where no body-age ceiling bounds the row). It orders
	// the row's verdict among those of its subject (Order); zero when the signature proves none.
	EventAt time.Time `json:"event_at,omitzero"`
	// Fence is the last fence granted; Owner and LeaseUntil describe the current lease.
	Fence      uint64    `json:"fence"`
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// NotBefore holds off claims after a Release.
	NotBefore time.Time `json:"not_before,omitzero"`
	Attempts  int       `json:"attempts"`
	// Failures counts the executing leases released as failed attempts (Release); Attempts
	// less Failures, less one for a live lease, are attempts lost without an answer.
	Failures int `json:"failures,omitempty"`
	// PublishAttempts counts publish grants since the result was saved or last revived.
	PublishAttempts int `json:"publish_attempts"`
	// PublishSince is when the result was saved or last revived: the start of its publish
	// budget.
	PublishSince time.Time `json:"publish_since,omitzero"`
	// Report describes the saved result while the row is saved, done or abandoned.
	Report ReportRef `json:"report,omitzero"`
	Reason string    `json:"reason,omitempty"`
	// SupersededBy names the newer verdict that superseded this one (StateSuperseded; zero
	// when a late verdict found another status standing).
	SupersededBy Key `json:"superseded_by,omitzero"`
	// CreatedAt is the admission time, UpdatedAt the last transition.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// SeenAt is the latest effective now that a refusal on this row was decided at, kept so
	// that a clock stepping back cannot undo that decision.
	SeenAt time.Time `json:"seen_at,omitzero"`
}

// ReportRef names a saved report: its digest, its size and the fence it was saved under.
type ReportRef struct {
	Digest Digest `json:"digest"`
	Size   int    `json:"size"`
	Fence  uint64 `json:"fence"`
}

// IsZero reports whether no report is recorded.
func (r ReportRef) IsZero() bool { return r == ReportRef{} }

// Now returns the effective now for a decision on this row: the latest of the clock reading,
// the backend's high-water, the row's last transition and the row's last refusal.
func (r *Row) Now(clock, highWater time.Time) time.Time {
	return MaxTime(clock, highWater, r.UpdatedAt, r.SeenAt)
}

// NewRow builds the row Admit creates for a fresh delivery at now. It enforces the change
// ceiling and freshness; a refusal is returned as an Admission outcome.
func NewRow(d Delivery, l Limits, now time.Time, evaluationID string) (Row, AdmitOutcome, error) {
	if err := l.CheckDelivery(d); err != nil {
		return Row{}, 0, err
	}
	t, body := d.replayTime(l)
	if !t.IsZero() && !d.fresh(l, t, body, now) {
		return Row{}, Stale, nil
	}
	r := Row{
		Key:          d.Key(),
		Binding:      d.Binding,
		EvaluationID: evaluationID,
		State:        StatePending,
		Change:       append([]byte(nil), d.Change...),
		Permanent:    t.IsZero(),
		EventAt:      d.eventTime().Round(0),
		CreatedAt:    now,
		UpdatedAt:    now,
	}
	if !r.Permanent {
		r.SignedAt = t.Round(0)
		r.BodyTime = body
		r.RetainUntil = r.retainUntil(l)
	}
	return r, Admitted, nil
}

// retainUntil is the end of retention that the row's latest time gives under l.
func (r *Row) retainUntil(l Limits) time.Time {
	if r.BodyTime {
		return l.BodyRetainUntil(r.SignedAt)
	}
	return l.RetainUntil(r.SignedAt)
}

// Lifetime says what bounds the row's replay memory.
func (r *Row) Lifetime() Lifetime {
	switch {
	case r.Permanent:
		return LifetimePermanent
	case r.BodyTime:
		return LifetimeBody
	}
	return LifetimeSigned
}

// Readmit answers a delivery whose key already has this row. It reports whether the row
// changed (a later signed time lengthens retention).
func (r *Row) Readmit(d Delivery, l Limits, now time.Time) (AdmitOutcome, bool) {
	t, body := d.replayTime(l)
	if !t.IsZero() && !d.fresh(l, t, body, now) {
		return Stale, false
	}
	if d.Binding != r.Binding {
		return BindingConflict, false
	}
	changed := false
	// A row keeps the lifetime it was written with: a permanent row stays permanent, and only
	// a later time of the row's own kind lengthens retention.
	if !r.Permanent && body == r.BodyTime && t.After(r.SignedAt) {
		r.SignedAt = t.Round(0)
		if until := r.retainUntil(l); until.After(r.RetainUntil) {
			r.RetainUntil = until
		}
		changed = true
	}
	if r.State.Terminal() {
		return Duplicate, changed
	}
	return Pending, changed
}

// Admission describes the row as Admit answers it.
func (r *Row) Admission(o AdmitOutcome) Admission {
	return Admission{Outcome: o, Key: r.Key, EvaluationID: r.EvaluationID, State: r.State, RetainUntil: r.RetainUntil,
		Lifetime: r.Lifetime()}
}

func (r *Row) leaseLive(now time.Time) bool {
	return r.Owner != "" && now.Before(r.LeaseUntil)
}

// Claim decides a claim at now. It mutates the row only when it grants ownership (Execute or
// Publish); the caller then persists it. For Publish the caller fills Staged.Report with the
// stored report bytes.
func (r *Row) Claim(bindingDigest Digest, owner string, leaseFor time.Duration, now time.Time) (Claim, error) {
	if owner == "" || leaseFor <= 0 {
		return Claim{}, fmt.Errorf("%w: claim needs an owner and a positive lease", ErrInvalid)
	}
	if bindingDigest != r.Binding.Digest() {
		return Claim{Outcome: ClaimConflict}, nil
	}
	busy := func(at time.Time) (Claim, error) {
		return Claim{Outcome: Busy, EvaluationID: r.EvaluationID, RetryAt: at, Decided: now}, nil
	}
	switch r.State {
	case StateDone, StateAbandoned, StateSuperseded:
		return Claim{Outcome: ClaimDuplicate, EvaluationID: r.EvaluationID}, nil
	case StatePending, StateRunning:
		if r.leaseLive(now) {
			return busy(r.LeaseUntil)
		}
		if now.Before(r.NotBefore) {
			return busy(r.NotBefore)
		}
		r.grant(owner, leaseFor, now)
		r.State = StateRunning
		r.Attempts++
		l := r.lease(PhaseExecute, r.Attempts)
		return Claim{Outcome: Execute, Lease: &l, EvaluationID: r.EvaluationID}, nil
	case StateSaved:
		if r.leaseLive(now) {
			return busy(r.LeaseUntil)
		}
		if now.Before(r.NotBefore) {
			return busy(r.NotBefore)
		}
		r.grant(owner, leaseFor, now)
		r.PublishAttempts++
		return Claim{Outcome: Publish, Staged: &Staged{Lease: r.lease(PhasePublish, r.PublishAttempts)}, EvaluationID: r.EvaluationID}, nil
	}
	return Claim{}, fmt.Errorf("%w: row %s in unknown state %v", ErrCorrupt, r.Key.Short(), r.State)
}

func (r *Row) grant(owner string, leaseFor time.Duration, now time.Time) {
	r.Fence++
	r.Owner = owner
	r.LeaseUntil = now.Add(leaseFor)
	r.NotBefore = time.Time{}
	r.UpdatedAt = now
}

func (r *Row) lease(p Phase, attempt int) Lease {
	l := Lease{Key: r.Key, BindingDigest: r.Binding.Digest(), Route: r.Binding.Route, EvaluationID: r.EvaluationID, Fence: r.Fence,
		Owner: r.Owner, Phase: p, Attempt: attempt, Expires: r.LeaseUntil, AdmittedAt: r.CreatedAt, EventAt: r.EventAt, Change: append([]byte(nil), r.Change...)}
	if p == PhasePublish {
		l.PublishSince = r.PublishSince
	} else {
		l.Failures = r.Failures
	}
	return l
}

// holds checks that l is the row's current lease in the given phase and is live at now. An
// ended lease records now in SeenAt (observed reports whether the row changed).
func (r *Row) holds(l Lease, p Phase, now time.Time) (observed bool, err error) {
	if l.EvaluationID != r.EvaluationID || l.Fence != r.Fence || r.Owner == "" {
		return false, fmt.Errorf("%w: fence %d of evaluation %s is not the row's (fence %d, evaluation %s)",
			ErrLeaseLost, l.Fence, l.EvaluationID, r.Fence, r.EvaluationID)
	}
	want := StateRunning
	if p == PhasePublish {
		want = StateSaved
	}
	if r.State != want {
		return false, fmt.Errorf("%w: row is %v, lease is for %v", ErrLeaseLost, r.State, p)
	}
	if !now.Before(r.LeaseUntil) {
		observed = now.After(r.SeenAt)
		if observed {
			r.SeenAt = now
		}
		return observed, fmt.Errorf("%w: lease ended at %s, now %s", ErrLeaseLost,
			r.LeaseUntil.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return false, nil
}

// Renew extends the lease l to now+leaseFor. On ErrLeaseLost, changed reports whether the row
// recorded the refusal (the caller persists it either way it changed).
func (r *Row) Renew(l Lease, leaseFor time.Duration, now time.Time) (Lease, bool, error) {
	if leaseFor <= 0 {
		return Lease{}, false, fmt.Errorf("%w: lease length must be positive", ErrInvalid)
	}
	if observed, err := r.holds(l, l.Phase, now); err != nil {
		return Lease{}, observed, err
	}
	r.LeaseUntil = now.Add(leaseFor)
	r.UpdatedAt = now
	out := l
	out.Expires = r.LeaseUntil
	return out, true, nil
}

// Save freezes a report (given by its reference) under the executing lease l. A repeated Save
// of the same report under the same fence answers again (changed false).
func (r *Row) Save(l Lease, ref ReportRef, now time.Time) (Lease, bool, error) {
	if r.State == StateSaved && r.EvaluationID == l.EvaluationID && r.Report.Fence == l.Fence && r.Report.Digest == ref.Digest {
		return r.publishLeaseOf(l), false, nil
	}
	if l.Phase != PhaseExecute {
		return Lease{}, false, fmt.Errorf("%w: save needs an executing lease, got %v", ErrInvalid, l.Phase)
	}
	if observed, err := r.holds(l, PhaseExecute, now); err != nil {
		return Lease{}, observed, err
	}
	ref.Fence = l.Fence
	r.Report = ref
	r.State = StateSaved
	r.PublishSince = now
	r.UpdatedAt = now
	return r.publishLeaseOf(l), true, nil
}

func (r *Row) publishLeaseOf(l Lease) Lease {
	out := r.lease(PhasePublish, r.PublishAttempts)
	out.Owner = l.Owner
	out.Fence = l.Fence
	return out
}

// Complete marks the row done for a staged result whose report matches the saved one. It
// reports whether the row changed: a repeat on a done row changes nothing.
func (r *Row) Complete(s Staged, now time.Time) (bool, error) {
	if s.Lease.EvaluationID != r.EvaluationID {
		return false, fmt.Errorf("%w: staged evaluation %s, row holds %s", ErrLeaseLost, s.Lease.EvaluationID, r.EvaluationID)
	}
	switch r.State {
	case StateDone:
		return false, nil
	case StateAbandoned, StateSuperseded:
		return false, fmt.Errorf("%w: row was %v: %s", ErrLeaseLost, r.State, r.Reason)
	case StateSaved:
	default:
		return false, fmt.Errorf("%w: complete of a row that is %v", ErrInvalid, r.State)
	}
	if SumBody(s.Report) != r.Report.Digest {
		return false, fmt.Errorf("%w: staged report does not match the saved one", ErrInvalid)
	}
	r.State = StateDone
	r.Owner, r.LeaseUntil, r.NotBefore = "", time.Time{}, time.Time{}
	r.UpdatedAt = now
	return true, nil
}

// Abandon ends a saved row under its live publishing lease, keeping the reason.
func (r *Row) Abandon(s Staged, reason string, now time.Time) (bool, error) {
	if s.Lease.EvaluationID == r.EvaluationID && r.State.Terminal() {
		return false, nil
	}
	if observed, err := r.holds(s.Lease, PhasePublish, now); err != nil {
		return observed, err
	}
	if reason == "" {
		reason = "unspecified"
	}
	r.State = StateAbandoned
	r.Reason = reason
	r.Owner, r.LeaseUntil, r.NotBefore = "", time.Time{}, time.Time{}
	r.UpdatedAt = now
	return true, nil
}

// Supersede ends a saved row whose verdict a newer one on the same subject replaced (by; zero
// for a late verdict that found another status standing), under its publishing lease. The
// verdict is never posted; a repeat on a superseded row changes nothing.
func (r *Row) Supersede(s Staged, by Key, now time.Time) (bool, error) {
	if s.Lease.EvaluationID == r.EvaluationID && r.State == StateSuperseded {
		return false, nil
	}
	if observed, err := r.holds(s.Lease, PhasePublish, now); err != nil {
		return observed, err
	}
	r.State = StateSuperseded
	r.SupersededBy = by
	if by.IsZero() {
		r.Reason = "late: another status stood on the subject, and its record had been forgotten"
	} else {
		r.Reason = "superseded by " + by.String()
	}
	r.Owner, r.LeaseUntil, r.NotBefore = "", time.Time{}, time.Time{}
	r.UpdatedAt = now
	return true, nil
}

// Revive returns an abandoned row to saved with its frozen report, at now. evaluationID, when
// not empty, must be the row's. It reports whether the row changed: a saved row is left as it
// is. The caller checks that the report itself is still stored.
func (r *Row) Revive(evaluationID string, now time.Time) (bool, error) {
	if evaluationID != "" && evaluationID != r.EvaluationID {
		return false, fmt.Errorf("%w: row holds evaluation %s, not %s", ErrInvalid, r.EvaluationID, evaluationID)
	}
	switch r.State {
	case StateSaved:
		return false, nil
	case StateAbandoned:
	default:
		return false, fmt.Errorf("%w: only an abandoned row can be revived; this one is %v", ErrInvalid, r.State)
	}
	if r.Report.IsZero() {
		return false, fmt.Errorf("%w: the row was abandoned before it saved a result", ErrInvalid)
	}
	r.State = StateSaved
	r.Reason = ""
	r.Owner, r.LeaseUntil, r.NotBefore = "", time.Time{}, time.Time{}
	r.PublishAttempts = 0
	r.PublishSince = now
	r.UpdatedAt = now
	return true, nil
}

// Release gives the lease back: the row waits until notBefore for its next claim.
func (r *Row) Release(l Lease, notBefore, now time.Time) error {
	if err := r.giveBack(l, notBefore, now); err != nil {
		return err
	}
	if l.Phase == PhaseExecute {
		r.Failures++
	}
	return nil
}

// giveBack ends the lease l (Release and Unclaim), holding off claims until notBefore.
func (r *Row) giveBack(l Lease, notBefore, now time.Time) error {
	if l.EvaluationID != r.EvaluationID || l.Fence != r.Fence || r.Owner == "" {
		return fmt.Errorf("%w: release of fence %d, row holds fence %d", ErrLeaseLost, l.Fence, r.Fence)
	}
	switch {
	case l.Phase == PhaseExecute && r.State == StateRunning:
		r.State = StatePending
	case l.Phase == PhasePublish && r.State == StateSaved:
	default:
		return fmt.Errorf("%w: row is %v, lease is for %v", ErrLeaseLost, r.State, l.Phase)
	}
	r.Owner, r.LeaseUntil = "", time.Time{}
	r.NotBefore = notBefore.Round(0)
	r.UpdatedAt = now
	return nil
}

// Unclaim releases l as Release does and hands back the attempt its grant counted (the
// row's count is the lease's: its fence is the row's).
func (r *Row) Unclaim(l Lease, notBefore, now time.Time) error {
	if err := r.giveBack(l, notBefore, now); err != nil {
		return err
	}
	if l.Phase == PhaseExecute {
		r.Attempts = max(l.Attempt-1, 0)
	} else {
		r.PublishAttempts = max(l.Attempt-1, 0)
	}
	return nil
}

// Removable reports whether Cleanup may forget the row at now: done or abandoned, not
// permanent, and retention ended strictly before now. Cleanup passes its own now (the one it
// persists as the high-water), never one raised by the row's times: after the row is gone,
// only the high-water keeps a replay of its requests stale.
func (r *Row) Removable(now time.Time) bool {
	return r.State.Terminal() && !r.Permanent && !r.RetainUntil.IsZero() && now.After(r.RetainUntil)
}

// Stranded reports whether the row is unfinished, holds no live lease and has been idle for at
// least after.
func (r *Row) Stranded(now time.Time, after time.Duration) bool {
	if r.State.Terminal() || r.leaseLive(now) || now.Before(r.NotBefore) {
		return false
	}
	return now.Sub(MaxTime(r.UpdatedAt, r.NotBefore)) >= after
}

// StrandedRow describes the row for re-enqueueing.
func (r *Row) StrandedRow() StrandedRow {
	return StrandedRow{Key: r.Key, BindingDigest: r.Binding.Digest(), State: r.State, Since: r.UpdatedAt}
}

// Check reports a row whose fields contradict each other; backends call it after decoding so
// a damaged row fails closed instead of being acted on.
func (r *Row) Check() error {
	switch {
	case r.Binding.Key() != r.Key:
		return fmt.Errorf("%w: row key does not match its binding", ErrCorrupt)
	case r.EvaluationID == "":
		return fmt.Errorf("%w: row has no evaluation id", ErrCorrupt)
	case r.State < StatePending || r.State > StateSuperseded:
		return fmt.Errorf("%w: row state %d", ErrCorrupt, int(r.State))
	case r.Permanent != r.RetainUntil.IsZero():
		return fmt.Errorf("%w: row permanence and retention disagree", ErrCorrupt)
	case r.Permanent && r.BodyTime:
		return fmt.Errorf("%w: a permanent row bounded by a body time", ErrCorrupt)
	case (r.State == StateSaved || r.State == StateDone) && r.Report.IsZero():
		return fmt.Errorf("%w: %v row names no report", ErrCorrupt, r.State)
	case !r.SupersededBy.IsZero() && r.State != StateSuperseded:
		return fmt.Errorf("%w: a %v row names a verdict that superseded it", ErrCorrupt, r.State)
	}
	return nil
}

// Equal reports whether two rows hold the same record, for tests and read-back checks.
func (r *Row) Equal(o *Row) bool {
	return r.Key == o.Key && r.Binding == o.Binding && r.EvaluationID == o.EvaluationID && r.State == o.State &&
		bytes.Equal(r.Change, o.Change) && r.Permanent == o.Permanent && r.SignedAt.Equal(o.SignedAt) && r.BodyTime == o.BodyTime &&
		r.RetainUntil.Equal(o.RetainUntil) && r.EventAt.Equal(o.EventAt) && r.SupersededBy == o.SupersededBy && r.Fence == o.Fence && r.Owner == o.Owner &&
		r.LeaseUntil.Equal(o.LeaseUntil) && r.NotBefore.Equal(o.NotBefore) && r.Attempts == o.Attempts && r.Failures == o.Failures &&
		r.PublishAttempts == o.PublishAttempts && r.PublishSince.Equal(o.PublishSince) && r.Report == o.Report && r.Reason == o.Reason &&
		r.CreatedAt.Equal(o.CreatedAt) && r.UpdatedAt.Equal(o.UpdatedAt) && r.SeenAt.Equal(o.SeenAt)
}

// NewEvaluationID returns a fresh random evaluation id from the given random bytes source.
func NewEvaluationID(random func([]byte) (int, error)) (string, error) {
	var b [16]byte
	if _, err := random(b[:]); err != nil {
		return "", fmt.Errorf("ledger: evaluation id: %w", err)
	}
	const hexd = "0123456789abcdef"
	out := make([]byte, 32)
	for i, c := range b {
		out[2*i], out[2*i+1] = hexd[c>>4], hexd[c&15]
	}
	return string(out), nil
}
