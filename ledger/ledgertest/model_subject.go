package ledgertest

import (
	"fmt"
	"slices"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// subjectModel is the model's state of one subject record: the newest verdict recorded, the
// grant's fence and holder (its end known within [HolderLo, HolderHi]), and the verdict
// known to stand. It refuses, among others: a grant to post for a verdict older than one
// recorded before, a grant while another is surely live, a fence that does not grow, a
// superseded answer that does not name the newest verdict, a report taken under a grant
// that is not the record's, and a verdict called standing that was never reported so.
type subjectModel struct {
	Recorded           bool
	NewestKey          ledger.Key
	NewestAt, NewestIn int64 // the newest verdict's order: its time, and its admission
	Fence              uint64
	Holder             ledger.VerdictID
	HolderLo, HolderHi int64
	Stands             ledger.VerdictID
	// Floor is the earliest now any later call can decide at, once a grant was ended as
	// lapsed: the record was then written at a now past the grant's end (at least HolderLo),
	// and every later decision is made no earlier than the record's last write.
	Floor int64
}

// verdict is the verdict a subject call is for: its key and its evaluation.
func (o Op) verdict() ledger.VerdictID { return ledger.VerdictID{Key: o.Key, Evaluation: o.Eval} }

func (s subjectModel) String() string {
	return fmt.Sprintf("newest %s fence %d holder %s stands %s", s.NewestKey.Short(), s.Fence, s.Holder.Key.Short(), s.Stands.Key.Short())
}

func subjectStates(ss ...subjectModel) []interface{} {
	out := make([]interface{}, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (o Op) order() ledger.Order {
	ord := ledger.Order{Key: o.Key, AdmittedAt: time.Unix(0, o.AdmittedAt)}
	if o.EventAt != 0 {
		ord.EventAt = time.Unix(0, o.EventAt)
	}
	return ord
}

func (s subjectModel) newest() ledger.Order {
	return Op{Key: s.NewestKey, EventAt: s.NewestAt, AdmittedAt: s.NewestIn}.order()
}

// superseded reports whether the verdict of o is older than the newest one recorded.
func (s subjectModel) superseded(o Op) bool { return s.Recorded && o.order().Before(s.newest()) }

// recorded is s after o's verdict asked to post: the newest of the two.
func (s subjectModel) recorded(o Op) subjectModel {
	if !s.superseded(o) {
		s.Recorded, s.NewestKey, s.NewestAt, s.NewestIn = true, o.Key, o.EventAt, o.AdmittedAt
	}
	return s
}

// granted is s after a grant to o's verdict under fence, ending within [lo, hi].
func (s subjectModel) granted(o Op, fence uint64, lo, hi int64) subjectModel {
	s = s.recorded(o)
	s.Fence, s.Holder, s.HolderLo, s.HolderHi = fence, o.verdict(), lo, hi
	if s.Stands != o.verdict() {
		s.Stands = ledger.VerdictID{}
	}
	return s
}

// surelyHeld reports whether a grant is live at every now o may have decided at.
func (s subjectModel) surelyHeld(o Op) bool { return !s.Holder.IsZero() && s.HolderLo > o.Hi }

// lapsed returns the states after o, a request for the verdict that holds the grant, answered
// without a new grant: s as it is, unless o surely decided after the grant's end; and s with
// the grant ended (its post's outcome unknown, the holder's late report then lost, and no
// later decision before the grant's end) when the grant may have run out by o's now.
func (s subjectModel) lapsed(o Op) []subjectModel {
	var out []subjectModel
	if o.Unknown || s.Holder != o.verdict() || s.HolderHi > o.Lo {
		out = append(out, s)
	}
	if s.Holder == o.verdict() && !s.surelyHeld(o) {
		n := s
		n.Floor = max(n.Floor, s.HolderLo)
		n.Holder, n.HolderLo, n.HolderHi = ledger.VerdictID{}, 0, 0
		out = append(out, n)
	}
	return out
}

// stepSubject returns every state the subject record may be in after o, or none when o's
// answer is impossible. A record whose newest verdict is past the horizon may have been
// forgotten by a cleanup before o (the model does not track what else Removable asks, the
// newest verdict's row and the age of the record's last write, which only keep it longer): o is
// then judged on a new record as well. What a forgotten record may cost is a verdict older than
// the one standing asking on a new record; the history's posters read back what stands for a
// late grant, and checkStanding refuses a post of an older verdict after a newer one was called
// standing.
func (m model) stepSubject(s subjectModel, o Op) []subjectModel {
	out := m.stepSubjectOn(s, o)
	if s.Recorded && !s.surelyHeld(o) && s.newest().At().Add(m.limits.SubjectHorizon()).UnixNano() < o.Hi {
		for _, n := range m.stepSubjectOn(subjectModel{Floor: s.Floor}, o) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// stepSubjectOn is stepSubject on the record s as it stands (not forgotten before o).
func (m model) stepSubjectOn(s subjectModel, o Op) []subjectModel {
	o.Lo = max(o.Lo, s.Floor)
	if o.Lo > o.Hi {
		return nil
	}
	if o.Unknown {
		out := []subjectModel{s}
		switch o.Kind {
		case OpAcquireSubject:
			if !s.superseded(o) {
				out = append(out, s.recorded(o).lapsed(o)...)
				if !s.surelyHeld(o) {
					out = append(out, s.granted(o, s.Fence+1, o.Lo+int64(o.HoldFor), Timeless))
				}
			}
		case OpReportSubject:
			if s.Fence == o.Fence && s.Holder == o.verdict() {
				n := s
				n.Holder, n.HolderLo, n.HolderHi = ledger.VerdictID{}, 0, 0
				out = append(out, n)
				if o.Post == ledger.PostApplied.String() {
					n.Stands = o.verdict()
					out = append(out, n)
				}
			}
		}
		return out
	}
	switch o.Kind {
	case OpAcquireSubject:
		if o.Err != "" {
			return nil
		}
		switch o.Outcome {
		case ledger.SubjectSuperseded.String():
			if s.superseded(o) && o.By == s.NewestKey {
				return []subjectModel{s}
			}
		case ledger.SubjectPost.String():
			if !s.superseded(o) && o.OutFence == s.Fence+1 && !s.surelyHeld(o) {
				return []subjectModel{s.granted(o, o.OutFence, o.Lo+int64(o.HoldFor), sat(o.Hi, int64(o.HoldFor)))}
			}
		case ledger.SubjectWait.String():
			if !s.superseded(o) {
				return s.recorded(o).lapsed(o)
			}
		case ledger.SubjectStanding.String():
			if !s.superseded(o) && s.Stands == o.verdict() {
				return s.recorded(o).lapsed(o)
			}
		}
		return nil
	case OpReportSubject:
		mine := s.Fence == o.Fence && s.Holder == o.verdict()
		if o.Err == ErrClassLeaseLost {
			return ifSubject(!mine, s)
		}
		if o.Err != "" || !mine {
			return nil
		}
		n := s
		n.Holder, n.HolderLo, n.HolderHi = ledger.VerdictID{}, 0, 0
		switch o.Outcome {
		case ledger.SubjectStanding.String():
			if o.Post != ledger.PostApplied.String() {
				return nil
			}
			n.Stands = o.verdict()
		case ledger.SubjectConfirm.String():
			if o.Post != ledger.PostApplied.String() {
				return nil
			}
		case ledger.SubjectRetry.String():
			if o.Post != ledger.PostUnknown.String() && o.Post != ledger.PostRefused.String() {
				return nil
			}
		case ledger.SubjectSuperseded.String():
			if o.Post != ledger.PostOverridden.String() {
				return nil
			}
		default:
			return nil
		}
		return []subjectModel{n}
	}
	return nil
}

func ifSubject(ok bool, s subjectModel) []subjectModel {
	if ok {
		return []subjectModel{s}
	}
	return nil
}
