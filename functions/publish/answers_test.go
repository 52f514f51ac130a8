package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/functions/publish"
)

// gitlabCommit stands in for GitLab's commit status API on one commit: POST
// /api/v4/projects/:id/statuses/:sha and GET .../repository/commits/:sha/statuses. It already
// holds the statuses in held (for example one posted for another delivery of the same commit
// under the same context: a push and a merge request event for one sha). refuse, when set, is
// the 400 body GitLab answers the POST with (a validation error, or an older GitLab's "Cannot
// transition status"); the status is then not stored.
type gitlabCommit struct {
	refuse string

	mu   sync.Mutex
	held []map[string]any
}

func (g *gitlabCommit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/statuses/"):
		if g.refuse != "" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, g.refuse)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		st := map[string]any{"id": len(g.held) + 1, "name": body["name"], "status": body["state"],
			"description": body["description"], "target_url": body["target_url"]}
		g.held = append(g.held, st)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(st)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/statuses"):
		// Oldest first, paginated as GitLab does: per_page 20 by default, at most 100.
		q := r.URL.Query()
		name := q.Get("name")
		var out []map[string]any
		for _, st := range g.held {
			if name == "" || st["name"] == name {
				out = append(out, st)
			}
		}
		page, perPage := 1, 20
		fmt.Sscan(q.Get("page"), &page)
		fmt.Sscan(q.Get("per_page"), &perPage)
		page, perPage = max(page, 1), min(max(perPage, 1), 100)
		lo, hi := min((page-1)*perPage, len(out)), min(page*perPage, len(out))
		if hi < len(out) {
			w.Header().Set("X-Next-Page", fmt.Sprint(page+1))
		}
		json.NewEncoder(w).Encode(out[lo:hi])
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// latest is the status the commit shows for a name: the newest one.
func (g *gitlabCommit) latest(name string) map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.held) - 1; i >= 0; i-- {
		if g.held[i]["name"] == name {
			return g.held[i]
		}
	}
	return nil
}

// A publication GitLab answered 400 is counted as done only when the commit holds this
// verdict. The read-back matches by name and state alone, so a status that another verdict
// left under the same context in the same state (failure and error are both "failed") is taken
// for ours: the publisher reports success, the runner completes the row, and the commit shows
// the other verdict's description and link; ours is lost, and a plain validation refusal never
// reaches the operator as an abandonment with its reason.
func TestGitLabReadBackTakesAnotherVerdictForOurs(t *testing.T) {
	cases := map[string]string{
		"validation error":               `{"message":{"target_url":["is blocked: Requests to the local network are not allowed"]}}`,
		"older GitLab's unchanged state": `{"message":"Cannot transition status via :drop from :failed (Reason(s): Status cannot transition via \"drop\")"}`,
	}
	for name, refusal := range cases {
		t.Run(name, func(t *testing.T) {
			g := &gitlabCommit{refuse: refusal, held: []map[string]any{{"id": 1, "name": "amiss/verdict", "status": "failed",
				"description": "failed: forbidden path secrets/key.pem", "target_url": "https://ci.example.com/r/other"}}}
			srv := httptest.NewServer(g)
			defer srv.Close()
			s := st() // failure, "failed: pull request title", https://ci.example.com/r/1
			s.Repository = "group/project"
			err := publish.NewGitLab(srv.URL, "glpat-token", srv.Client()).Publish(context.Background(), s)
			if err != nil {
				return // not counted as published: the runner keeps or abandons it with the reason
			}
			got := g.latest(s.Context)
			if got == nil || got["description"] != s.Description || got["target_url"] != s.TargetURL {
				t.Fatalf("Publish reported success after a 400, but the commit shows %v for %q, not this verdict (%q, %q)",
					got, s.Context, s.Description, s.TargetURL)
			}
		})
	}
}

// GitLab lists a commit's statuses oldest first, 20 to a page. An older GitLab answers 400 to
// a status that repeats the commit's current state under that name, so a publication whose
// first POST landed and whose answer was lost is refused when posted again; the read-back must
// find it however many statuses the name gathered before it (a busy pipeline posts one per
// job). It read the first page only: a verdict posted after 20 others was not found, and the
// 400 abandoned a verdict the commit shows. Each status carries its author (about a kilobyte),
// so pages must also stay within what the client reads of an answer (64 KiB).
func TestGitLabReadBackFindsOurStatusPastTheFirstPage(t *testing.T) {
	s := st()
	s.Repository = "group/project"
	author := map[string]any{"id": 7, "username": "ci-bot", "name": "CI bot " + strings.Repeat("x", 200),
		"state": "active", "avatar_url": "https://gitlab.example.com/uploads/-/system/user/avatar/7/" + strings.Repeat("a", 300) + ".png",
		"web_url": "https://gitlab.example.com/ci-bot"}
	g := &gitlabCommit{refuse: `{"message":"Cannot transition status via :drop from :failed (Reason(s): Status cannot transition via \"drop\")"}`}
	for i := range 130 {
		g.held = append(g.held, map[string]any{"id": i + 1, "name": s.Context, "status": "failed", "author": author,
			"description": fmt.Sprintf("failed: job %d of an earlier pipeline", i), "target_url": fmt.Sprintf("https://ci.example.com/r/old-%d", i)})
	}
	g.held = append(g.held, map[string]any{"id": 131, "name": s.Context, "status": "failed", "author": author,
		"description": s.Description, "target_url": s.TargetURL}) // ours, from the attempt whose answer was lost
	srv := httptest.NewServer(g)
	defer srv.Close()
	if err := publish.NewGitLab(srv.URL, "glpat-token", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatalf("the commit shows our verdict (the 131st status under its name), yet Publish answered %v", err)
	}
}

// A Bitbucket commit is resolved from its abbreviated hash by reading the commit. Bitbucket
// Cloud's commit resource carries the whole message (raw, and rendered in summary), so a commit
// with a long message (a squash merge listing its commits) answers more than the 64 KiB the
// client reads; the cut JSON does not decode, the answer is classed a transient failure, and
// every attempt fails alike until the publish budget abandons a verdict Bitbucket would have
// taken at once.
func TestBitbucketResolvesACommitWithALongMessage(t *testing.T) {
	const full = "d3022fc0ca3d65c7f6bd7b6d8a9f3c3b9d3a6b1e"
	msg := "squash: merge feature\n\n" + strings.Repeat("* fix: a change in the window handling code\n", 600) // ~26 KB
	var mu sync.Mutex
	var posted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			if r.URL.Query().Get("fields") == "hash" { // Bitbucket's partial response
				fmt.Fprintf(w, `{"hash":%q}`, full)
				return
			}
			m, _ := json.Marshal(msg)
			fmt.Fprintf(w, `{"type":"commit","hash":%q,"date":"2026-07-01T11:59:00+00:00","message":%s,`+
				`"summary":{"type":"rendered","raw":%s,"markup":"markdown","html":%s},`+
				`"links":{"self":{"href":"https://api.bitbucket.org/2.0/repositories/team/app/commit/%s"}},`+
				`"repository":{"type":"repository","full_name":"team/app"}}`, full, m, m, m, full)
			return
		}
		mu.Lock()
		posted = append(posted, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	s := st()
	s.Repository, s.SHA, s.TargetURL = "team/app", full[:12], ""
	b := publish.NewBitbucket(srv.URL, "bb_token", srv.Client())
	for attempt := 1; attempt <= 3; attempt++ {
		if err := b.Publish(context.Background(), s); err != nil {
			t.Fatalf("attempt %d: %v (class %v): the verdict can never be posted although Bitbucket answers every request",
				attempt, err, publish.ClassOf(err))
		}
	}
	if len(posted) == 0 || posted[0] != "/2.0/repositories/team/app/commit/"+full+"/statuses/build" {
		t.Fatalf("posted %v", posted)
	}
}

// A self-hosted Gitea or Forgejo configured as base_url http://git.example.com (the
// configuration accepts http://) commonly answers every http request with a 301 to its
// https (or canonical) address. Go's client follows a 301 on a POST as a GET without the
// body; Gitea's GET on the same path lists the commit's statuses and answers 200, which the
// publisher takes for a posted status. Publish must not report success while the provider
// holds no status for the verdict.
func TestGiteaMovedServerIsNotCountedAsPublished(t *testing.T) {
	var mu sync.Mutex
	var held []map[string]string
	canonical := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasPrefix(r.URL.Path, "/api/v1/repos/octo-org/octo-repo/statuses/") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if r.Method == http.MethodGet { // Gitea: list a commit's statuses
			json.NewEncoder(w).Encode(held)
			return
		}
		var body map[string]string
		json.NewDecoder(r.Body).Decode(&body)
		held = append(held, body)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(body)
	}))
	defer canonical.Close()
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, canonical.URL+r.URL.RequestURI(), http.StatusMovedPermanently)
	}))
	defer old.Close()
	s := st()
	err := publish.NewGitea(old.URL, "gitea-token", &http.Client{}).Publish(context.Background(), s)
	mu.Lock()
	defer mu.Unlock()
	if err == nil && len(held) == 0 {
		t.Fatalf("Publish reported success, but the provider holds no status: the verdict %q is lost", s.Description)
	}
}
