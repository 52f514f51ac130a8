package objstore_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// Subject records: late copies of their writes (captured as signed and delivered later) around
// cleanup forgetting the record.

// subjectRequest matches a request on the subject record of s with the given method.
func subjectRequest(s ledger.Subject, method string) func(*http.Request, []byte) bool {
	name := objstore.SubjectName(s.Key())
	return func(r *http.Request, _ []byte) bool {
		return r.Method == method && strings.HasSuffix(r.URL.Path, "/"+name)
	}
}

// lateVerdict is a verdict of subject s whose event is age older than the store's time now:
// published late (after an outage, or revived), long after its event.
func (w *world) lateVerdict(s ledger.Subject, age time.Duration) ledger.SubjectRequest {
	w.seq++
	key := ledger.Key(ledger.SumBody(fmt.Appendf(nil, "%s-verdict-%d", w.prefix, w.seq)))
	now := w.store.Now()
	return ledger.SubjectRequest{Subject: s, Order: ledger.Order{Key: key, EventAt: now.Add(-age), AdmittedAt: now.Add(-time.Minute)},
		EvaluationID: fmt.Sprintf("eval-%d", w.seq), HoldFor: time.Minute, Settle: 10 * time.Second}
}

// TestForgottenSubjectRecordIsNotBroughtBackByACopyOfItsCreate: a subject record made for
// verdicts published late is past the horizon as soon as it is made. A copy of its create
// (If-None-Match: *) held in the network lands within the life of a request; were the record
// forgotten by then, the copy would restore it on the empty key as the oldest verdict left it,
// and a copy of its first report would land over it too (same bytes, same ETag). Interleaving
// (event times V1 < U < V2, all more than the horizon old):
//
//	T        V1 asks: the record is created (a first attempt of the create is held in the
//	         network, a retry lands); V1 posts under a late grant and reports applied (a
//	         first attempt of the report is held too)
//	         V2 asks, posts and reports applied: V2 stands
//	T+2m30s  cleanup: the newest verdict is past the horizon, nothing is in flight
//	T+3m30s  the held create and report land (signed 3m30s ago, inside SigV4's 15 minutes)
//	         U asks: were the record restored (V1 standing, known), U would get a grant with
//	         no read-back and no late mark, and be posted over V2.
func TestForgottenSubjectRecordIsNotBroughtBackByACopyOfItsCreate(t *testing.T) {
	w := newWorld(t)
	runner, capt := w.captureHandle("runner", nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("b", 40),
		Context: "amiss"}
	horizon := w.limits.SubjectHorizon()
	v1 := w.lateVerdict(subject, horizon+30*time.Minute)
	u := w.lateVerdict(subject, horizon+20*time.Minute)
	v2 := w.lateVerdict(subject, horizon+10*time.Minute)

	create := capt.add(subjectRequest(subject, http.MethodPut), 1)
	g1, err := runner.AcquireSubject(w.ctx, v1)
	if err != nil || g1.Outcome != ledger.SubjectPost || !g1.Late {
		t.Fatalf("V1 asks on no record: %+v %v, want a late grant", g1, err)
	}
	report := capt.add(subjectRequest(subject, http.MethodPut), 1)
	if a, err := runner.ReportSubject(w.ctx, g1, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
		t.Fatalf("V1 reports applied: %+v %v", a, err)
	}
	if len(create.got) != 1 || len(report.got) != 1 {
		t.Fatalf("captured %d creates and %d reports, want one each", len(create.got), len(report.got))
	}
	g2, err := runner.AcquireSubject(w.ctx, v2)
	if err != nil || g2.Outcome != ledger.SubjectPost {
		t.Fatalf("V2 asks: %+v %v", g2, err)
	}
	if a, err := runner.ReportSubject(w.ctx, g2, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
		t.Fatalf("V2 reports applied: %+v %v", a, err)
	}

	w.store.Advance(2*time.Minute + 30*time.Second)
	w.cleanLap(cleaner)
	w.store.Advance(time.Minute)
	code, msg := create.deliver(t, 0)
	t.Logf("held create, 3m30s after it was signed: %d %s", code, msg)
	code, msg = report.deliver(t, 0)
	t.Logf("held report: %d %s", code, msg)

	g, err := runner.AcquireSubject(w.ctx, u)
	if err != nil {
		t.Fatalf("U asks: %v", err)
	}
	if g.Outcome == ledger.SubjectPost && !g.Late && !g.ReadBack {
		t.Fatalf("U, older than V2 (standing), got a grant to post without reading back what stands (%+v): "+
			"a copy of V1's create brought the forgotten record back", g)
	}

	// Once no copy of its writes can land, the record is forgotten, and a verdict older than
	// the horizon asking then is late: it reads back what stands before it posts.
	rec, err := runner.InspectSubject(w.ctx, subject.Key())
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	w.store.Set(rec.UpdatedAt.Add(objstore.RequestLife + time.Minute))
	w.cleanLap(cleaner)
	if _, err := runner.InspectSubject(w.ctx, subject.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
		t.Fatalf("the record was not forgotten once no write could land on it: %v", err)
	}
	late := w.lateVerdict(subject, horizon+15*time.Minute)
	if g, err := runner.AcquireSubject(w.ctx, late); err != nil || g.Outcome != ledger.SubjectPost || !g.Late {
		t.Fatalf("a verdict older than the horizon asks on a forgotten record: %+v %v, want a late grant", g, err)
	}
}

// TestCreateSignedLongAfterItsReadMakesALateRecord: a create is decided on a read that found no
// record, and signed when it is sent; a host suspended between the two (a paused VM, a thawed
// Lambda) signs it minutes or hours after its decision, and the store takes it within the life
// of that signature. Were the record created meanwhile and forgotten, the create lands on the
// empty key: a record that knows nothing of what stands, made (it says) before the forgotten
// record's verdicts were past the horizon. Interleaving (V2 newer than U, U newer than X):
//
//	T       ingress-a: AcquireSubject(X) reads no record, decides; its host is suspended
//	T+1m    V1, then V2, post under the record they create: V2 stands
//	T+33m   cleanup forgets the record (nothing can land on it any more)
//	T+34m   ingress-a wakes and sends its create (signed now): the key is empty, it lands
//	T+35m   U asks: were the record taken as made at T, U would not be late (its event is
//	        inside the horizon at T), and would be posted over V2 without a read-back.
func TestCreateSignedLongAfterItsReadMakesALateRecord(t *testing.T) {
	w := newWorld(t)
	suspended, capt := w.captureHandle("runner-suspended", nil)
	runner, _ := w.handle("runner", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("c", 40),
		Context: "amiss"}
	horizon := w.limits.SubjectHorizon()
	x := w.lateVerdict(subject, horizon)
	u := w.lateVerdict(subject, horizon-10*time.Minute)
	v1 := w.lateVerdict(subject, horizon-5*time.Minute)
	v2 := w.lateVerdict(subject, horizon-20*time.Minute)

	create := capt.add(subjectRequest(subject, http.MethodPut), -1)
	if g, err := suspended.AcquireSubject(w.ctx, x); err == nil {
		t.Fatalf("X's create was never sent, yet it was answered %+v", g)
	}
	w.store.Advance(time.Minute)
	for _, v := range []ledger.SubjectRequest{v1, v2} {
		g, err := runner.AcquireSubject(w.ctx, v)
		if err != nil || g.Outcome != ledger.SubjectPost {
			t.Fatalf("%s asks: %+v %v", v.EvaluationID, g, err)
		}
		if a, err := runner.ReportSubject(w.ctx, g, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
			t.Fatalf("%s reports applied: %+v %v", v.EvaluationID, a, err)
		}
	}
	w.store.Advance(objstore.RequestLife + time.Minute)
	w.cleanLap(cleaner)
	if _, err := runner.InspectSubject(w.ctx, subject.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
		t.Fatalf("the record was not forgotten: %v", err)
	}
	w.store.Advance(time.Minute)
	if code, msg := create.deliver(t, 0); code/100 != 2 {
		t.Fatalf("X's create, sent by a host that woke up, on the empty key: %d %s", code, msg)
	}
	w.store.Advance(time.Minute)
	g, err := runner.AcquireSubject(w.ctx, u)
	if err != nil {
		t.Fatalf("U asks: %v", err)
	}
	if g.Outcome == ledger.SubjectPost && !g.Late && !g.ReadBack {
		t.Fatalf("U, older than V2 (standing), got a grant to post without reading back what stands (%+v): "+
			"the record X's late create made took itself as made before V2 was past the horizon", g)
	}
}
