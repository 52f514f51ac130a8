package ledgertest

import (
	"strings"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of the subject record at its limits: every subject AcquireSubject accepts is stored so
// that it can be read again, whatever bytes its names hold.

// The largest subject, of names that JSON writes at length (characters it escapes), is granted,
// reported, read back after a reopen and granted again, with the longest wake parked on it:
// its record does not outgrow what the backend reads.
func caseSubjectRecordOfTheLargestSubjectIsLegible(e *env) {
	long := strings.Repeat("<&>\x01", ledger.MaxSubjectName/4)
	s := ledger.Subject{Publisher: "g", Repository: "r", SHA: "s"}
	s.Context = long[:ledger.MaxSubjectName-len(s.Publisher)-len(s.Repository)-len(s.SHA)]
	if err := s.Validate(); err != nil {
		e.t.Fatalf("the largest subject: %v", err)
	}
	_, v := e.saved(e.clock.Now())
	_, w := e.saved(e.clock.Now().Add(time.Second))
	g := e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectPost)
	parked := e.subjectRequest(s, w) // the longest wake beside it
	parked.Wake = strings.Repeat("A", ledger.MaxWake)
	e.acquireSubject(parked, ledger.SubjectWait)
	e.reopen()
	if rec := e.subjectRecord(s); rec.WaiterWake != parked.Wake {
		e.t.Fatal("the longest wake was not read back")
	}
	if a := e.reportSubject(g, ledger.PostApplied, ledger.SubjectStanding); a.Wake != parked.Wake {
		e.t.Fatal("the report did not hand the longest wake back")
	}
	e.reopen()
	if rec := e.subjectRecord(s); rec.Subject != s || rec.Stands.Key != v.Lease.Key {
		e.t.Fatalf("record read back: subject %v, stands %s", rec.Subject == s, rec.Stands.Key.Short())
	}
	e.acquireSubject(e.subjectRequest(s, v), ledger.SubjectStanding)
}

// A subject whose names are not UTF-8 cannot be stored as it is (JSON would write another
// subject): it is refused before anything is written, as an invalid request.
func caseSubjectOfNamesNotUTF8IsRefused(e *env) {
	s := testSubject(10)
	s.Context = "amiss/\xff"
	_, v := e.saved(e.clock.Now())
	_, err := e.l.AcquireSubject(e.ctx, e.subjectRequest(s, v))
	wantErr(e.t, "acquire for a subject that is not UTF-8", err, ledger.ErrInvalid)
	_, err = e.l.InspectSubject(e.ctx, s.Key())
	wantErr(e.t, "inspect after the refused request", err, ledger.ErrUnknownSubject)
}
