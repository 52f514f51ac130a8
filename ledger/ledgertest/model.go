package ledgertest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/amiss-ci/amiss/ledger"
)

// OpKind names a ledger call in a history.
type OpKind string

// The calls a history records. Remove is not a call: it is one row that a Cleanup call
// reported removed, judged over that call's interval.
const (
	OpAdmit    OpKind = "admit"
	OpClaim    OpKind = "claim"
	OpRenew    OpKind = "renew"
	OpSave     OpKind = "save"
	OpComplete OpKind = "complete"
	OpAbandon  OpKind = "abandon"
	OpRelease  OpKind = "release"
	OpRevive   OpKind = "revive"
	OpRemove   OpKind = "remove"
	// OpSupersede ends a saved row whose verdict the subject record answered superseded.
	OpSupersede OpKind = "supersede"
	// OpAcquireSubject and OpReportSubject are calls on a subject record (Op.Subject), judged
	// by the subject model (model_subject.go).
	OpAcquireSubject OpKind = "acquire-subject"
	OpReportSubject  OpKind = "report-subject"
	// OpPost is no ledger call: a status the history's provider took, at its place in real
	// time (Call), under a grant of Op.Subject's record (checkStanding).
	OpPost OpKind = "post"
)

// The classes of error the model tells apart. Every other error (unavailable, busy, a crash,
// a lost answer) leaves the outcome unknown: the call may have had no effect or its whole
// effect, at any time after it was made.
const (
	ErrClassNone       = ""
	ErrClassLeaseLost  = "lease-lost"
	ErrClassUnknownRow = "unknown-delivery"
	ErrClassInvalid    = "invalid"
)

// ErrClass classifies err for the model, and reports whether the outcome is known.
func ErrClass(err error) (class string, known bool) {
	switch {
	case err == nil:
		return ErrClassNone, true
	case errors.Is(err, ledger.ErrLeaseLost):
		return ErrClassLeaseLost, true
	case errors.Is(err, ledger.ErrUnknownDelivery):
		return ErrClassUnknownRow, true
	case errors.Is(err, ledger.ErrInvalid):
		return ErrClassInvalid, true
	}
	return "", false
}

// Op is one call of a history, with its input, its answer, and the bounds of the ledger's now
// when it decided: Lo is the decision clock's lowest reading during the call less the
// backend's resolution, Hi the highest reading any clock of the history had given by the time
// the call returned (a high-water or a row's own times can raise the ledger's now that far,
// never further). The same value is the porcupine input and output.
type Op struct {
	Client int        `json:"client"`
	Key    ledger.Key `json:"key"`
	Kind   OpKind     `json:"kind"`
	// Call and Return order the calls in real time (Return is MaxInt64 for an unknown outcome).
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	Lo     int64 `json:"lo"`
	Hi     int64 `json:"hi"`
	// Back is the world's SteppedBack when the call was made: for a call whose process died,
	// Lo is lowered by the steps back until the death.
	Back int64 `json:"back,omitempty"`

	// Inputs.
	SignedAt  int64         `json:"signed_at,omitempty"` // admit: 0 for a permanent delivery
	HWFloor   int64         `json:"hw_floor,omitempty"`  // admit: a completed cleanup's high-water
	Fence     uint64        `json:"fence,omitempty"`     // lease calls
	Eval      string        `json:"eval,omitempty"`      // lease calls, remove
	Phase     ledger.Phase  `json:"phase,omitempty"`     // lease calls
	LeaseFor  time.Duration `json:"lease_for,omitempty"` // claim, renew
	Report    string        `json:"report,omitempty"`    // save, complete, abandon: digest
	NotBefore int64         `json:"not_before,omitempty"`

	// The answer.
	Unknown     bool         `json:"unknown,omitempty"`
	Err         string       `json:"err,omitempty"`
	Outcome     string       `json:"outcome,omitempty"` // admit and claim outcomes by name
	OutEval     string       `json:"out_eval,omitempty"`
	OutFence    uint64       `json:"out_fence,omitempty"`
	Expires     int64        `json:"expires,omitempty"`
	RetainUntil int64        `json:"retain_until,omitempty"`
	OutReport   string       `json:"out_report,omitempty"` // claim (publish): digest of the staged report
	OutState    ledger.State `json:"out_state,omitempty"`  // revive

	// Subject calls: the subject, the verdict's order (Key is the verdict's key), the grant's
	// length, and the post's outcome (report); OutFence is the grant's fence, By the newer
	// verdict a superseded answer names.
	Subject    ledger.SubjectKey `json:"subject,omitzero"`
	EventAt    int64             `json:"event_at,omitempty"`
	AdmittedAt int64             `json:"admitted_at,omitempty"`
	HoldFor    time.Duration     `json:"hold_for,omitempty"`
	Post       string            `json:"post,omitempty"`
	By         ledger.Key        `json:"by,omitzero"`
	// Late is a grant's late mark (the model does not judge it: checkStanding does).
	Late bool `json:"late,omitempty"`
}

// partition is the key an operation is checked under: its subject's for a subject call, its
// row's otherwise (the two digest spaces never meet).
func (o Op) partition() ledger.Key {
	if !o.Subject.IsZero() {
		return ledger.Key(o.Subject)
	}
	return o.Key
}

func (o Op) String() string {
	out := o.Outcome
	switch {
	case o.Unknown:
		out = "?"
	case o.Err != "":
		out = o.Err
	case out == "":
		out = "ok"
	}
	return fmt.Sprintf("%s(fence %d) -> %s fence %d", o.Kind, o.Fence, out, o.OutFence)
}

// Timeless is the Hi of a call whose outcome is unknown.
const Timeless = math.MaxInt64

// rowModel is the model's state of one key. Times are Unix nanoseconds; a lease end known
// only within bounds (granted by a call whose answer was lost) is [LeaseLo, LeaseHi].
type rowModel struct {
	// Floor is the lowest the ledger's now can be for a decision on the key from here on:
	// every write (and removal) leaves a time in the row (or the high-water) that later
	// decisions are raised to.
	Floor    int64
	Exists   bool
	Eval     string // "" while unknown (admitted by a call whose answer was lost)
	PrevEval string
	State    ledger.State
	Perm     bool
	Retain   int64
	Fence    uint64
	Owner    bool
	LeaseLo  int64
	LeaseHi  int64
	NotBef   int64
	Report   string // the frozen report's digest, once saved
}

// Model is the sequential specification of the ledger contract for porcupine, one key per
// partition. It refuses, among others: Execute after a result was saved, a second verdict (a
// Publish or a repeated Save with other bytes), two live owners (Execute while another lease
// is surely live), a fence that does not grow, Duplicate before the row is done or abandoned,
// a signed request admitted when it is surely stale (by its call's clock bounds or a completed
// cleanup's high-water), and removal of a row that is unfinished, permanent or inside its
// retention.
//
// resolution is the backend's (Harness.Resolution): a time the ledger wrote can be that much
// above the now a later decision is made at.
func Model(l ledger.Limits, routeMaxAge, resolution time.Duration) porcupine.Model {
	m := model{limits: l, age: int64(l.AcceptedAge(routeMaxAge)), skew: int64(l.FutureSkew),
		keep: int64(l.SignedAgeCeiling + l.QueueCeiling), res: int64(resolution)}
	nm := &porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[ledger.Key][]porcupine.Operation{}
			var order []ledger.Key
			for _, o := range h {
				k := o.Input.(Op).partition()
				if _, ok := by[k]; !ok {
					order = append(order, k)
				}
				by[k] = append(by[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, k := range order {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{rowModel{}} },
		Step: func(state, input, output interface{}) []interface{} {
			o := output.(Op)
			if !o.Subject.IsZero() {
				s, _ := state.(subjectModel) // the partition's first state is Init's
				return subjectStates(m.stepSubject(s, o)...)
			}
			return m.step(state.(rowModel), o)
		},
		Equal:             func(a, b interface{}) bool { return a == b },
		DescribeOperation: func(in, out interface{}) string { return out.(Op).String() },
		DescribeState: func(s interface{}) string {
			if sm, ok := s.(subjectModel); ok {
				return sm.String()
			}
			r := s.(rowModel)
			if !r.Exists {
				return "absent"
			}
			return fmt.Sprintf("%v fence %d owner %v", r.State, r.Fence, r.Owner)
		},
	}
	return nm.ToModel()
}

type model struct {
	limits ledger.Limits
	age    int64
	skew   int64
	keep   int64
	res    int64
}

func states(rs ...rowModel) []interface{} {
	out := make([]interface{}, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// step returns every state the row may be in after o, or none when o's answer is impossible.
func (m model) step(r rowModel, o Op) []interface{} {
	var out []rowModel
	if o.Kind != OpRemove && m.removable(r, o.Hi) {
		// A cleanup whose report the history does not hold may have removed the row before o:
		// o is then judged on the forgotten key, whose floor is the removal's, not the row's
		// (as after a removal the history reports).
		out = m.stepOn(m.forgotten(r), o)
	}
	for _, n := range m.stepOn(r, o) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return states(out...)
}

// stepOn is step on the row r as it stands (no removal before o).
func (m model) stepOn(r rowModel, o Op) []rowModel {
	// The ledger decided at a now no lower than the row's floor; a call whose every reading
	// was below it cannot come here. Cleanup decides on its own now, never raised by the
	// row's times (what it persists as the high-water).
	if o.Kind != OpRemove {
		o.Lo = max(o.Lo, r.Floor)
	}
	if o.Lo > o.Hi {
		return nil
	}
	var out []rowModel
	if o.Unknown {
		// No effect, or any effect the call could have had at any time after it was made.
		out = append([]rowModel{r}, m.effects(r, o)...)
	} else {
		out = m.answer(r, o)
	}
	for i := range out {
		// A transition records its now in the row (its last transition), and later decisions
		// on the row are raised to it. A re-admission that only lengthened the retention
		// records none.
		// A removal this call did not make (it found the row gone) records nothing of it.
		readmitted := o.Kind == OpAdmit && r.Exists && out[i].Exists && sameEval(r, out[i].Eval)
		removedByOther := !out[i].Exists && o.Kind != OpRemove
		if out[i] != r && !readmitted && !removedByOther {
			out[i].Floor = max(out[i].Floor, o.Lo)
		}
	}
	return out
}

// forgotten is the key after its row r was removed: the removal was decided at a now past
// the row's retention, which cleanup persisted as the high-water before it. The row's own
// times are gone with it: only the high-water raises later decisions on the key.
func (m model) forgotten(r rowModel) rowModel {
	return rowModel{PrevEval: r.Eval, Floor: r.Retain + 1 - m.res}
}

// gone reports whether the row may have been removed by a cleanup whose report the history
// does not hold (one that failed or was cut off): only a finished row past its retention.
func (m model) removable(r rowModel, hi int64) bool {
	return r.Exists && r.State.Terminal() && !r.Perm && hi > r.Retain
}

func (m model) freshPossible(o Op) bool {
	lo := max(o.Lo, o.HWFloor)
	return max(lo, o.SignedAt-m.skew) <= min(o.Hi, o.SignedAt+m.age)
}

func (m model) stalePossible(o Op) bool {
	lo := max(o.Lo, o.HWFloor)
	return o.Hi > o.SignedAt+m.age || lo < o.SignedAt-m.skew
}

func sameEval(r rowModel, eval string) bool { return r.Eval == "" || eval == "" || r.Eval == eval }

func (m model) livePossible(r rowModel, o Op) bool { return r.Owner && o.Lo < r.LeaseHi }
func (m model) endedPossible(r rowModel, o Op) bool {
	return (!r.Owner || o.Hi >= r.LeaseLo) && o.Hi >= r.NotBef
}

// holds reports whether o's lease may be the row's live lease in o's phase.
func (m model) holds(r rowModel, o Op) bool {
	want := ledger.StateRunning
	if o.Phase == ledger.PhasePublish {
		want = ledger.StateSaved
	}
	return r.Exists && r.Owner && r.Fence == o.Fence && sameEval(r, o.Eval) && r.State == want && m.livePossible(r, o)
}

// lostPossible reports whether ErrLeaseLost may answer o: the fence, evaluation, owner or phase
// do not match, or the lease may have ended.
func (m model) lostPossible(r rowModel, o Op) bool {
	want := ledger.StateRunning
	if o.Phase == ledger.PhasePublish {
		want = ledger.StateSaved
	}
	match := r.Owner && r.Fence == o.Fence && sameEval(r, o.Eval) && r.State == want
	return !match || o.Hi >= r.LeaseLo
}

func (m model) unknownPossible(r rowModel, o Op) (rowModel, bool) {
	if !r.Exists {
		return r, true
	}
	if m.removable(r, o.Hi) {
		return m.forgotten(r), true
	}
	return r, false
}

// answer judges a call whose answer is known.
func (m model) answer(r rowModel, o Op) []rowModel {
	if o.Err == ErrClassUnknownRow {
		if o.Kind == OpAdmit || o.Kind == OpRemove {
			return nil
		}
		if a, ok := m.unknownPossible(r, o); ok {
			return []rowModel{a}
		}
		return nil
	}
	switch o.Kind {
	case OpAdmit:
		return m.admit(r, o)
	case OpClaim:
		return m.claim(r, o)
	case OpRemove:
		if m.removable(r, o.Hi) && sameEval(r, o.Eval) {
			f := m.forgotten(r)
			f.PrevEval = o.Eval
			return []rowModel{f}
		}
		return nil
	}
	if !r.Exists {
		return nil
	}
	switch o.Kind {
	case OpRenew:
		if o.Err == ErrClassLeaseLost {
			return ifOK(m.lostPossible(r, o), r)
		}
		if o.Err != "" || !m.holds(r, o) || o.Expires < o.Lo+int64(o.LeaseFor) || o.Expires > sat(o.Hi, int64(o.LeaseFor)) {
			return nil
		}
		n := r
		n.Eval = pick(r.Eval, o.Eval)
		n.LeaseLo, n.LeaseHi = o.Expires, o.Expires
		return []rowModel{n}
	case OpSave:
		repeat := r.State == ledger.StateSaved && r.Fence == o.Fence && sameEval(r, o.Eval) && r.Report == o.Report
		if o.Err == ErrClassLeaseLost {
			return ifOK(!repeat && m.lostPossible(r, o), r)
		}
		if o.Err != "" {
			return nil
		}
		if repeat {
			return []rowModel{r}
		}
		if o.Phase != ledger.PhaseExecute || !m.holds(r, o) {
			return nil
		}
		n := r
		n.Eval = pick(r.Eval, o.Eval)
		n.State, n.Report = ledger.StateSaved, o.Report
		return []rowModel{n}
	case OpComplete:
		return m.complete(r, o)
	case OpSupersede:
		if r.State == ledger.StateSuperseded && sameEval(r, o.Eval) {
			return ifOK(o.Err == "", r)
		}
		if o.Err == ErrClassLeaseLost {
			return ifOK(m.lostPossible(r, o), r)
		}
		if o.Err != "" || !m.holds(r, o) {
			return nil
		}
		n := r
		n.State, n.Owner, n.NotBef = ledger.StateSuperseded, false, 0
		return []rowModel{n}
	case OpAbandon:
		if r.State.Terminal() && sameEval(r, o.Eval) {
			return ifOK(o.Err == "", r)
		}
		if o.Err == ErrClassLeaseLost {
			return ifOK(m.lostPossible(r, o), r)
		}
		if o.Err != "" || !m.holds(r, o) {
			return nil
		}
		n := r
		n.State, n.Owner, n.NotBef = ledger.StateAbandoned, false, 0
		return []rowModel{n}
	case OpRelease:
		match := r.Owner && r.Fence == o.Fence && sameEval(r, o.Eval) &&
			((o.Phase == ledger.PhaseExecute && r.State == ledger.StateRunning) || (o.Phase == ledger.PhasePublish && r.State == ledger.StateSaved))
		if o.Err == ErrClassLeaseLost {
			return ifOK(!match, r)
		}
		if o.Err != "" || !match {
			return nil
		}
		return []rowModel{m.released(r, o)}
	case OpRevive:
		switch {
		case o.Err == ErrClassInvalid:
			return ifOK(r.State != ledger.StateAbandoned && r.State != ledger.StateSaved, r)
		case o.Err != "":
			return nil
		case r.State == ledger.StateSaved && o.OutState == ledger.StateSaved:
			return []rowModel{r}
		case r.State == ledger.StateAbandoned && o.OutState == ledger.StateSaved:
			n := r
			n.State, n.Owner, n.NotBef = ledger.StateSaved, false, 0
			return []rowModel{n}
		}
		return nil
	}
	return nil
}

func ifOK(ok bool, r rowModel) []rowModel {
	if ok {
		return []rowModel{r}
	}
	return nil
}

func pick(model, seen string) string {
	if model == "" {
		return seen
	}
	return model
}

func (m model) admitted(r rowModel, o Op, eval string, retain int64) rowModel {
	return rowModel{Floor: r.Floor, Exists: true, Eval: eval, PrevEval: r.PrevEval, State: ledger.StatePending, Perm: o.SignedAt == 0, Retain: retain}
}

func (m model) retainFor(o Op) int64 {
	if o.SignedAt == 0 {
		return 0
	}
	return o.SignedAt + m.keep
}

func (m model) admit(r rowModel, o Op) []rowModel {
	if o.Err != "" {
		return nil
	}
	signed := o.SignedAt != 0
	var out []rowModel
	if !r.Exists || m.removable(r, o.Hi) {
		gone := r
		if r.Exists {
			gone = m.forgotten(r) // removed by a cleanup the history does not report
		}
		og := o
		og.Lo = max(o.Lo, gone.Floor)
		switch o.Outcome {
		case ledger.Full.String():
			out = append(out, gone)
		case ledger.Stale.String():
			if signed && m.stalePossible(og) {
				out = append(out, gone)
			}
		case ledger.Admitted.String():
			if og.Lo <= og.Hi && (!signed || m.freshPossible(og)) && o.OutEval != "" && o.OutEval != gone.PrevEval &&
				o.RetainUntil == m.retainFor(o) {
				n := m.admitted(gone, o, o.OutEval, o.RetainUntil)
				n.Floor = max(gone.Floor, og.Lo)
				out = append(out, n)
			}
		}
		if !r.Exists {
			return out
		}
	}
	// The row exists.
	switch o.Outcome {
	case ledger.Stale.String():
		if signed && m.stalePossible(o) {
			out = append(out, r)
		}
		return out
	case ledger.Pending.String(), ledger.Duplicate.String():
		if signed && !m.freshPossible(o) {
			return out
		}
		if (o.Outcome == ledger.Duplicate.String()) != r.State.Terminal() || !sameEval(r, o.OutEval) {
			return out
		}
		n := r
		n.Eval = pick(r.Eval, o.OutEval)
		if signed && !r.Perm && m.retainFor(o) > n.Retain {
			n.Retain = m.retainFor(o)
		}
		if o.RetainUntil != n.Retain && !(r.Perm && o.RetainUntil == 0) {
			// The answer reports the retention as the row now has it; a retention
			// lengthened by a call whose answer was lost may show here first.
			if o.RetainUntil < n.Retain {
				return out
			}
			n.Retain = o.RetainUntil
		}
		return append(out, n)
	}
	return out
}

func (m model) claim(r rowModel, o Op) []rowModel {
	if o.Err != "" || !r.Exists {
		return nil
	}
	switch o.Outcome {
	case ledger.ClaimDuplicate.String():
		if r.State.Terminal() && sameEval(r, o.OutEval) {
			n := r
			n.Eval = pick(r.Eval, o.OutEval)
			return []rowModel{n}
		}
	case ledger.Busy.String():
		if !r.State.Terminal() && (m.livePossible(r, o) || o.Lo < r.NotBef) {
			return []rowModel{r}
		}
	case ledger.Execute.String(), ledger.Publish.String():
		exec := o.Outcome == ledger.Execute.String()
		okState := (exec && (r.State == ledger.StatePending || r.State == ledger.StateRunning)) ||
			(!exec && r.State == ledger.StateSaved && o.OutReport == r.Report)
		if !okState || !m.endedPossible(r, o) || o.OutFence <= r.Fence || !sameEval(r, o.OutEval) ||
			o.Expires < o.Lo+int64(o.LeaseFor) || o.Expires > sat(o.Hi, int64(o.LeaseFor)) {
			return nil
		}
		n := r
		n.Eval = pick(r.Eval, o.OutEval)
		n.Fence, n.Owner, n.LeaseLo, n.LeaseHi, n.NotBef = o.OutFence, true, o.Expires, o.Expires, 0
		if exec {
			n.State = ledger.StateRunning
		}
		return []rowModel{n}
	}
	return nil
}

func (m model) complete(r rowModel, o Op) []rowModel {
	switch {
	case !sameEval(r, o.Eval):
		return ifOK(o.Err == ErrClassLeaseLost, r)
	case r.State == ledger.StateDone:
		return ifOK(o.Err == "", r)
	case r.State == ledger.StateAbandoned || r.State == ledger.StateSuperseded:
		return ifOK(o.Err == ErrClassLeaseLost, r)
	case r.State != ledger.StateSaved || r.Report != o.Report:
		return ifOK(o.Err == ErrClassInvalid, r)
	case o.Err != "":
		return nil
	}
	n := r
	n.Eval = pick(r.Eval, o.Eval)
	n.State, n.Owner, n.NotBef = ledger.StateDone, false, 0
	return []rowModel{n}
}

func (m model) released(r rowModel, o Op) rowModel {
	n := r
	n.Eval = pick(r.Eval, o.Eval)
	if r.State == ledger.StateRunning {
		n.State = ledger.StatePending
	}
	n.Owner, n.NotBef = false, o.NotBefore
	return n
}

// sat adds without overflowing past Timeless.
func sat(a, b int64) int64 {
	if a > Timeless-b {
		return Timeless
	}
	return a + b
}

// effects lists the states a call whose answer is unknown may have left, besides none.
func (m model) effects(r rowModel, o Op) []rowModel {
	var out []rowModel
	exists := r.Exists
	if a, ok := m.unknownPossible(r, o); ok && r.Exists && o.Kind != OpRemove {
		out = append(out, a) // removed by a cleanup meanwhile
		if o.Kind == OpAdmit {
			r, exists = a, false
		}
	}
	switch o.Kind {
	case OpAdmit:
		if !exists {
			og := o
			og.Lo = max(o.Lo, r.Floor)
			if o.SignedAt == 0 || m.freshPossible(og) {
				out = append(out, m.admitted(r, o, "", m.retainFor(o)))
			}
			return out
		}
		if o.SignedAt != 0 && !r.Perm && m.freshPossible(o) && m.retainFor(o) > r.Retain {
			n := r
			n.Retain = m.retainFor(o)
			out = append(out, n)
		}
	case OpClaim:
		if !exists || !m.endedPossible(r, o) {
			return out
		}
		n := r
		n.Fence, n.Owner, n.LeaseLo, n.LeaseHi, n.NotBef = r.Fence+1, true, o.Lo+int64(o.LeaseFor), sat(o.Hi, int64(o.LeaseFor)), 0
		switch r.State {
		case ledger.StatePending, ledger.StateRunning:
			n.State = ledger.StateRunning
			out = append(out, n)
		case ledger.StateSaved:
			out = append(out, n)
		}
	case OpRenew:
		if m.holds(r, o) {
			n := r
			n.LeaseLo, n.LeaseHi = o.Lo+int64(o.LeaseFor), sat(o.Hi, int64(o.LeaseFor))
			out = append(out, n)
		}
	case OpSave:
		if o.Phase == ledger.PhaseExecute && m.holds(r, o) {
			n := r
			n.State, n.Report = ledger.StateSaved, o.Report
			out = append(out, n)
		}
	case OpComplete:
		if exists {
			if d := m.complete(r, Op{Kind: OpComplete, Eval: o.Eval, Report: o.Report}); len(d) == 1 && d[0] != r {
				out = append(out, d...)
			}
		}
	case OpAbandon, OpSupersede:
		if m.holds(r, o) {
			n := r
			n.State, n.Owner, n.NotBef = ledger.StateAbandoned, false, 0
			if o.Kind == OpSupersede {
				n.State = ledger.StateSuperseded
			}
			out = append(out, n)
		}
	case OpRelease:
		if r.Owner && r.Fence == o.Fence && sameEval(r, o.Eval) &&
			((o.Phase == ledger.PhaseExecute && r.State == ledger.StateRunning) || (o.Phase == ledger.PhasePublish && r.State == ledger.StateSaved)) {
			out = append(out, m.released(r, o))
		}
	case OpRevive:
		if r.State == ledger.StateAbandoned {
			n := r
			n.State, n.Owner, n.NotBef = ledger.StateSaved, false, 0
			out = append(out, n)
		}
	}
	return out
}
