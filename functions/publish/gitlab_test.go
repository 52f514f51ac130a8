package publish_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/publish"
)

// An older GitLab refuses 400 a status repeating the name's state: the publisher reads the
// commit's statuses back, and a status showing this verdict (the POST of an earlier attempt,
// whose answer was lost) counts as published. The read-back is one request when the statuses
// fit a page: GitLab says there is no next page (X-Next-Page empty), so none is asked for.
func TestGitLabReadsBackOnceAfterA400ForAnUnchangedState(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	g := gitlabtest.New(nil)
	g.RefuseUnchanged = true
	g.Add(gitlabtest.Status{Project: s.Repository, SHA: s.SHA, Name: s.Context, State: "failed", Description: s.Description, TargetURL: s.TargetURL})
	srv := httptest.NewServer(g)
	defer srv.Close()
	if err := publish.NewGitLab(srv.URL, "glpat-token", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatalf("the commit shows this verdict, yet Publish answered %v", err)
	}
	if n := g.Lists(); n != 1 {
		t.Fatalf("the status list was read %d times after the 400, want once", n)
	}
	if v := g.Violations(); len(v) > 0 {
		t.Fatal(v)
	}
}

// A POST GitLab refused 400, whose read-back GitLab answers 500: the POST did nothing (GitLab
// refused it), and what failed is the read-back. The error says so, is transient, and is not
// an unknown outcome: there is no post to read back before the next attempt.
func TestGitLabNamesAFailedReadBackAfterA400(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	g := gitlabtest.New(nil)
	g.Post = func(int, gitlabtest.Status) providerapitest.Behavior {
		return providerapitest.Behavior{Code: http.StatusBadRequest}
	}
	g.List = func(int) int { return http.StatusInternalServerError }
	srv := httptest.NewServer(g)
	defer srv.Close()
	p := publish.NewGitLab(srv.URL, "glpat-token", srv.Client())
	p.MaxAttempts = 1
	err := p.Publish(context.Background(), s)
	if err == nil || publish.Unknown(err) || publish.ClassOf(err) != publish.Transient {
		t.Fatalf("%v: unknown %v, class %v; want a transient failure known to have posted nothing", err, publish.Unknown(err), publish.ClassOf(err))
	}
	if msg := err.Error(); !strings.Contains(msg, "400") || !strings.Contains(msg, "reading the statuses back failed") ||
		!strings.Contains(msg, "GET /api/v4/projects/group%2Fproject/repository/commits/"+s.SHA+"/statuses answered 500") {
		t.Fatalf("the error does not name the read-back as what failed: %v", err)
	}
	if g.Posts() != 1 || g.Count(s.Repository, s.SHA, s.Context) != 0 {
		t.Fatalf("%d posts, %d statuses", g.Posts(), g.Count(s.Repository, s.SHA, s.Context))
	}
}
