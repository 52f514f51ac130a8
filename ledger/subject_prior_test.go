package ledger

import (
	"errors"
	"testing"
	"time"
)

// Records kept under another spelling of the subject's publisher (written before publisher
// identities were normalised) order a verdict as this record's own past would.

var oldSpelling = Subject{Publisher: "github https://API.github.com:443", Repository: testSubj.Repository, SHA: testSubj.SHA,
	Context: testSubj.Context}

func withPrior(q SubjectRequest, prior ...SubjectRecord) SubjectRequest {
	q.Prior = prior
	return q
}

func TestAVerdictOlderThanOneRecordUnderAnOldSpellingIsSuperseded(t *testing.T) {
	old := NewSubjectRecord(oldSpelling, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	onOld := newer
	onOld.Subject = oldSpelling
	g := acquire(t, &old, onOld, subjT0, SubjectPost) // before the upgrade: the newer stands under the old name
	report(t, &old, g, PostApplied, subjT0.Add(time.Second), SubjectStanding)

	r := NewSubjectRecord(testSubj, subjT0.Add(time.Hour))
	s, changed, err := r.Acquire(withPrior(older, old), horizon, subjT0.Add(time.Hour))
	if err != nil || s.Outcome != SubjectSuperseded || s.By != newer.Order.Key || !changed {
		t.Fatalf("the older verdict after the upgrade: %v by %s, changed %v, err %v; want superseded by the newer, recorded",
			s.Outcome, s.By.Short(), changed, err)
	}
	// Recorded here, the newer verdict supersedes it without the old record too.
	acquire(t, &r, older, subjT0.Add(time.Hour), SubjectSuperseded)
}

func TestAPostUnderAnOldSpellingThatMayStillLandIsWaitedFor(t *testing.T) {
	old := NewSubjectRecord(oldSpelling, subjT0)
	older, newer := verdict(1, subjT0), verdict(2, subjT0.Add(time.Minute))
	onOld := older
	onOld.Subject = oldSpelling
	acquire(t, &old, onOld, subjT0, SubjectPost) // mid-post when the runners were upgraded
	r := NewSubjectRecord(testSubj, subjT0.Add(time.Second))
	landed := subjT0.Add(holdFor + settleFor) // the old grant's end, plus its settle time
	w := acquire(t, &r, withPrior(newer, old), subjT0.Add(time.Second), SubjectWait)
	if !w.RetryAt.Equal(landed) {
		t.Fatalf("wait until +%v, want until the old post surely landed, +%v", w.RetryAt.Sub(subjT0), landed.Sub(subjT0))
	}
	// Parked meanwhile, it comes back when the old post surely landed, not at once.
	if p := acquire(t, &r, park(withPrior(newer, old), "w"), subjT0.Add(2*time.Second), SubjectWait); !p.RetryAt.Equal(landed) {
		t.Fatalf("a park comes back at +%v, want +%v", p.RetryAt.Sub(subjT0), landed.Sub(subjT0))
	}
	g := acquire(t, &r, withPrior(newer, old), landed, SubjectPost)
	if g.ReadBack {
		t.Fatal("a verdict never posted under either name reads back")
	}
	// A verdict whose own post under the old name may have landed reads back first.
	r = NewSubjectRecord(testSubj, landed)
	if g := acquire(t, &r, withPrior(older, old), landed, SubjectPost); !g.ReadBack {
		t.Fatal("a verdict posted under the old name posts again without reading back")
	}
}

func TestAPriorRecordOfAnotherCommitIsRefused(t *testing.T) {
	other := oldSpelling
	other.SHA = "def"
	r := NewSubjectRecord(testSubj, subjT0)
	for _, p := range []SubjectRecord{NewSubjectRecord(other, subjT0), NewSubjectRecord(testSubj, subjT0)} {
		if _, _, err := r.Acquire(withPrior(verdict(1, subjT0), p), horizon, subjT0); !errors.Is(err, ErrInvalid) {
			t.Errorf("prior record of %v: %v, want ErrInvalid", p.Subject, err)
		}
	}
}
