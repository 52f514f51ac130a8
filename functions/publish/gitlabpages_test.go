package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/publish"
)

const cannotTransition = `{"message":"Cannot transition status via :drop from :failed (Reason(s): Status cannot transition via \"drop\")"}`

// gitlabStatus is a commit status as GitLab's API shows it (API::Entities::CommitStatus, with
// its author as UserBasic), sized by the fields a status may carry.
func gitlabStatus(id int, name, desc, target string) map[string]any {
	return map[string]any{"id": id, "sha": sha, "ref": "feature/JIRA-12345-" + strings.Repeat("rework-the-window-handling-", 8),
		"status": "failed", "name": name, "target_url": target, "description": desc,
		"created_at": "2026-07-01T12:00:00.000Z", "started_at": nil, "finished_at": "2026-07-01T12:00:01.000Z",
		"allow_failure": false, "coverage": nil, "pipeline_id": 100000 + id,
		"author": map[string]any{"id": 7, "username": "ci-bot", "name": "CI bot " + strings.Repeat("x", 200),
			"state": "active", "locked": false,
			"avatar_url": "https://gitlab.example.com/uploads/-/system/user/avatar/7/" + strings.Repeat("a", 300) + ".png",
			"web_url":    "https://gitlab.example.com/ci-bot"}}
}

// The read-back after a 400 asks for 30 statuses a page, on the assumption (providers.go)
// that "30 stay well within the 64 KiB the client reads of an answer". They do not when the
// statuses carry what amiss itself posts: a description cut to GitLab's 255 characters, in a
// language written outside ASCII (3 bytes a character in UTF-8: an evaluator's Japanese
// message), a target URL of 253 characters (GitLab's limit is 255; its "&"s are escaped as
// \u0026 in GitLab's JSON, as Go's encoder does here), a 235-character branch name as ref, the
// author of TestGitLabReadBackFindsOurStatusPastTheFirstPage (about a kilobyte) and GitLab's
// other fields: about 2.3 KB a status, 68 KB a page (each field within GitLab's limits).
// Page 1 is then cut at 64 KiB, does not decode, and is a Transient error: every attempt
// fails alike, for the whole publish budget, and the row is abandoned although the commit
// shows this very verdict. The page size is fixed, so no attempt can ever do better.
func TestGitLabReadBackOfLongStatusesFitsTheReadLimit(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	s.Description = "失敗: " + strings.Repeat("プルリクエストのタイトルが規則に合っていません。", 20) // cut to 255 by the publisher
	s.TargetURL = "https://ci.example.com/amiss/report?project=group%2Fproject&sha=" + sha + strings.Repeat("&rule=forbidden_paths", 7)
	desc := []rune(s.Description)[:254]
	ours := string(desc) + "…"
	g := &gitlabCommit{refuse: cannotTransition}
	for i := range 40 {
		g.held = append(g.held, gitlabStatus(i+1, s.Context, fmt.Sprintf("%d ", i)+string(desc[:250])+"…", s.TargetURL))
	}
	g.held = append(g.held, gitlabStatus(41, s.Context, ours, s.TargetURL)) // ours, from the attempt whose answer was lost
	page, _ := json.Marshal(g.held[:30])
	t.Logf("a page of 30 statuses is %d bytes; the client reads %d", len(page), 64<<10)
	srv := httptest.NewServer(g)
	defer srv.Close()
	err := publish.NewGitLab(srv.URL, "glpat-token", srv.Client()).Publish(context.Background(), s)
	if err != nil {
		t.Fatalf("the commit shows our verdict (the 41st status under its name), yet Publish answered %v (class %v): "+
			"retried with the same page size until the publish budget abandons it", err, publish.ClassOf(err))
	}
}

// perPageCap is a GitLab (or a proxy before it) that serves fewer statuses a page than asked
// for: it rewrites per_page to at most max. GitLab says where the next page is (X-Next-Page,
// X-Total-Pages), which the read-back ignores: it stops at the first page shorter than the 30
// it asked for.
type perPageCap struct {
	h   http.Handler
	max int
}

func (c perPageCap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("per_page") {
		var n int
		fmt.Sscan(q.Get("per_page"), &n)
		if n > c.max {
			q.Set("per_page", fmt.Sprint(c.max))
			r.URL.RawQuery = q.Encode()
		}
	}
	c.h.ServeHTTP(w, r)
}

// A server that pages 20 at a time whatever per_page asks (GitLab's own default page size)
// answers page 1 with 20 statuses and X-Next-Page: 2. The read-back takes the short page for
// the last one and never reads page 2, where ours is: the 400 stands, Permanent, and the
// runner abandons at once a verdict the commit shows.
func TestGitLabReadBackFollowsTheNextPageHeader(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	g := &gitlabCommit{refuse: cannotTransition}
	for i := range 25 {
		g.held = append(g.held, map[string]any{"id": i + 1, "name": s.Context, "status": "failed",
			"description": fmt.Sprintf("failed: job %d of an earlier pipeline", i), "target_url": fmt.Sprintf("https://ci.example.com/r/old-%d", i)})
	}
	g.held = append(g.held, map[string]any{"id": 26, "name": s.Context, "status": "failed",
		"description": s.Description, "target_url": s.TargetURL})
	srv := httptest.NewServer(perPageCap{h: g, max: 20})
	defer srv.Close()
	err := publish.NewGitLab(srv.URL, "glpat-token", srv.Client()).Publish(context.Background(), s)
	if err != nil {
		t.Fatalf("the commit shows our verdict (the 26th status, on page 2 of 20 a page, announced by X-Next-Page), yet Publish "+
			"answered %v (class %v)", err, publish.ClassOf(err))
	}
}
