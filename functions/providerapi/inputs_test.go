package providerapi_test

import (
	"errors"
	"fmt"
	"strings"
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
	cut := &providerapi.Answer{Status: 200, Body: []byte(`[` + strings.Repeat(`"a",`, 1<<19)), Cut: true} // 2 MiB, the bound asked
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a refusal", &providerapi.Error{Class: providerapi.Operator, Status: 403, Err: refused}, "grant the token the read scope"},
		{"an answer past its bound", cut.DecodeWithin("page 2 of the files", &[]string{}),
			"page 2 of the files is longer than the 2 MiB amiss reads of an answer"},
		{"a bound wrapped by the provider's client", providerapi.Wrap(cut.DecodeWithin("the comparison", &[]string{}), providerapi.Transient, "reading"),
			"the comparison is longer than the 2 MiB amiss reads of an answer"},
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

// A range is read from the base the webhook named; a new branch's from the repository's
// default branch; the push that created the default branch, or one in a repository that names
// none, is marked unread with nothing compared; and nothing is read unless commits or paths are
// needed.
func TestARangeBeginsAtItsBaseOrTheDefaultBranch(t *testing.T) {
	const created = "the push created the default branch"
	for _, c := range []struct {
		name     string
		ref      string
		base     string
		need     change.Inputs
		branch   string
		reads    int    // of the default branch
		compared string // the base compared with, "" for none
		unread   string
	}{
		{"a push", "refs/heads/topic", "0123abc", change.CommitsInput | change.PathsInput, "main", 0, "0123abc", ""},
		{"a new branch", "refs/heads/topic", "", change.PathsInput, "main", 1, "main", ""},
		{"the default branch's first push", "refs/heads/main", "", change.CommitsInput, "main", 1, "", created},
		{"a repository without a default branch", "refs/heads/topic", "", change.CommitsInput, "", 1, "", created},
		{"a title alone", "refs/heads/topic", "", change.TitleInput, "main", 0, "", ""},
	} {
		s := change.Change{Ref: c.ref, SHA: "4567def"}
		reads, compared := 0, ""
		err := providerapi.ReadRange(&s, c.need, c.base, func() (string, string, error) {
			reads++
			return "refs/heads/" + c.branch, c.branch, nil
		}, created, func(base string) error {
			compared = base
			return nil
		})
		if err != nil || reads != c.reads || compared != c.compared {
			t.Errorf("%s: %v, %d reads of the default branch, compared with %q; want %d, %q", c.name, err, reads, compared, c.reads, c.compared)
		}
		c.need.Each(func(in change.Inputs) {
			if got := s.UnreadReason(in); got != c.unread {
				t.Errorf("%s: %v unread for %q, want %q", c.name, in, got, c.unread)
			}
		})
	}

	s := change.Change{Ref: "refs/heads/topic"}
	gone := &providerapi.Error{Class: providerapi.Operator, Status: 404, Err: errors.New("no repository")}
	err := providerapi.ReadRange(&s, change.PathsInput, "", func() (string, string, error) { return "refs/heads/", "", gone }, created,
		func(string) error { t.Error("compared after the default branch's read failed"); return nil })
	if err != gone || len(s.Unread) != 0 {
		t.Errorf("a failed read of the default branch: %v, %+v", err, s.Unread)
	}
}

// Paths read are added once each, in the order read, after those the change holds.
func TestPathsReadAreAddedOnce(t *testing.T) {
	s := change.Change{Paths: []string{"a", "b"}}
	providerapi.AddPaths(&s, "old/c", "c", "", "b", "c", "d")
	if got := fmt.Sprint(s.Paths); got != "[a b old/c c d]" {
		t.Errorf("paths %s, want [a b old/c c d]", got)
	}
}
