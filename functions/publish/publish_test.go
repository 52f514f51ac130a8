package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/publish"
)

const sha = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"

type seen struct {
	Method, Path, Query string
	Header              http.Header
	Body                map[string]string
}

// recorder answers each request with the next scripted answer and records what it got.
type recorder struct {
	mu      sync.Mutex
	got     []seen
	answers []func(w http.ResponseWriter)
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body map[string]string
	json.NewDecoder(req.Body).Decode(&body)
	r.mu.Lock()
	r.got = append(r.got, seen{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Clone(), body})
	var answer func(http.ResponseWriter)
	if len(r.answers) > 0 {
		answer, r.answers = r.answers[0], r.answers[1:]
	}
	r.mu.Unlock()
	if answer == nil {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{}`))
		return
	}
	answer(w)
}

func status(code int, header ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

func st() publish.Status {
	return publish.Status{Repository: "octo-org/octo-repo", SHA: sha, State: "failure",
		Description: "failed: pull request title", Context: "amiss/verdict", TargetURL: "https://ci.example.com/r/1"}
}

func TestGitHub(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	g := publish.NewGitHub(srv.URL+"/api/v3", "ghp_token", srv.Client())
	s := st()
	s.Description = strings.Repeat("é", 200)
	if err := g.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	if got.Method != "POST" || got.Path != "/api/v3/repos/octo-org/octo-repo/statuses/"+sha {
		t.Fatalf("request %s %s", got.Method, got.Path)
	}
	if got.Header.Get("Authorization") != "Bearer ghp_token" || got.Header.Get("Accept") != "application/vnd.github+json" ||
		got.Header.Get("X-GitHub-Api-Version") != "2022-11-28" {
		t.Fatalf("headers %v", got.Header)
	}
	if got.Body["state"] != "failure" || got.Body["context"] != "amiss/verdict" || got.Body["target_url"] != s.TargetURL ||
		utf8.RuneCountInString(got.Body["description"]) != 140 {
		t.Fatalf("body %v (description %d characters)", got.Body, utf8.RuneCountInString(got.Body["description"]))
	}
}

func TestGitea(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	if err := publish.NewGitea(srv.URL, "gitea_token", srv.Client()).Publish(context.Background(), st()); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	if got.Method != "POST" || got.Path != "/api/v1/repos/octo-org/octo-repo/statuses/"+sha || got.Header.Get("Authorization") != "token gitea_token" {
		t.Fatalf("request %+v", got)
	}
	if got.Body["state"] != "failure" || got.Body["context"] != "amiss/verdict" || got.Body["description"] != st().Description {
		t.Fatalf("body %v", got.Body)
	}
}

func TestGitLabAndItsUnchangedState(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	g := publish.NewGitLab(srv.URL, "glpat-token", srv.Client())
	s := st()
	s.Repository = "group/sub/project"
	if err := g.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	if got.Method != "POST" || got.Path != "/api/v4/projects/group%2Fsub%2Fproject/statuses/"+sha || got.Header.Get("PRIVATE-TOKEN") != "glpat-token" {
		t.Fatalf("request %+v", got)
	}
	if got.Body["state"] != "failed" || got.Body["name"] != "amiss/verdict" || got.Body["target_url"] != s.TargetURL {
		t.Fatalf("body %v (GitLab has no error state: failure and error are failed)", got.Body)
	}
	// 400 for an unchanged state: read back, and the matching status counts as published.
	rec.answers = []func(http.ResponseWriter){
		status(http.StatusBadRequest),
		func(w http.ResponseWriter) {
			w.Write([]byte(`[{"name":"other","status":"success"},{"name":"amiss/verdict","status":"failed"}]`))
		},
	}
	if err := g.Publish(context.Background(), s); err != nil {
		t.Fatalf("unchanged state treated as a failure: %v", err)
	}
	read := rec.got[2]
	if read.Method != "GET" || read.Path != "/api/v4/projects/group%2Fsub%2Fproject/repository/commits/"+sha+"/statuses" ||
		!strings.Contains(read.Query, "name=amiss%2Fverdict") {
		t.Fatalf("read back %+v", read)
	}
	// A 400 the statuses do not explain stays a refusal.
	rec.answers = []func(http.ResponseWriter){status(http.StatusBadRequest), func(w http.ResponseWriter) { w.Write([]byte(`[]`)) }}
	if err := g.Publish(context.Background(), s); !errors.Is(err, publish.ErrPermanent) {
		t.Fatalf("unexplained 400: %v", err)
	}
}

func TestBitbucketCloud(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := st()
	s.Repository, s.State, s.TargetURL = "team/app", "success", ""
	if err := publish.NewBitbucket(srv.URL, "bb_token", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	if got.Method != "POST" || got.Path != "/2.0/repositories/team/app/commit/"+sha+"/statuses/build" || got.Header.Get("Authorization") != "Bearer bb_token" {
		t.Fatalf("request %+v", got)
	}
	if got.Body["state"] != "SUCCESSFUL" || got.Body["key"] != "amiss/verdict" || !strings.HasSuffix(got.Body["url"], "/team/app/commits/"+sha) {
		t.Fatalf("body %v", got.Body)
	}
}

func TestRetriesHonourRetryAfterAndPermanentRefusals(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter){
		status(http.StatusTooManyRequests, "Retry-After", "7"),
		status(http.StatusBadGateway),
	}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	g := publish.NewGitHub(srv.URL, "t", srv.Client())
	var waits []time.Duration
	g.Sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	if err := g.Publish(context.Background(), st()); err != nil {
		t.Fatalf("transient failures not retried: %v", err)
	}
	if len(rec.got) != 3 || len(waits) != 2 || waits[0] < 7*time.Second {
		t.Fatalf("%d requests, waits %v: want 3 requests and a first wait of at least Retry-After 7s", len(rec.got), waits)
	}
	for _, code := range []int{401, 403, 404, 422} {
		rec.answers = []func(http.ResponseWriter){status(code)}
		n := len(rec.got)
		if err := g.Publish(context.Background(), st()); !errors.Is(err, publish.ErrPermanent) || len(rec.got) != n+1 {
			t.Fatalf("%d: %v after %d requests: want ErrPermanent after one", code, err, len(rec.got)-n)
		}
	}
	rec.answers = []func(http.ResponseWriter){status(500), status(500), status(500), status(500)}
	err := g.Publish(context.Background(), st())
	if err == nil || errors.Is(err, publish.ErrPermanent) {
		t.Fatalf("exhausted retries: %v (transient, not permanent)", err)
	}
}
