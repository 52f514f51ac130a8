package ledger

import (
	"bytes"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Subject is what a user looks at: one status context on one commit of one repository, at one
// provider's API. Verdicts of several deliveries may be published to one subject (a pull
// request opened, then edited, on the same head commit); the one left standing must be the
// newest event's. For each subject the ledger keeps one small record (SubjectRecord) that
// decides which verdict may post, and when.
type Subject struct {
	// Publisher names the API the status is posted to: the provider kind and its base URL
	// ("github https://api.github.com"), so two installations never share a subject.
	Publisher  string `json:"publisher"`
	Repository string `json:"repository"`
	SHA        string `json:"sha"`
	// Context is the status context as the provider keys it (GitLab's name, Bitbucket's key).
	Context string `json:"context"`
}

// MaxSubjectName bounds the four parts of a Subject together, in bytes.
const MaxSubjectName = 2 << 10

// Key returns the subject's key.
func (s Subject) Key() SubjectKey {
	return SubjectKey(framedDigest("amiss/subject/v1", s.Publisher, s.Repository, s.SHA, s.Context))
}

// Validate reports a subject no ledger stores: a part missing or not UTF-8 (a record could not
// keep it as it is), or the whole over MaxSubjectName.
func (s Subject) Validate() error {
	if s.Publisher == "" || s.Repository == "" || s.SHA == "" || s.Context == "" {
		return fmt.Errorf("%w: a subject needs publisher, repository, sha and context", ErrInvalid)
	}
	if !utf8.ValidString(s.Publisher) || !utf8.ValidString(s.Repository) || !utf8.ValidString(s.SHA) || !utf8.ValidString(s.Context) {
		return fmt.Errorf("%w: a subject's names must be UTF-8", ErrInvalid)
	}
	if n := len(s.Publisher) + len(s.Repository) + len(s.SHA) + len(s.Context); n > MaxSubjectName {
		return fmt.Errorf("%w: subject of %d bytes, ceiling %d", ErrTooLarge, n, MaxSubjectName)
	}
	return nil
}

func (s Subject) String() string {
	return fmt.Sprintf("%s %s@%s %q", s.Publisher, s.Repository, s.SHA, s.Context)
}

// SubjectKey identifies a subject record: a SHA-256 digest of the subject's parts.
type SubjectKey [32]byte

// String returns the key as 64 lower-case hex digits.
func (k SubjectKey) String() string { return Key(k).String() }

// Short returns the first 12 hex digits, for log lines.
func (k SubjectKey) Short() string { return Key(k).Short() }

// IsZero reports whether k is the zero key, which no subject has.
func (k SubjectKey) IsZero() bool { return k == SubjectKey{} }

// MarshalText encodes the key as hex.
func (k SubjectKey) MarshalText() ([]byte, error) { return Key(k).MarshalText() }

// UnmarshalText decodes a hex key.
func (k *SubjectKey) UnmarshalText(b []byte) error { return (*Key)(k).UnmarshalText(b) }

// ParseSubjectKey parses 64 hex digits as a SubjectKey.
func ParseSubjectKey(s string) (SubjectKey, error) {
	k, err := ParseKey(s)
	return SubjectKey(k), err
}

// Order places a verdict among the verdicts of its subject. The newer of two is the one whose
// event the provider signed later (EventAt: a time inside the signed body, or a signed header
// time); a delivery whose signature proves no time is placed at its admission, by the ledger's
// clock. Equal times (within the provider's resolution: GitHub's whole seconds) are broken by
// what the evaluation learnt of the two events (Tie), then by admission (AdmittedAt), then by
// key, so any two verdicts are ordered, the same way by every runner.
type Order struct {
	Key        Key       `json:"key"`
	EventAt    time.Time `json:"event_at,omitzero"`
	AdmittedAt time.Time `json:"admitted_at"`
	Tie        Tie       `json:"tie,omitzero"`
}

// Tie is what orders two verdicts of one subject whose events carry the same time, before
// their admission does: what the payload proves of the event's place (From), and what the
// provider showed when the verdict was evaluated (Seen). The evaluation fills it; the zero Tie
// knows nothing, and leaves the order to admission.
type Tie struct {
	// Inputs names what the verdict was evaluated on that the provider's events change (a
	// pull request's title and target branch, on the subject's commit), as a digest.
	Inputs Digest `json:"inputs,omitzero"`
	// From names the inputs the event changed, as its payload proves it (an edit's previous
	// title): the event came after any verdict whose Inputs are From.
	From Digest `json:"from,omitzero"`
	// Starts says the event made the subject's commit the pull request's head (it opened the
	// pull request, or pushed the commit to it), as its payload proves it: every edit of the
	// pull request carrying that head (From set) came after it.
	Starts bool `json:"starts,omitempty"`
	// Seen is what a read of the provider at evaluation found of Inputs.
	Seen Seen `json:"seen,omitempty"`
}

// Seen is what a read of the provider at a verdict's evaluation found of its inputs.
type Seen int8

// What a read found.
const (
	// SeenNothing: the provider was not read (no reader, or the read failed).
	SeenNothing Seen = 0
	// SeenCurrent: the provider showed the verdict's inputs.
	SeenCurrent Seen = 1
	// SeenStale: the provider showed other inputs: an event after the verdict's had changed
	// them.
	SeenStale Seen = -1
)

// IsZero reports whether t knows nothing.
func (t Tie) IsZero() bool { return t == Tie{} }

// compare orders t's verdict against u's, of events with the same time: -1 when t's is the
// older, 1 when it is the newer, 0 when neither tells. What a payload proves decides first:
// an event that changed the other's inputs came after it, and so did an edit of the head the
// other's event set. Then what the provider showed, when both were read: the verdict whose
// inputs were current is newer than one whose inputs had already changed. A verdict read and
// one not read tell nothing (the unread may be either).
func (t Tie) compare(u Tie) int {
	after := !t.From.IsZero() && (t.From == u.Inputs || u.Starts)  // t's event changed u's inputs, or edited u's head
	before := !u.From.IsZero() && (u.From == t.Inputs || t.Starts) // u's event changed t's, or edited t's head
	switch {
	case after && !before:
		return 1
	case before && !after:
		return -1
	case t.Seen != SeenNothing && u.Seen != SeenNothing && t.Seen != u.Seen:
		if t.Seen == SeenCurrent {
			return 1
		}
		return -1
	}
	return 0
}

// At is the time the verdict is ordered by: its event time, or its admission when it has none.
func (o Order) At() time.Time {
	if o.EventAt.IsZero() {
		return o.AdmittedAt
	}
	return o.EventAt
}

// Before reports whether o is older than p.
func (o Order) Before(p Order) bool {
	if a, b := o.At(), p.At(); !a.Equal(b) {
		return a.Before(b)
	}
	if c := o.Tie.compare(p.Tie); c != 0 {
		return c < 0
	}
	if !o.AdmittedAt.Equal(p.AdmittedAt) {
		return o.AdmittedAt.Before(p.AdmittedAt)
	}
	return bytes.Compare(o.Key[:], p.Key[:]) < 0
}

// SubjectHorizonMargin is added to the admission windows in SubjectHorizon: it covers clocks
// of hosts (or store nodes) that disagree by less than this.
const SubjectHorizonMargin = time.Hour

// SubjectHorizon is how long after its newest verdict's time a subject record is kept (once
// nothing is in flight): past it, any delivery still admissible is newer than that verdict,
// since no route accepts an event older than the longest accepted age. A delivery admitted
// before and still unpublished past it is late (SubjectGrant.Late).
func (l Limits) SubjectHorizon() time.Duration {
	return max(l.SignedAgeCeiling, l.BodyAgeCeiling) + SubjectHorizonMargin
}

// SubjectRequest asks for the right to post one verdict to its subject.
type SubjectRequest struct {
	Subject      Subject
	Order        Order
	EvaluationID string
	// HoldFor bounds the post: the grant ends HoldFor after it is given, and the poster must
	// have given up on every request it sent by then.
	HoldFor time.Duration
	// Settle is how long after the poster gave up on a request the provider may still apply
	// it (the route's setting): until then, what stands is not known.
	Settle time.Duration
	// Wake, when set, makes the request a park: the verdict was told SubjectWait, its message
	// is set aside until then, and Wake says how to bring it back sooner (opaque to the
	// ledger: the runner's queue reads it; at most MaxWake bytes of wakeChars). A park never
	// grants. While another verdict's grant is live, it names this verdict the record's
	// waiter, and the report that ends that grant hands Wake back (SubjectGrant.Wake), so the
	// waiter posts at the report rather than at the grant's end. Otherwise it answers when to
	// come back: at once when nothing holds the subject any more (the report landed before the
	// park), superseded when a newer verdict is recorded.
	Wake string
	// Prior are the records of the same repository, commit and context kept under other
	// spellings of the subject's publisher (written before publisher identities were
	// normalised), as read just before the request. The decision honours them as if they were
	// this record's past: a verdict older than one recorded there is superseded (and that
	// newer verdict recorded here), a post under one that may still land is waited for, and a
	// post of this verdict there is read back before it is posted again.
	Prior []SubjectRecord
}

// MaxWake bounds a park's Wake, in bytes: an SQS receipt handle (at most 1,024 characters)
// and a prefix of up to 16 naming the queue it belongs to.
const MaxWake = 1024 + 16

// wakeChars are the bytes a Wake may hold: JSON writes each as one byte, so a record with a
// waiter stays within what a backend reads (base64, as SQS receipt handles are, and the
// separators of a key).
const wakeChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=:._-"

// ValidWake reports whether w can be a park's Wake.
func ValidWake(w string) bool {
	if w == "" || len(w) > MaxWake {
		return false
	}
	for i := 0; i < len(w); i++ {
		if strings.IndexByte(wakeChars, w[i]) < 0 {
			return false
		}
	}
	return true
}

// Validate reports a request the contract cannot decide.
func (q SubjectRequest) Validate() error {
	if err := q.Subject.Validate(); err != nil {
		return err
	}
	switch {
	case q.Order.Key.IsZero() || q.Order.AdmittedAt.IsZero():
		return fmt.Errorf("%w: a subject request needs the verdict's key and admission time", ErrInvalid)
	case q.EvaluationID == "":
		return fmt.Errorf("%w: a subject request needs the verdict's evaluation id", ErrInvalid)
	case q.HoldFor <= 0 || q.Settle < 0:
		return fmt.Errorf("%w: a subject request needs a positive hold and a settle time not below zero", ErrInvalid)
	case q.Wake != "" && !ValidWake(q.Wake):
		return fmt.Errorf("%w: a park's wake is at most %d bytes of base64 and \":._-\"", ErrInvalid, MaxWake)
	}
	for _, p := range q.Prior {
		if s := p.Subject; s.Repository != q.Subject.Repository || s.SHA != q.Subject.SHA || s.Context != q.Subject.Context ||
			s.Publisher == q.Subject.Publisher {
			return fmt.Errorf("%w: a prior record must be of the same commit and context under another publisher's name", ErrInvalid)
		}
	}
	return nil
}

// SubjectOutcome is what the subject record answers.
type SubjectOutcome int

// The answers of AcquireSubject and ReportSubject.
const (
	// SubjectPost: post the verdict now, under the grant's fence, and report what became of it.
	SubjectPost SubjectOutcome = iota + 1
	// SubjectWait: another post is in flight, or a post of this verdict may still land; come
	// back at RetryAt (park the verdict to be woken sooner: SubjectRequest.Wake). To a park:
	// come back at RetryAt, at once when it is the decision's time.
	SubjectWait
	// SubjectSuperseded: a newer verdict is recorded (By); this one must never be posted. By is
	// zero when a late verdict found another status standing that it cannot order against.
	SubjectSuperseded
	// SubjectStanding: the verdict is known to stand; nothing is left to post.
	SubjectStanding
	// SubjectConfirm: the post landed, but a post whose outcome was unknown may still land
	// over it until RetryAt; read back what stands then.
	SubjectConfirm
	// SubjectRetry: the post's outcome is unknown (or it was refused, or never sent); try again,
	// reading back first, no sooner than RetryAt.
	SubjectRetry
)

var subjectOutcomeNames = map[SubjectOutcome]string{SubjectPost: "post", SubjectWait: "wait", SubjectSuperseded: "superseded",
	SubjectStanding: "standing", SubjectConfirm: "confirm", SubjectRetry: "retry"}

func (o SubjectOutcome) String() string {
	if s, ok := subjectOutcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("SubjectOutcome(%d)", int(o))
}

// VerdictID names one verdict: a delivery's key and its row's evaluation (a key forgotten and
// admitted again is another verdict).
type VerdictID struct {
	Key        Key    `json:"key"`
	Evaluation string `json:"evaluation"`
}

// IsZero reports whether v names no verdict.
func (v VerdictID) IsZero() bool { return v == VerdictID{} }

// SubjectGrant is the subject record's answer.
type SubjectGrant struct {
	Outcome SubjectOutcome
	Subject SubjectKey
	// Order and Evaluation are the verdict the request was for.
	Order      Order
	Evaluation string
	// Fence is the grant's fence (SubjectPost); ReportSubject checks it.
	Fence uint64
	// ReadBack (SubjectPost): a post of this verdict may already stand, or the verdict is
	// late; read what stands before posting, and post only if it is not this verdict.
	ReadBack bool
	// Late (SubjectPost): the subject's record was made when this verdict was already older
	// than the horizon (an earlier record, forgotten, may have held a newer verdict whose
	// status still stands), and no post under it may have landed since, so what stands is not
	// the record's to know; post it only if nothing stands, and report PostOverridden if
	// another status does. A late grant reported applied or unknown (its read-back found
	// nothing standing, or this verdict) makes the record know again.
	Late bool
	// By (SubjectSuperseded) is the newer verdict.
	By Key
	// RetryAt (SubjectWait, SubjectConfirm, SubjectRetry) is when to come back, by the
	// ledger's clock; Decided is the ledger's time of the answer.
	RetryAt, Decided time.Time
	// Wake (an answer to ReportSubject) is the Wake of the verdict parked on the grant just
	// ended: the reporter brings it back now. Waking it is never needed for the order (the
	// waiter comes back at its own time anyway) and never unsafe (whoever comes back asks the
	// record again).
	Wake string
}

// PostOutcome is what became of a post made under a grant.
type PostOutcome int

// Post outcomes, as the poster reports them.
const (
	// PostApplied: the provider answered that it applied the status, or a read-back shows this
	// verdict standing.
	PostApplied PostOutcome = iota + 1
	// PostUnknown: the provider may have applied it (a timeout, a cut connection, an answer
	// that does not say).
	PostUnknown
	// PostRefused: the provider answered that it did not apply it, or nothing was sent.
	PostRefused
	// PostOverridden: a late verdict read back another status standing, and posted nothing.
	PostOverridden
)

var postOutcomeNames = map[PostOutcome]string{PostApplied: "applied", PostUnknown: "unknown", PostRefused: "refused",
	PostOverridden: "overridden"}

func (o PostOutcome) String() string {
	if s, ok := postOutcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("PostOutcome(%d)", int(o))
}

// SubjectRecord is the ledger's record of one subject: the newest verdict that asked to be
// published, the one verdict allowed to post at a time, and what is known to stand. Backends
// store it (each in its own format) and apply the methods below inside one atomic
// read-modify-write of the record; the methods never do I/O.
//
// The guarantee it gives, with posters that keep to their grants: once the newest verdict
// is reported standing, every status the provider creates for the subject afterwards is
// that verdict's or a newer one's. An older verdict never gets a grant once a newer one is
// recorded; a newer one waits while an older one holds a grant; and a verdict is called
// standing only when it was posted (or read back) under a grant given after every post whose
// outcome was unknown had settled.
type SubjectRecord struct {
	Key     SubjectKey `json:"key"`
	Subject Subject    `json:"subject"`
	// Newest is the newest verdict that asked to be published; NewestEvaluation is its row's
	// evaluation id.
	Newest           Order  `json:"newest"`
	NewestEvaluation string `json:"newest_evaluation"`
	// Holder is the verdict allowed to post (zero: none), under Fence, from HolderSince until
	// HolderUntil; HolderSettle is its route's settle time.
	Holder       VerdictID     `json:"holder,omitzero"`
	Fence        uint64        `json:"fence"`
	HolderSince  time.Time     `json:"holder_since,omitzero"`
	HolderUntil  time.Time     `json:"holder_until,omitzero"`
	HolderSettle time.Duration `json:"holder_settle,omitempty"`
	// Posted is the last verdict whose post may have reached the provider; Stands is the
	// verdict known to stand (zero: not known).
	Posted VerdictID `json:"posted,omitzero"`
	Stands VerdictID `json:"stands,omitzero"`
	// SettleUntil is when every post whose outcome is unknown has been applied or dropped.
	SettleUntil time.Time `json:"settle_until,omitzero"`
	// Waiter is the verdict parked on the current grant (zero: none), and WaiterWake how to
	// wake it (SubjectRequest.Wake): the report that ends the grant hands it back. Any new
	// grant clears it.
	Waiter     VerdictID `json:"waiter,omitzero"`
	WaiterWake string    `json:"waiter_wake,omitempty"`
	// Blind is set while the record knows nothing of what stands: from its creation until a
	// post under it is reported applied or unknown (a grant that ends without a report may
	// have read back another status and died: it teaches nothing). A verdict older than the
	// horizon when a blind record was made is late (SubjectGrant.Late).
	Blind     bool      `json:"blind,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// NewSubjectRecord returns the record of a subject nothing was recorded for (or whose record
// was forgotten), at now. Acquire fills it.
func NewSubjectRecord(s Subject, now time.Time) SubjectRecord {
	return SubjectRecord{Key: s.Key(), Subject: s, CreatedAt: now, UpdatedAt: now, Blind: true}
}

// Now returns the effective now for a decision on the record.
func (r *SubjectRecord) Now(clock, highWater time.Time) time.Time {
	return MaxTime(clock, highWater, r.UpdatedAt)
}

func (r *SubjectRecord) held(now time.Time) bool {
	return !r.Holder.IsZero() && now.Before(r.HolderUntil)
}

// endHold ends the current grant, its post's outcome unknown unless known is set: a post it
// may have sent can still be applied until HolderSettle after the grant ended.
func (r *SubjectRecord) endHold(until time.Time, known bool) {
	if !known {
		r.Posted = r.Holder
		r.SettleUntil = MaxTime(r.SettleUntil, until.Add(r.HolderSettle))
	}
	r.Holder, r.HolderSince, r.HolderUntil, r.HolderSettle = VerdictID{}, time.Time{}, time.Time{}, 0
}

// Acquire decides a request to post at now. horizon is the ledger's SubjectHorizon. It
// reports whether the record changed (the caller then persists it; a record that was new is
// persisted whenever it changed).
func (r *SubjectRecord) Acquire(q SubjectRequest, horizon time.Duration, now time.Time) (SubjectGrant, bool, error) {
	if err := q.Validate(); err != nil {
		return SubjectGrant{}, false, err
	}
	if q.Subject.Key() != r.Key {
		return SubjectGrant{}, false, fmt.Errorf("%w: request for subject %s, record %s", ErrInvalid, q.Subject.Key().Short(), r.Key.Short())
	}
	g := SubjectGrant{Subject: r.Key, Order: q.Order, Evaluation: q.EvaluationID, Decided: now}
	v := VerdictID{Key: q.Order.Key, Evaluation: q.EvaluationID}
	if q.Wake != "" {
		return r.park(q, v, g, now)
	}
	changed := false
	for _, p := range q.Prior {
		if !p.Newest.Key.IsZero() && (r.Newest.Key.IsZero() || r.Newest.Before(p.Newest)) && q.Order.Before(p.Newest) {
			// Recorded here, the newer verdict supersedes this one now and from now on.
			r.Newest, r.NewestEvaluation, changed = p.Newest, p.NewestEvaluation, true
		}
	}
	priorUntil, priorPosted := prior(q, v)
	fresh := r.Newest.Key.IsZero()
	if !fresh && q.Order.Before(r.Newest) {
		g.Outcome, g.By = SubjectSuperseded, r.Newest.Key
		return g, r.touch(changed, now), nil
	}
	if fresh || r.Newest.Before(q.Order) {
		r.Newest, r.NewestEvaluation = q.Order, q.EvaluationID
		changed = true
	}
	if r.held(now) {
		// An older verdict's post (or an earlier attempt at this one) is in flight: wait for it.
		g.Outcome, g.RetryAt = SubjectWait, r.HolderUntil
		return g, r.touch(changed, now), nil
	}
	if !r.Holder.IsZero() {
		// A grant ended without a report: its post's outcome is unknown.
		r.endHold(r.HolderUntil, false)
		changed = true
	}
	if now.Before(priorUntil) {
		// A post under a prior record may still land: posting before it has would let it land
		// over this verdict unseen.
		g.Outcome, g.RetryAt = SubjectWait, priorUntil
		return g, r.touch(changed, now), nil
	}
	if r.Stands == v && !now.Before(r.SettleUntil) {
		g.Outcome = SubjectStanding
		return g, r.touch(changed, now), nil
	}
	if r.Posted == v && now.Before(r.SettleUntil) {
		// A post of this verdict may still land: reading back before then could miss it and
		// post it twice.
		g.Outcome, g.RetryAt = SubjectWait, r.SettleUntil
		return g, r.touch(changed, now), nil
	}
	r.Fence++
	r.Holder, r.HolderSince, r.HolderUntil, r.HolderSettle = v, now, now.Add(q.HoldFor), q.Settle
	r.Waiter, r.WaiterWake = VerdictID{}, "" // parked on a grant that is over
	if r.Stands != v {
		r.Stands = VerdictID{} // what stands is in flux until this grant reports
	}
	g.Outcome, g.Fence = SubjectPost, r.Fence
	g.Late = r.Blind && r.CreatedAt.After(q.Order.At().Add(horizon))
	g.ReadBack = g.Late || r.Posted == v || priorPosted
	return g, r.touch(true, now), nil
}

// prior is what q's prior records say of v: until when a post under one may still land, and
// whether a post of v may stand under one.
func prior(q SubjectRequest, v VerdictID) (until time.Time, posted bool) {
	for _, p := range q.Prior {
		until = MaxTime(until, p.SettleUntil)
		if !p.Holder.IsZero() {
			until = MaxTime(until, p.HolderUntil.Add(p.HolderSettle)) // a post under its grant may land until then
		}
		posted = posted || p.Posted == v || p.Holder == v || p.Stands == v
	}
	return until, posted
}

// park decides a park (q.Wake set) at now: it never grants, and changes the record only to
// name v the waiter of a live grant held by another verdict.
func (r *SubjectRecord) park(q SubjectRequest, v VerdictID, g SubjectGrant, now time.Time) (SubjectGrant, bool, error) {
	switch {
	case !r.Newest.Key.IsZero() && q.Order.Before(r.Newest):
		g.Outcome, g.By = SubjectSuperseded, r.Newest.Key
		return g, false, nil
	case r.held(now) && r.Holder != v:
		g.Outcome, g.RetryAt = SubjectWait, r.HolderUntil
		changed := r.Waiter != v || r.WaiterWake != q.Wake
		r.Waiter, r.WaiterWake = v, q.Wake
		return g, r.touch(changed, now), nil
	case r.held(now):
		g.Outcome, g.RetryAt = SubjectWait, r.HolderUntil // its own grant: nobody else's report wakes it
	default:
		// The grant it waited for is over: come back now, or once what it also waits for (a
		// post of its own, or under a prior record, that may still land) has settled.
		g.Outcome, g.RetryAt = SubjectWait, now
		if r.Posted == v {
			g.RetryAt = MaxTime(g.RetryAt, r.SettleUntil)
		}
		until, _ := prior(q, v)
		g.RetryAt = MaxTime(g.RetryAt, until)
	}
	return g, false, nil
}

func (r *SubjectRecord) touch(changed bool, now time.Time) bool {
	if changed {
		r.UpdatedAt = now
	}
	return changed
}

// Report records what became of the post made under the grant g, at now, and answers what the
// poster does next: SubjectStanding (complete the row), SubjectConfirm (come back at RetryAt
// and read back), SubjectRetry (the post may or may not have landed, or it was refused: try
// again no sooner than RetryAt, reading back first) or SubjectSuperseded (a late verdict that
// found another status standing). A report under a grant that is no longer the record's is
// ErrLeaseLost and changes nothing: whoever took over already counted its post as unknown.
func (r *SubjectRecord) Report(g SubjectGrant, o PostOutcome, now time.Time) (SubjectGrant, error) {
	if g.Outcome != SubjectPost || g.Subject != r.Key {
		return SubjectGrant{}, fmt.Errorf("%w: a report needs a grant to post on this subject", ErrInvalid)
	}
	v := VerdictID{Key: g.Order.Key, Evaluation: g.Evaluation}
	if g.Fence != r.Fence || r.Holder != v {
		return SubjectGrant{}, fmt.Errorf("%w: grant %d of subject %s is not the record's (fence %d)", ErrLeaseLost,
			g.Fence, r.Key.Short(), r.Fence)
	}
	since := r.HolderSince
	out := SubjectGrant{Subject: r.Key, Order: g.Order, Evaluation: g.Evaluation, Decided: now}
	switch o {
	case PostApplied:
		r.Posted, r.Blind = v, false
		r.endHold(now, true)
		if since.Before(r.SettleUntil) {
			// Posted while an older post could still land over it: confirm it once that is over.
			out.Outcome, out.RetryAt = SubjectConfirm, r.SettleUntil
		} else {
			r.Stands = v
			out.Outcome = SubjectStanding
		}
	case PostUnknown:
		r.Blind = false // posted after a read-back found nothing standing, or this verdict, if late
		r.endHold(now, false)
		out.Outcome, out.RetryAt = SubjectRetry, r.SettleUntil
	case PostRefused:
		r.endHold(now, true)
		out.Outcome, out.RetryAt = SubjectRetry, now
	case PostOverridden:
		if !g.Late {
			return SubjectGrant{}, fmt.Errorf("%w: only a late verdict can be overridden by what stands", ErrInvalid)
		}
		r.endHold(now, true)
		out.Outcome = SubjectSuperseded
	default:
		return SubjectGrant{}, fmt.Errorf("%w: post outcome %v", ErrInvalid, o)
	}
	// The grant is over: the verdict parked on it may post now.
	out.Wake, r.Waiter, r.WaiterWake = r.WaiterWake, VerdictID{}, ""
	r.UpdatedAt = now
	return out, nil
}

// Removable reports whether Cleanup may forget the record at now: no grant is live, no post
// can still land, the newest verdict is older than the horizon (so any delivery still
// admissible is newer than it), and the newest verdict's row can publish no more. newest is
// that row as the ledger holds it, nil when it was forgotten; an abandoned row can be revived,
// so its record stays until the row is gone.
func (r *SubjectRecord) Removable(now time.Time, horizon time.Duration, newest *Row) bool {
	settled := r.SettleUntil
	if !r.Holder.IsZero() {
		settled = MaxTime(settled, r.HolderUntil.Add(r.HolderSettle)) // a grant that ended without a report
	}
	if !now.After(settled) || !now.After(r.Newest.At().Add(horizon)) {
		return false
	}
	if newest == nil || newest.EvaluationID != r.NewestEvaluation {
		return true
	}
	return newest.State == StateDone || newest.State == StateSuperseded
}

// NewestMatters reports whether Forgettable needs the newest verdict's row: not once that
// verdict is known to stand, since its row then has nothing to post that a record made anew
// would not let it (it reads back, and finds itself standing). A backend reads that row only
// when it matters.
func (r *SubjectRecord) NewestMatters() bool {
	return r.Stands.Key != r.Newest.Key || r.Stands.Evaluation != r.NewestEvaluation
}

// Forgettable is the one rule by which Cleanup forgets a subject record, on every backend: the
// record is Removable at now (newest is the newest verdict's row as read, nil when forgotten;
// it is not looked at when NewestMatters says so), every verdict not newer than its newest one
// will be late to a record made anew, and no write to the record can still land.
//
// A record made anew is made at the time of the process that asks for it, which may read
// behind now (another host's clock, another node of the store), and a verdict is late only if
// it is older than the horizon by that time: behind is how far it may read behind now, and the
// record is kept until its newest verdict is older than the horizon by now less behind. Were it
// forgotten sooner, an older verdict asking on a clock behind would be granted a post with no
// read-back, over the newer verdict standing. A backend whose every decision reads a time that
// cleanup persists before it forgets anything (a file ledger's high-water) gives zero.
//
// lateWrites is how long after it was sent a write can still land on the backend's storage,
// and written the times the record was last written, by the clock that dates the storage's
// writes (with lateWrites positive and no time given, the record is kept). On a file system
// a write lands before its call returns or never (lateWrites zero). On an object store a
// request held in the network can land up to its signature's life after it was sent, and a
// held create (If-None-Match) lands on an empty key: a record forgotten sooner would come
// back as its oldest verdict left it, with copies of the writes that followed it landing
// over it.
func (r *SubjectRecord) Forgettable(now time.Time, horizon time.Duration, newest *Row, behind, lateWrites time.Duration, written ...time.Time) bool {
	if !r.NewestMatters() {
		newest = nil
	}
	after, ok := r.ForgettableAfter(horizon, behind, lateWrites, written...)
	return ok && now.After(after) && r.Removable(now, horizon, newest)
}

// ForgettableAfter is the instant after which the record's times let Forgettable forget it,
// with the same horizon, behind, lateWrites and written: its newest verdict past the horizon
// by a clock behind, its posts settled, and its last write unable to land any more. Whether
// the newest verdict's row still holds it is Forgettable's to judge on the row. ok is false
// when the times never will (writes can land late and no time of the last write is given).
// A backend that schedules its next look at a record kept schedules it just after this.
func (r *SubjectRecord) ForgettableAfter(horizon, behind, lateWrites time.Duration, written ...time.Time) (after time.Time, ok bool) {
	after = MaxTime(r.SettleUntil, r.Newest.At().Add(horizon+max(behind, 0)))
	if !r.Holder.IsZero() {
		after = MaxTime(after, r.HolderUntil.Add(r.HolderSettle)) // a grant that ended without a report
	}
	if lateWrites <= 0 {
		return after, true
	}
	// Without a time of the last write, no wait can be judged over: the record is kept.
	if len(written) == 0 {
		return time.Time{}, false
	}
	return MaxTime(after, MaxTime(written...).Add(lateWrites)), true
}

// Check reports a record whose fields contradict each other, or whose subject no request could
// name (Subject.Validate), as ErrCorrupt: a record as stored is damage, never a refused request.
func (r *SubjectRecord) Check() error {
	switch {
	case r.Subject.Key() != r.Key:
		return fmt.Errorf("%w: subject record key does not match its subject", ErrCorrupt)
	case r.Newest.Key.IsZero() || r.NewestEvaluation == "":
		return fmt.Errorf("%w: subject record names no newest verdict", ErrCorrupt)
	case !r.Holder.IsZero() && (r.HolderUntil.IsZero() || r.Fence == 0):
		return fmt.Errorf("%w: subject record holder has no grant", ErrCorrupt)
	case r.Waiter.IsZero() != (r.WaiterWake == "") || (r.WaiterWake != "" && !ValidWake(r.WaiterWake)):
		return fmt.Errorf("%w: subject record waiter without a valid wake", ErrCorrupt)
	}
	if err := r.Subject.Validate(); err != nil {
		return fmt.Errorf("%w: subject record of a subject no request could name: %v", ErrCorrupt, err)
	}
	return nil
}

// CheckStored reports whether r, as a backend read it back at k, is a record the ledger can have
// stored there: consistent in itself (Check) and k's. It is the check of a subject record as
// stored every backend makes after decoding its own framing. Every failure wraps ErrCorrupt and
// says what is wrong; the backend names the file or object.
func (r *SubjectRecord) CheckStored(k SubjectKey) error {
	if err := r.Check(); err != nil {
		return err
	}
	if r.Key != k {
		return fmt.Errorf("%w: holds the subject record of %s, not of %s", ErrCorrupt, r.Key, k)
	}
	return nil
}
