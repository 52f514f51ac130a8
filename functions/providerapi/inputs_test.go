package providerapi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/providerapi"
)

// A read that fails for good leaves the inputs in need unread, with no error, naming what an
// operator can act on: the provider's own words for its refusal; else the bound an answer went
// past; else what failed, without the class an error's text ends with. A read that may mend
// when asked again is an error, and the change is answered as it was.
func TestAReadThatFailsForGoodNamesWhy(t *testing.T) {
	refused := errors.New("refused")
	refusal := func(err error) string {
		if errors.Is(err, refused) {
			return "grant the token the read scope"
		}
		return ""
	}
	need := change.CommitsInput | change.PathsInput
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a refusal", &providerapi.Error{Class: providerapi.Operator, Status: 403, Err: refused}, "grant the token the read scope"},
		{"an answer past its bound", providerapi.TooLong("page 2 of the files", 32<<20),
			"page 2 of the files is longer than the 32 MiB amiss reads of an answer"},
		{"a bound wrapped by the provider's client", providerapi.Wrap(providerapi.TooLong("the comparison", 8<<20), providerapi.Transient, "reading"),
			"the comparison is longer than the 8 MiB amiss reads of an answer"},
		{"a permanent refusal", &providerapi.Error{Class: providerapi.Permanent, Err: errors.New("the pull request names no destination commit")},
			"the pull request names no destination commit"},
		{"a refusal no client classified", fmt.Errorf("no branch: %w", providerapi.ErrPermanent), "no branch: refused for good"},
	} {
		s := change.Change{SHA: "abc", Paths: []string{"kept"}}
		got, err := providerapi.ReadInputs(s, need, "Forge", func(f *change.Change) (int, error) {
			f.Paths = append(f.Paths, "read in part")
			return 2, c.err
		}, refusal)
		if err != nil {
			t.Errorf("%s: an error %v, want the inputs marked unread", c.name, err)
			continue
		}
		for _, in := range []change.Inputs{change.CommitsInput, change.PathsInput} {
			if r := got.UnreadReason(in); r != c.want {
				t.Errorf("%s: %v unread for %q, want %q", c.name, in, r, c.want)
			}
		}
		if got.Whole&need != 0 || len(got.Paths) != 1 || len(got.Read) != 0 {
			t.Errorf("%s: answered %+v, want the change as it was but for the inputs marked unread", c.name, got)
		}
	}

	for _, failure := range []error{
		&providerapi.Error{Class: providerapi.Transient, Status: 503, Err: errors.New("GET /x answered 503")},
		errors.New("a failure no client classified"),
	} {
		s := change.Change{SHA: "abc"}
		got, err := providerapi.ReadInputs(s, need, "Forge", func(*change.Change) (int, error) { return 1, failure }, refusal)
		if providerapi.ClassOf(err) != providerapi.Transient || len(got.Unread) != 0 || got.Whole != 0 {
			t.Errorf("%v: %+v, %v; want the change unchanged and a Transient error", failure, got, err)
		}
	}
}
