package providerapitest

import (
	"context"
	"net/http"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// PullNowWorld is one provider's PullNow over its fake, for CheckPullNow.
type PullNowWorld struct {
	// PullNow is the client's PullNow.
	PullNow func(context.Context, change.Change) (change.PullState, error)
	// AddPull adds pull request n, with title and target branch, to the fake; Change is a pull
	// request event's change of pull request n, as the webhook had it.
	AddPull func(n int, title, target string)
	Change  func(n int) change.Change
	// Answer makes the fake answer the read of a pull request with code (0: as it is).
	Answer func(code int)
	// Reads counts the fake's reads of a pull request; Violations are its requests outside
	// the provider's API description (nil when the fake checks none).
	Reads      func() int
	Violations func() []string
	// Refusal is a status the provider refuses a credential with; Refused says whether an
	// error is the provider's refusal.
	Refusal int
	Refused func(error) bool
}

// CheckPullNow checks the promise of every provider's PullNow: it answers the title and target
// branch the provider shows now (not the webhook's), in one read; a refused read, an outage, a
// pull request the provider does not know and a change naming none answer an error and no state
// (a refusal as the provider's refusal, an outage as Transient); an outage is not retried within
// the call.
func CheckPullNow(t *testing.T, world func(t *testing.T) PullNowWorld) {
	t.Helper()
	w := world(t)
	w.AddPull(7, "feat: as it is now", "release/2")
	got, err := w.PullNow(context.Background(), w.Change(7))
	if want := (change.PullState{Title: "feat: as it is now", TargetBranch: "release/2"}); err != nil || got != want {
		t.Fatalf("PullNow = %+v, %v; want %+v", got, err, want)
	}
	if n := w.Reads(); n != 1 {
		t.Fatalf("%d reads of the pull request, want 1", n)
	}
	if w.Violations != nil {
		if v := w.Violations(); len(v) > 0 {
			t.Fatalf("requests outside the API's description: %v", v)
		}
	}
	for _, c := range []struct {
		name           string
		answer, number int
		refused        bool
		reads          int
	}{
		{name: "refused", answer: w.Refusal, number: 7, refused: true, reads: 1},
		{name: "outage", answer: http.StatusServiceUnavailable, number: 7, reads: 1},
		{name: "unknown pull request", number: 8, refused: true, reads: 1},
		{name: "no pull request"},
	} {
		w := world(t)
		w.AddPull(7, "feat: x", "main")
		w.Answer(c.answer)
		s := w.Change(c.number)
		if c.number == 0 {
			s.Pull = nil
		}
		got, err := w.PullNow(context.Background(), s)
		if err == nil || got != (change.PullState{}) {
			t.Fatalf("%s: PullNow = %+v, %v; want an error and no state", c.name, got, err)
		}
		if c.answer == http.StatusServiceUnavailable && providerapi.ClassOf(err) != providerapi.Transient {
			t.Fatalf("%s: %v is %v, want transient", c.name, err, providerapi.ClassOf(err))
		}
		if w.Refused(err) != c.refused {
			t.Fatalf("%s: %v: refused %v, want %v", c.name, err, !c.refused, c.refused)
		}
		if n := w.Reads(); n != c.reads {
			t.Fatalf("%s: %d reads of the pull request, want %d", c.name, n, c.reads)
		}
	}
}

// AnswerOnly is a fake's Answer that answers op with code (0: as it is) and leaves every other
// operation as it is.
func AnswerOnly(op string, code int) func(string, int) int {
	return func(o string, _ int) int {
		if o == op {
			return code
		}
		return 0
	}
}
