package objstore_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
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

// verdicts admits one delivery for each signing age (before the store's time now) and saves a
// verdict for each through l.
func (w *world) verdicts(l ledger.Ledger, ages ...time.Duration) []ledger.Delivery {
	w.t.Helper()
	var out []ledger.Delivery
	for _, age := range ages {
		d := w.delivery(w.store.Now().Add(-age))
		w.saved(l, d, "verdict of "+d.Binding.Identity)
		out = append(out, d)
	}
	return out
}

// publishing claims d's saved verdict for publication through l (its earlier lease long over,
// after an outage) and answers the request to post it to subject s.
func (w *world) publishing(l ledger.Ledger, d ledger.Delivery, s ledger.Subject) (ledger.Staged, ledger.SubjectRequest) {
	w.t.Helper()
	st := *ledgertest.MustClaim(w.t, l, d, ledger.Publish).Staged
	return st, ledger.SubjectRequest{Subject: s, Order: st.Lease.Order(), EvaluationID: st.Lease.EvaluationID,
		HoldFor: time.Minute, Settle: 10 * time.Second}
}

// postStanding asks for q, posts, reports applied (the verdict stands), and completes the row.
func (w *world) postStanding(l ledger.Ledger, st ledger.Staged, q ledger.SubjectRequest) ledger.SubjectGrant {
	w.t.Helper()
	g, err := l.AcquireSubject(w.ctx, q)
	if err != nil || g.Outcome != ledger.SubjectPost {
		w.t.Fatalf("%s asks: %+v %v", q.EvaluationID, g, err)
	}
	if a, err := l.ReportSubject(w.ctx, g, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
		w.t.Fatalf("%s reports applied: %+v %v", q.EvaluationID, a, err)
	}
	ledgertest.MustComplete(w.t, l, st)
	return g
}

// TestForgottenSubjectRecordIsNotBroughtBackByACopyOfItsCreate: a subject record made for
// verdicts published late is past the horizon as soon as it is made. A copy of its create
// (If-None-Match: *) held in the network lands within the life of a request; were the record
// forgotten by then, the copy would restore it on the empty key as the oldest verdict left it,
// and a copy of its first report would land over it too (same bytes, same ETag). Interleaving
// (event times V1 < U < V2, all admitted and evaluated, then published after an outage longer
// than the horizon):
//
//	T        V1 asks: the record is created (a first attempt of the create is held in the
//	         network, a retry lands); V1 posts under a late grant and reports applied (a
//	         first attempt of the report is held too)
//	         V2 asks, posts and reports applied: V2 stands; both rows are completed
//	T+2m30s, T+7m, T+13m  cleanup passes: the newest verdict is past the horizon, nothing is
//	         in flight
//	T+14m    the held create and report land (signed 14 minutes ago, inside SigV4's 15)
//	         U asks: were the record restored (V1 standing, known), U would get a grant with
//	         no read-back and no late mark, and be posted over V2.
func TestForgottenSubjectRecordIsNotBroughtBackByACopyOfItsCreate(t *testing.T) {
	w := newWorld(t)
	runner, capt := w.captureHandle("runner", nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("b", 40),
		Context: "amiss"}
	ds := w.verdicts(runner, 3*time.Minute, 2*time.Minute, time.Minute) // V1 < U < V2
	w.store.Advance(w.limits.SubjectHorizon() + 10*time.Minute)         // an outage
	s1, v1 := w.publishing(runner, ds[0], subject)
	_, u := w.publishing(runner, ds[1], subject)
	s2, v2 := w.publishing(runner, ds[2], subject)

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
	ledgertest.MustComplete(t, runner, s1)
	w.postStanding(runner, s2, v2)

	for _, at := range []time.Duration{2*time.Minute + 30*time.Second, 7 * time.Minute, 13 * time.Minute} {
		w.store.Set(g1.Decided.Add(at))
		w.cleanLap(cleaner)
	}
	w.store.Set(g1.Decided.Add(14 * time.Minute))
	code, msg := create.deliver(t, 0)
	t.Logf("held create, 14 minutes after it was signed: %d %s", code, msg)
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
	if g, err := runner.AcquireSubject(w.ctx, u); err != nil || g.Outcome != ledger.SubjectPost || !g.Late {
		t.Fatalf("a verdict older than the horizon asks on a forgotten record: %+v %v, want a late grant", g, err)
	}
}

// TestCreateSignedLongAfterItsReadMakesALateRecord: a create is decided on a read that found no
// record, and signed when it is sent; a host suspended between the two (a paused VM, a thawed
// Lambda) signs it minutes or hours after its decision, and the store takes it within the life
// of that signature. Were the record created meanwhile and forgotten, the create lands on the
// empty key: a record that knows nothing of what stands, made (it says) before the forgotten
// record's verdicts were past the horizon. Interleaving (event times X < U < V1 < V2, all
// evaluated at T0):
//
//	T0+1m   runner-suspended: AcquireSubject(X) reads no record, decides; its host is
//	        suspended
//	        an outage longer than the horizon; then V1 and V2 post under the record they
//	        create: V2 stands; their rows are completed
//	+33m    cleanup forgets the record (nothing can land on it any more)
//	+34m    runner-suspended wakes and sends its create (signed now): the key is empty, it lands
//	+35m    U asks: were the record taken as made at T0+1m, U would not be late (its event is
//	        inside the horizon then), and would be posted over V2 without a read-back.
func TestCreateSignedLongAfterItsReadMakesALateRecord(t *testing.T) {
	w := newWorld(t)
	suspended, capt := w.captureHandle("runner-suspended", nil)
	runner, _ := w.handle("runner", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("c", 40),
		Context: "amiss"}
	ds := w.verdicts(runner, 4*time.Minute, 3*time.Minute, 2*time.Minute, time.Minute) // X < U < V1 < V2
	w.store.Advance(time.Minute)
	_, x := w.publishing(runner, ds[0], subject)
	create := capt.add(subjectRequest(subject, http.MethodPut), -1)
	if g, err := suspended.AcquireSubject(w.ctx, x); err == nil {
		t.Fatalf("X's create was never sent, yet it was answered %+v", g)
	}
	w.store.Advance(w.limits.SubjectHorizon() + 10*time.Minute) // the outage
	_, u := w.publishing(runner, ds[1], subject)
	w.standThenForget(t, runner, cleaner, subject, ds[2:])
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

// TestSubjectRecordsOfARowRemovedAtItsFirstLookOutliveACutPass: a row finished before cleanup
// first looks at it (its retention already over, as after an outage of cleanup) is the only
// object that names the subject records its verdict was published to, and the look that reads
// it both removes it and schedules those records. A pass cut after the removal (a cleanup
// function's timeout, a crash) must not leave the records to the safety net's next lap, a
// month on: once nothing can land on them, they are forgotten.
func TestSubjectRecordsOfARowRemovedAtItsFirstLookOutliveACutPass(t *testing.T) {
	w := newWorld(t)
	runner, _ := w.handle("runner", 0, nil)
	cleaner, ctr := w.handle("cleaner", 0, nil)
	w.cleanLap(cleaner) // the safety net's lap of the empty ledger: the next one is a month away
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("e", 40),
		Context: "amiss"}
	d := w.verdicts(runner, time.Minute)[0]
	w.store.Advance(2 * time.Minute) // its evaluation's lease is over: published now
	st, q := w.publishing(runner, d, subject)
	w.postStanding(runner, st, q)

	// Cleanup's first look comes after the row's retention: the row is removed in that pass,
	// which is cut at its first write after the removal.
	w.store.Advance(w.limits.QueueCeiling + objstore.RequestLife + time.Hour)
	removing := false
	ctr.setRule(func(r *http.Request) fault {
		removing = removing || isBatchDelete(r)
		if removing && r.Method == http.MethodPut {
			return crash // the first write after a removal
		}
		return pass
	})
	if rep, err := cleaner.Cleanup(w.ctx, ""); err == nil {
		t.Fatalf("the cut pass: %+v, want an error", rep)
	}
	if _, err := runner.Inspect(w.ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("the premise: the cut pass removed the row (%v)", err)
	}

	// The next cleaner goes on, long past the horizon and the record's last write.
	next, _ := w.handle("cleaner-next", 0, nil)
	for i := 0; i < 4; i++ {
		w.store.Advance(w.limits.SubjectHorizon())
		w.cleanLap(next)
	}
	if _, err := runner.InspectSubject(w.ctx, subject.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
		t.Fatalf("the subject record of a row removed by a cut pass is kept (%v): nothing schedules it before the next lap", err)
	}
}

// TestACreateAnsweredAfterItsHostWasSuspendedIsLate: while the store-clock estimate is steady,
// a verdict asking for a subject nothing is cached of decides on no record without a read, and
// creates one (If-None-Match). A host suspended between that decision and the create's answer
// (a paused VM, a frozen Lambda whose request was in flight) is answered by the store only once
// it wakes; were the record made and forgotten meanwhile, the create lands on the empty key and
// its answer is the grant decided before the suspension: a record it calls made at that
// decision, within the horizon of a verdict older than the one that stood on the forgotten
// record. Interleaving (event times X < V1 < V2, all evaluated at T0):
//
//	T0+1m   runner-suspended: AcquireSubject(X) decides on no record (no read), sends the
//	        create; its host is suspended with the request in flight
//	        an outage longer than the horizon; V1 and V2 post under the record they create:
//	        V2 stands; their rows are completed
//	+33m    cleanup forgets the record (nothing can land on it any more)
//	+44m    the host wakes: its create lands on the empty key and is answered. Were X's grant
//	        the one decided at T0+1m, X would not be late (its event is inside the horizon
//	        then), and would be posted over V2 with no read-back.
func TestACreateAnsweredAfterItsHostWasSuspendedIsLate(t *testing.T) {
	w := newWorld(t)
	host := &suspendedClock{store: w.store}
	suspended, tr := w.handle("runner-suspended", 0, func(c *objstore.Config) { c.Clock = host })
	runner, _ := w.handle("runner", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)
	subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("d", 40),
		Context: "amiss"}
	ds := w.verdicts(runner, 3*time.Minute, 2*time.Minute, time.Minute) // X < V1 < V2
	w.store.Advance(time.Minute)
	_, x := w.publishing(runner, ds[0], subject)
	held := tr.holdNext(subjectRequest(subject, http.MethodPut))
	type answer struct {
		g   ledger.SubjectGrant
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		g, err := suspended.AcquireSubject(w.ctx, x)
		answered <- answer{g, err}
	}()
	held.waitHeld(t)
	landed := false
	defer func() {
		if !landed {
			close(held.release)
		}
	}()
	outage := w.limits.SubjectHorizon() + 10*time.Minute
	w.store.Advance(outage)
	host.sleep(outage)
	w.standThenForget(t, runner, cleaner, subject, ds[1:])
	w.store.Advance(time.Minute)
	host.sleep(12*time.Minute + objstore.RequestLife)
	landed = true
	if err := held.land(t); err != nil {
		t.Fatalf("X's create, sent before the host was suspended, on the empty key: %v", err)
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("X asks, its create answered after the suspension: %v", a.err)
	}
	switch g := a.g; {
	case g.Outcome == ledger.SubjectPost && g.Late && g.ReadBack:
	default:
		t.Fatalf("X, older than V2 (standing on the forgotten record), got %+v, want a late grant that reads back what stands: "+
			"the record its create made, landing after the suspension, was taken as made before it", a.g)
	}
	t.Logf("X asks, its create answered after the suspension: %v late %v read back %v", a.g.Outcome, a.g.Late, a.g.ReadBack)
}

// standThenForget publishes each delivery of ds on subject through runner, leaving it standing,
// then has cleaner's laps forget the subject's record once no write to it can land, and fails
// the test if it is not forgotten.
func (w *world) standThenForget(t *testing.T, runner, cleaner *objstore.Ledger, subject ledger.Subject, ds []ledger.Delivery) {
	t.Helper()
	for _, d := range ds {
		st, q := w.publishing(runner, d, subject)
		w.postStanding(runner, st, q)
	}
	w.store.Advance(objstore.RequestLife + time.Minute)
	w.cleanLap(cleaner)
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	if _, err := runner.InspectSubject(w.ctx, subject.Key()); !errors.Is(err, ledger.ErrUnknownSubject) {
		t.Fatalf("the record was not forgotten: %v", err)
	}
}
