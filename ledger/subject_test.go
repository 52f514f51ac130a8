package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	subjT0    = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	testSubj  = Subject{Publisher: "github https://api.github.com", Repository: "o/r", SHA: "abc", Context: "amiss"}
	holdFor   = 30 * time.Second
	settleFor = time.Minute
	horizon   = DefaultLimits().SubjectHorizon()
)

func verdict(n byte, eventAt time.Time) SubjectRequest {
	return SubjectRequest{Subject: testSubj, Order: Order{Key: Key{n}, EventAt: eventAt, AdmittedAt: subjT0},
		EvaluationID: fmt.Sprintf("eval-%d", n), HoldFor: holdFor, Settle: settleFor}
}

func acquire(t *testing.T, r *SubjectRecord, q SubjectRequest, now time.Time, want SubjectOutcome) SubjectGrant {
	t.Helper()
	g, _, err := r.Acquire(q, horizon, now)
	if err != nil {
		t.Fatalf("acquire %s: %v", q.Order.Key.Short(), err)
	}
	if g.Outcome != want {
		t.Fatalf("acquire %s at +%v: %v (retry %v), want %v", q.Order.Key.Short(), now.Sub(subjT0), g.Outcome, g.RetryAt.Sub(subjT0), want)
	}
	return g
}

func report(t *testing.T, r *SubjectRecord, g SubjectGrant, o PostOutcome, now time.Time, want SubjectOutcome) SubjectGrant {
	t.Helper()
	a, err := r.Report(g, o, now)
	if err != nil {
		t.Fatalf("report %v: %v", o, err)
	}
	if a.Outcome != want {
		t.Fatalf("report %v at +%v: %v, want %v", o, now.Sub(subjT0), a.Outcome, want)
	}
	return a
}

func TestOrderIsByEventTimeThenAdmissionThenKey(t *testing.T) {
	at := func(k byte, event, admitted time.Duration) Order {
		o := Order{Key: Key{k}, AdmittedAt: subjT0.Add(admitted)}
		if event >= 0 {
			o.EventAt = subjT0.Add(event)
		}
		return o
	}
	cases := []struct {
		name         string
		older, newer Order
	}{
		{"a later event time is newer, whatever the admission", at(1, 0, time.Hour), at(2, time.Second, 0)},
		{"equal event times: the later admission", at(2, 0, 0), at(1, 0, time.Second)},
		{"equal event times and admissions: the larger key", at(1, 0, 0), at(2, 0, 0)},
		{"no event time: placed at its admission", at(1, 0, 0), at(2, -1, time.Minute)},
		{"an event time after an admission without one", at(2, -1, time.Minute), at(1, 2*time.Minute, 0)},
	}
	for _, c := range cases {
		if !c.older.Before(c.newer) || c.newer.Before(c.older) {
			t.Errorf("%s: %+v is not before %+v", c.name, c.older, c.newer)
		}
		if c.older.Before(c.older) {
			t.Errorf("%s: an order is before itself", c.name)
		}
	}
}

func TestAnOlderVerdictFindingANewerOneRecordedIsSuperseded(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	g := acquire(t, &r, newer, subjT0, SubjectPost)
	report(t, &r, g, PostApplied, subjT0.Add(time.Second), SubjectStanding)
	s := acquire(t, &r, older, subjT0.Add(2*time.Second), SubjectSuperseded)
	if s.By != newer.Order.Key {
		t.Fatalf("superseded by %s, want %s", s.By.Short(), newer.Order.Key.Short())
	}
	// Before the newer one posted at all, too.
	r = NewSubjectRecord(testSubj, subjT0)
	acquire(t, &r, newer, subjT0, SubjectPost)
	acquire(t, &r, older, subjT0, SubjectSuperseded)
}

func TestANewerVerdictWaitsForAnOlderOneMidPost(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	g := acquire(t, &r, older, subjT0, SubjectPost)
	w := acquire(t, &r, newer, subjT0.Add(time.Second), SubjectWait)
	if !w.RetryAt.Equal(subjT0.Add(holdFor)) {
		t.Fatalf("wait until +%v, want the older grant's end +%v", w.RetryAt.Sub(subjT0), holdFor)
	}
	// The newer one is recorded while it waits: the older one, coming back, is superseded.
	report(t, &r, g, PostApplied, subjT0.Add(2*time.Second), SubjectStanding)
	acquire(t, &r, older, subjT0.Add(3*time.Second), SubjectSuperseded)
	g = acquire(t, &r, newer, subjT0.Add(3*time.Second), SubjectPost)
	report(t, &r, g, PostApplied, subjT0.Add(4*time.Second), SubjectStanding)
	if r.Stands.Key != newer.Order.Key {
		t.Fatalf("stands %s, want the newer verdict", r.Stands.Key.Short())
	}
}

func TestAfterAnOlderPostOfUnknownOutcomeTheNewestIsAssertedAgain(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	g := acquire(t, &r, older, subjT0, SubjectPost)
	a := report(t, &r, g, PostUnknown, subjT0.Add(15*time.Second), SubjectRetry)
	settled := subjT0.Add(15*time.Second + settleFor)
	if !a.RetryAt.Equal(settled) {
		t.Fatalf("retry at +%v, want +%v", a.RetryAt.Sub(subjT0), settled.Sub(subjT0))
	}
	g = acquire(t, &r, newer, subjT0.Add(16*time.Second), SubjectPost)
	if g.ReadBack {
		t.Fatal("a verdict never posted is asked to read back")
	}
	c := report(t, &r, g, PostApplied, subjT0.Add(17*time.Second), SubjectConfirm)
	if !c.RetryAt.Equal(settled) {
		t.Fatalf("confirm at +%v, want when the older post has settled, +%v", c.RetryAt.Sub(subjT0), settled.Sub(subjT0))
	}
	// Coming back early is not enough; at the settle time it reads back.
	acquire(t, &r, newer, settled.Add(-time.Second), SubjectWait)
	g = acquire(t, &r, newer, settled, SubjectPost)
	if !g.ReadBack {
		t.Fatal("confirming a posted verdict does not read back")
	}
	report(t, &r, g, PostApplied, settled.Add(time.Second), SubjectStanding)
}

func TestAGrantThatEndsWithoutAReportCountsAsUnknown(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	stale := acquire(t, &r, older, subjT0, SubjectPost) // its poster is killed mid-post
	end := subjT0.Add(holdFor)
	acquire(t, &r, newer, end.Add(-time.Nanosecond), SubjectWait)
	g := acquire(t, &r, newer, end, SubjectPost)
	if want := end.Add(settleFor); !r.SettleUntil.Equal(want) || r.Posted.Key != older.Order.Key {
		t.Fatalf("settle until +%v posted %s, want +%v and the killed verdict", r.SettleUntil.Sub(subjT0), r.Posted.Key.Short(), want.Sub(subjT0))
	}
	if _, err := r.Report(stale, PostApplied, end); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a report under a grant taken over: %v, want ErrLeaseLost", err)
	}
	report(t, &r, g, PostApplied, end.Add(time.Second), SubjectConfirm)
}

func TestAVerdictWhosePostMayStillLandWaitsThenReadsBack(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	g := acquire(t, &r, v, subjT0, SubjectPost)
	report(t, &r, g, PostUnknown, subjT0.Add(15*time.Second), SubjectRetry)
	acquire(t, &r, v, subjT0.Add(20*time.Second), SubjectWait)
	g = acquire(t, &r, v, subjT0.Add(15*time.Second+settleFor), SubjectPost)
	if !g.ReadBack || g.Late {
		t.Fatalf("grant after an unknown post of the same verdict: read back %v late %v, want a read-back", g.ReadBack, g.Late)
	}
	report(t, &r, g, PostApplied, subjT0.Add(16*time.Second+settleFor), SubjectStanding)
	// Once standing, a repeat (a row whose Complete was lost) posts nothing.
	acquire(t, &r, v, subjT0.Add(time.Hour), SubjectStanding)
}

func TestARefusedPostIsNotUnknown(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	g := acquire(t, &r, v, subjT0, SubjectPost)
	report(t, &r, g, PostRefused, subjT0.Add(time.Second), SubjectRetry)
	g = acquire(t, &r, v, subjT0.Add(2*time.Second), SubjectPost)
	if g.ReadBack {
		t.Fatal("a verdict whose only post was refused reads back")
	}
}

func TestALateVerdictOnAForgottenSubjectReadsBackFirst(t *testing.T) {
	v := verdict(1, subjT0)
	now := subjT0.Add(horizon + time.Second)
	r := NewSubjectRecord(testSubj, now) // made at the decision's now, as a backend makes it
	g := acquire(t, &r, v, now, SubjectPost)
	if !g.Late || !g.ReadBack {
		t.Fatalf("late %v read back %v, want both", g.Late, g.ReadBack)
	}
	a := report(t, &r, g, PostOverridden, now, SubjectSuperseded)
	if !a.By.IsZero() {
		t.Fatalf("a late verdict overridden by %s, want no key", a.By.Short())
	}
	// Only a late grant may be overridden.
	r = NewSubjectRecord(testSubj, subjT0)
	g = acquire(t, &r, v, subjT0, SubjectPost)
	if _, err := r.Report(g, PostOverridden, subjT0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overridden on a grant that is not late: %v, want ErrInvalid", err)
	}
}

func TestASubjectRecordIsForgottenOnlyWhenNoVerdictCanStillLand(t *testing.T) {
	const h = 10 * time.Minute // a short horizon, so that grants and settling reach past it
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	g, _, err := r.Acquire(v, h, subjT0)
	if err != nil || g.Outcome != SubjectPost {
		t.Fatalf("acquire: %v %v", g.Outcome, err)
	}
	done := Row{EvaluationID: v.EvaluationID, State: StateDone}
	if r.Removable(subjT0.Add(h), h, &done) || !r.Removable(subjT0.Add(h+time.Second), h, &done) {
		t.Fatal("removable at the horizon's end instant, or not after it")
	}
	// A grant that ended without a report: its post may land until a settle after its end.
	r.HolderUntil = subjT0.Add(h)
	if r.Removable(subjT0.Add(h+settleFor), h, &done) || !r.Removable(subjT0.Add(h+settleFor+time.Second), h, &done) {
		t.Fatal("a grant ended without a report: removable before, or not after, its post has settled")
	}
	r.HolderUntil = subjT0.Add(holdFor)
	report(t, &r, g, PostUnknown, subjT0.Add(h), SubjectRetry)
	if r.Removable(subjT0.Add(h+settleFor-time.Second), h, nil) {
		t.Fatal("removable while an unknown post may land")
	}
	past := subjT0.Add(h + settleFor + time.Second)
	for _, c := range []struct {
		row  *Row
		want bool
	}{
		{nil, true},
		{&done, true},
		{&Row{EvaluationID: v.EvaluationID, State: StateSuperseded}, true},
		{&Row{EvaluationID: v.EvaluationID, State: StateAbandoned}, false}, // it can be revived
		{&Row{EvaluationID: v.EvaluationID, State: StateSaved}, false},
		{&Row{EvaluationID: "another", State: StateSaved}, true},
	} {
		if got := r.Removable(past, h, c.row); got != c.want {
			t.Errorf("newest row %+v: removable %v, want %v", c.row, got, c.want)
		}
	}
}

func TestASubjectRequestIsChecked(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	bad := []SubjectRequest{v, v, v, v}
	bad[0].Subject.Context = ""
	bad[1].HoldFor = 0
	bad[2].EvaluationID = ""
	bad[3].Subject.Repository = string(make([]byte, MaxSubjectName))
	for i, q := range bad {
		if _, _, err := r.Acquire(q, horizon, subjT0); err == nil {
			t.Errorf("request %d accepted", i)
		}
	}
	acquire(t, &r, v, subjT0, SubjectPost)
	if err := r.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// A record whose subject no request could name is damage, not a refused request: Check answers
// ErrCorrupt alone, so that a reader (cleanup) takes it for a damaged record.
func TestARecordOfASubjectNoRequestCouldNameIsCorrupt(t *testing.T) {
	for name, spoil := range map[string]func(*Subject){
		"no context":           func(s *Subject) { s.Context = "" },
		"names over the limit": func(s *Subject) { s.Context = strings.Repeat("c", MaxSubjectName) },
		"names not UTF-8":      func(s *Subject) { s.Repository = "o/\xff" },
	} {
		r := NewSubjectRecord(testSubj, subjT0)
		acquire(t, &r, verdict(1, subjT0), subjT0, SubjectPost)
		spoil(&r.Subject)
		r.Key = r.Subject.Key()
		err := r.Check()
		if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: %v, want ErrCorrupt alone", name, err)
		}
	}
}

// A subject record read back passes CheckStored at its own key only, and one inconsistent in
// itself passes at none.
func TestASubjectRecordIsCheckedAsStored(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	acquire(t, &r, verdict(1, subjT0), subjT0, SubjectPost)
	if err := r.CheckStored(testSubj.Key()); err != nil {
		t.Fatalf("the record at its own key: %v", err)
	}
	other := testSubj
	other.SHA = "def"
	if err := r.CheckStored(other.Key()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the record read at another key: %v, want ErrCorrupt", err)
	}
	r.NewestEvaluation = ""
	if err := r.CheckStored(testSubj.Key()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record naming no newest verdict: %v, want ErrCorrupt", err)
	}
}

// A key forgotten and admitted again is another verdict (a new evaluation, admitted later):
// it is posted, whatever its key's earlier verdict did.
func TestAKeyAdmittedAgainIsANewVerdict(t *testing.T) {
	r := NewSubjectRecord(testSubj, subjT0)
	first := verdict(1, time.Time{})
	g := acquire(t, &r, first, subjT0, SubjectPost)
	report(t, &r, g, PostApplied, subjT0.Add(time.Second), SubjectStanding)
	again := first
	again.EvaluationID, again.Order.AdmittedAt = "eval-again", subjT0.Add(time.Hour)
	g = acquire(t, &r, again, subjT0.Add(time.Hour), SubjectPost)
	if g.ReadBack {
		t.Fatal("the new verdict is asked to read back the old one's post")
	}
	report(t, &r, g, PostApplied, subjT0.Add(time.Hour+time.Second), SubjectStanding)
	if r.Stands != (VerdictID{Key: again.Order.Key, Evaluation: "eval-again"}) {
		t.Fatalf("stands %+v", r.Stands)
	}
	acquire(t, &r, first, subjT0.Add(2*time.Hour), SubjectSuperseded)
}

// TestTheNewestVerdictStandsLastWhateverTheInterleaving drives the subject record with
// simulated posters and a simulated provider over many random interleavings: verdicts asked
// for in any order, posters killed mid-post, posts whose answer is lost and that the provider
// applies later (within the settle time), posts refused, verdicts told to wait parked and
// woken by the report (at once, late, or never, their reporter dying first). Each poster keeps
// to its grant: it sends only while its grant lasts. At the end, the last status the provider
// applied must be the newest verdict's, and every verdict must have ended standing or
// superseded.
func TestTheNewestVerdictStandsLastWhateverTheInterleaving(t *testing.T) {
	for seed := uint64(0); seed < 400; seed++ {
		if err := simulateSubject(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// wakeOf is the wake a simulated verdict parks with.
func wakeOf(q SubjectRequest) string { return "v" + q.Order.Key.String()[:4] }

type landing struct {
	at  time.Time
	key Key
	seq int
}

// traceSim, when set, prints the simulation's steps (for debugging a failing seed).
var traceSim func(format string, a ...any)

func simulateSubject(seed uint64) error {
	tr := func(format string, a ...any) {
		if traceSim != nil {
			traceSim(format, a...)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	n := 2 + rng.IntN(5)
	r := NewSubjectRecord(testSubj, subjT0)
	type poster struct {
		q        SubjectRequest
		nextAt   time.Time
		grant    *SubjectGrant // set while posting: the post is sent, and reported, at nextAt
		finished bool
	}
	posters := make([]*poster, n)
	newest := Order{}
	for i := range posters {
		q := verdict(byte(i+1), subjT0.Add(time.Duration(rng.IntN(5))*time.Second))
		q.Order.AdmittedAt = subjT0.Add(time.Duration(rng.IntN(3)) * time.Second)
		posters[i] = &poster{q: q, nextAt: subjT0.Add(time.Duration(rng.IntN(90)) * time.Second)}
		if newest.Key.IsZero() || newest.Before(q.Order) {
			newest = q.Order
		}
	}
	var landed, pending []landing
	seq := 0
	land := func(at time.Time, k Key) {
		tr("   lands +%v %s", at.Sub(subjT0), k.Short()[:2])
		seq++
		pending = append(pending, landing{at, k, seq})
	}
	flush := func(now time.Time) {
		keep := pending[:0]
		for _, l := range pending {
			if !l.at.After(now) {
				landed = append(landed, l)
			} else {
				keep = append(keep, l)
			}
		}
		pending = keep
		sort.SliceStable(landed, func(i, j int) bool {
			if !landed[i].at.Equal(landed[j].at) {
				return landed[i].at.Before(landed[j].at)
			}
			return landed[i].seq < landed[j].seq
		})
	}
	standing := func() Key {
		if len(landed) == 0 {
			return Key{}
		}
		return landed[len(landed)-1].key
	}
	after := func(p *poster, a SubjectGrant, now time.Time) {
		p.grant = nil
		p.finished = a.Outcome == SubjectStanding || a.Outcome == SubjectSuperseded
		p.nextAt = MaxTime(a.RetryAt, now.Add(time.Duration(1+rng.IntN(20))*time.Second))
	}
	for step := 0; step < 1000; step++ {
		var p *poster
		for _, c := range posters {
			if !c.finished && (p == nil || c.nextAt.Before(p.nextAt)) {
				p = c
			}
		}
		if p == nil {
			break
		}
		now := p.nextAt
		flush(now)
		if g := p.grant; g != nil {
			// The post, sent while the grant lasts: read back first when asked.
			var (
				a   SubjectGrant
				err error
			)
			c := rng.IntN(5)
			if g.ReadBack && standing() == p.q.Order.Key {
				c = -1
			} else if standing() == p.q.Order.Key {
				return fmt.Errorf("verdict %s posted again while it is the last status applied", p.q.Order.Key.Short())
			}
			tr("+%v %s posts (case %d)", now.Sub(subjT0), p.q.Order.Key.Short()[:2], c)
			switch c {
			case -1: // it stands already
				a, err = r.Report(*g, PostApplied, now)
			case 0: // killed mid-post: it may land up to a settle after the grant ended; the row is claimed again later
				if rng.IntN(2) == 0 {
					land(now.Add(time.Duration(rng.Int64N(int64(g.Decided.Add(holdFor).Sub(now)+settleFor)))), p.q.Order.Key)
				}
				p.grant, p.nextAt = nil, g.Decided.Add(holdFor+time.Duration(rng.IntN(60))*time.Second)
				continue
			case 1: // the answer is lost: the provider may apply it up to a settle later
				if rng.IntN(2) == 0 {
					land(now.Add(time.Duration(rng.Int64N(int64(settleFor)))), p.q.Order.Key)
				}
				a, err = r.Report(*g, PostUnknown, now)
			case 2:
				a, err = r.Report(*g, PostRefused, now)
			default:
				land(now, p.q.Order.Key)
				a, err = r.Report(*g, PostApplied, now)
			}
			if err != nil {
				return err
			}
			tr("   report: %v retry +%v wake %q", a.Outcome, a.RetryAt.Sub(subjT0), a.Wake)
			after(p, a, now)
			for _, w := range posters {
				// The waiter is woken: at once, late, or never (the reporter died first); a wake
				// reaching a verdict that already came back by itself is one more try.
				if a.Wake == "" || a.Wake != wakeOf(w.q) || w.grant != nil || w.finished || rng.IntN(5) == 0 {
					continue
				}
				at := now.Add(time.Duration(rng.IntN(3)) * time.Second)
				if rng.IntN(4) == 0 {
					at = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				}
				tr("   wakes %s at +%v", w.q.Order.Key.Short()[:2], at.Sub(subjT0))
				if at.Before(w.nextAt) {
					w.nextAt = at
				}
			}
			continue
		}
		g, _, err := r.Acquire(p.q, horizon, now)
		if err != nil {
			return err
		}
		tr("+%v %s acquire: %v retry +%v read back %v", now.Sub(subjT0), p.q.Order.Key.Short()[:2], g.Outcome, g.RetryAt.Sub(subjT0), g.ReadBack)
		if g.Outcome == SubjectPost {
			p.grant, p.nextAt = &g, now.Add(time.Duration(rng.IntN(int(holdFor/time.Second)))*time.Second)
			continue
		}
		after(p, g, now)
		if g.Outcome == SubjectWait && rng.IntN(4) > 0 {
			// Parked a moment later (its message set aside first), to be woken by the report.
			at := now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			pk, _, err := r.Acquire(park(p.q, wakeOf(p.q)), horizon, at)
			if err != nil {
				return err
			}
			tr("   parks +%v: %v retry +%v", at.Sub(subjT0), pk.Outcome, pk.RetryAt.Sub(subjT0))
			p.nextAt = MaxTime(pk.RetryAt, at)
		}
	}
	for _, p := range posters {
		if !p.finished {
			return fmt.Errorf("verdict %s never finished", p.q.Order.Key.Short())
		}
	}
	flush(subjT0.Add(24 * time.Hour))
	if got := standing(); got != newest.Key {
		return fmt.Errorf("last status applied is %s's, want the newest verdict %s's (%d landings)", got.Short(), newest.Key.Short(), len(landed))
	}
	if r.Stands.Key != newest.Key {
		return fmt.Errorf("record says %s stands, want %s", r.Stands.Key.Short(), newest.Key.Short())
	}
	return nil
}

func TestASubjectRecordIsForgottenOnlyOnceNoWriteToItCanLand(t *testing.T) {
	const h = 10 * time.Minute
	r := NewSubjectRecord(testSubj, subjT0)
	v := verdict(1, subjT0)
	g, _, err := r.Acquire(v, h, subjT0)
	if err != nil || g.Outcome != SubjectPost {
		t.Fatalf("acquire: %v %v", g.Outcome, err)
	}
	report(t, &r, g, PostApplied, subjT0, SubjectStanding)
	saved := Row{EvaluationID: v.EvaluationID, State: StateSaved}
	past := subjT0.Add(h + time.Second)
	if !r.Removable(past, h, nil) {
		t.Fatal("premise: the record is removable past the horizon")
	}
	// A storage whose writes land when answered forgets it as Removable says.
	if !r.Forgettable(past, h, nil, 0, 0) {
		t.Fatal("not forgettable where writes cannot land late")
	}
	// A storage where a held request can land up to lateWrites after it was sent waits for
	// that long after the record's last write, by the storage's clock.
	const late = 15 * time.Minute
	lastWrite := past.Add(-late)
	if r.Forgettable(past, h, nil, 0, late, lastWrite) {
		t.Fatal("forgettable while a write sent at its last write may still land")
	}
	if !r.Forgettable(past.Add(time.Second), h, nil, 0, late, lastWrite) {
		t.Fatal("not forgettable once no write to it can land")
	}
	// Without a time of its last write, such a storage cannot tell that no write can land: the
	// record is kept.
	if r.Forgettable(past.Add(time.Second), h, nil, 0, late) {
		t.Fatal("forgettable on a storage where writes land late, knowing no time of its last write")
	}
	// The newest verdict, known to stand, lets its row's state not matter; a record whose
	// newest verdict does not stand keeps it while that row can still post.
	if r.NewestMatters() || !r.Forgettable(past, h, &saved, 0, 0) {
		t.Fatalf("a standing newest verdict: its row matters %v", r.NewestMatters())
	}
	r.Stands.Evaluation = ""
	if !r.NewestMatters() || r.Forgettable(past, h, &saved, 0, 0) {
		t.Fatal("a newest verdict not known to stand: forgettable while its row can still post")
	}
}

// A record is forgotten only once every verdict not newer than its newest one is late to the
// record a process makes anew, on a clock up to behind its cleaner's: the first instant the
// rule forgets it, a record made behind grants an older verdict (a second older, or of the
// same second and older by its admission) a late post, which reads back what stands first.
func TestASubjectRecordIsForgottenOnlyOnceAnOlderVerdictIsLateOnAClockBehind(t *testing.T) {
	const behind = 10 * time.Second
	r := NewSubjectRecord(testSubj, subjT0)
	newest := verdict(2, subjT0)
	g := acquire(t, &r, newest, subjT0, SubjectPost)
	report(t, &r, g, PostApplied, subjT0, SubjectStanding)
	sameSecond := verdict(1, subjT0)
	sameSecond.Order.AdmittedAt = subjT0.Add(-time.Millisecond)
	older := []SubjectRequest{verdict(3, subjT0.Add(-time.Second)), sameSecond}
	for _, q := range older {
		if !q.Order.Before(newest.Order) {
			t.Fatalf("premise: %+v is not older than the newest verdict", q.Order)
		}
	}
	if r.Forgettable(subjT0.Add(horizon+behind), horizon, nil, behind, 0) {
		t.Fatal("forgotten while a clock behind reads the newest verdict within the horizon")
	}
	forgot := subjT0.Add(horizon)
	for !r.Forgettable(forgot, horizon, nil, behind, 0) {
		forgot = forgot.Add(time.Millisecond)
		if forgot.After(subjT0.Add(horizon + time.Minute)) {
			t.Fatal("never forgotten")
		}
	}
	for _, q := range older {
		anew := NewSubjectRecord(testSubj, forgot.Add(-behind))
		g := acquire(t, &anew, q, forgot.Add(-behind), SubjectPost)
		if !g.Late || !g.ReadBack {
			t.Errorf("verdict %s, asking %v behind the first instant the record was forgotten: late %v read back %v; want a late post",
				q.Order.Key.Short(), behind, g.Late, g.ReadBack)
		}
	}
}

// ForgettableAfter is where Forgettable's times turn: a backend that looks at a kept record
// again just after it finds it forgettable (its row not holding it), and not a moment before.
// Checked for a record at rest, one settling a post, one whose grant ended without a report,
// with and without a clock behind and late writes.
func TestForgettableAfterIsTheInstantTheRuleForgetsFrom(t *testing.T) {
	const h, behind, late = 10 * time.Minute, time.Minute, 15 * time.Minute
	rest := NewSubjectRecord(testSubj, subjT0)
	g := acquire(t, &rest, verdict(1, subjT0), subjT0, SubjectPost)
	report(t, &rest, g, PostApplied, subjT0, SubjectStanding)
	settling := rest
	settling.SettleUntil = subjT0.Add(h + 3*time.Minute)
	held := NewSubjectRecord(testSubj, subjT0)
	acquire(t, &held, verdict(1, subjT0), subjT0, SubjectPost) // never reported
	// The grant outlasts a horizon of a second: its end, not the horizon, decides.
	for name, r := range map[string]SubjectRecord{"at rest": rest, "settling": settling, "a grant never reported": held} {
		h := h
		if name == "a grant never reported" {
			h = time.Second
		}
		for _, c := range []struct {
			behind, late time.Duration
			written      []time.Time
		}{
			{0, 0, nil},
			{behind, 0, nil},
			{behind, late, []time.Time{subjT0.Add(time.Minute)}},
			{0, late, []time.Time{subjT0, subjT0.Add(20 * time.Minute)}},
		} {
			after, ok := r.ForgettableAfter(h, c.behind, c.late, c.written...)
			if !ok {
				t.Fatalf("%s %+v: never forgettable", name, c)
			}
			if r.Forgettable(after, h, nil, c.behind, c.late, c.written...) ||
				!r.Forgettable(after.Add(time.Nanosecond), h, nil, c.behind, c.late, c.written...) {
				t.Errorf("%s %+v: Forgettable does not turn at %v past the verdict", name, c, after.Sub(subjT0))
			}
		}
		if _, ok := r.ForgettableAfter(h, 0, late); ok {
			t.Errorf("%s: forgettable with late writes and no time of the last write", name)
		}
	}
}
