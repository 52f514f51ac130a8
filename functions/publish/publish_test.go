package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
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
	// 400 for an unchanged state: read back, and the status showing this very verdict (name,
	// state, description, link) counts as published.
	rec.answers = []func(http.ResponseWriter){
		status(http.StatusBadRequest),
		func(w http.ResponseWriter) {
			w.Write([]byte(`[{"id":1,"name":"other","status":"success"},{"id":2,"name":"amiss/verdict","status":"failed",` +
				`"description":"failed: pull request title","target_url":"https://ci.example.com/r/1"}]`))
		},
		func(w http.ResponseWriter) { w.Write([]byte(`[]`)) }, // the page after the last
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

// A Data Center build status is keyed and named by the context, posted with a bearer token;
// without a target URL it links the commit's page on the server (under its context path), and
// its description is cut to 255 characters.
func TestBitbucketDataCenter(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter){status(http.StatusNoContent)}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := st()
	s.Repository, s.State, s.TargetURL, s.Description = "PROJ/app", "success", "", strings.Repeat("é", 300)
	if err := publish.NewBitbucketDataCenter(srv.URL+"/bitbucket/", "dc_token", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	if got.Method != "POST" || got.Path != "/bitbucket/rest/api/latest/projects/PROJ/repos/app/commits/"+sha+"/builds" ||
		got.Header.Get("Authorization") != "Bearer dc_token" {
		t.Fatalf("request %+v", got)
	}
	if got.Body["state"] != "SUCCESSFUL" || got.Body["key"] != "amiss/verdict" || got.Body["name"] != "amiss/verdict" ||
		got.Body["url"] != srv.URL+"/bitbucket/projects/PROJ/repos/app/commits/"+sha || utf8.RuneCountInString(got.Body["description"]) != 255 {
		t.Fatalf("body %v", got.Body)
	}
	// A target URL longer than Data Center takes (frozen under an earlier configuration) would
	// have the status refused: the commit's page stands in for it; a shorter one is kept.
	rec.answers = []func(http.ResponseWriter){status(http.StatusNoContent), status(http.StatusNoContent)}
	for _, target := range []string{"https://ci.example/" + strings.Repeat("a", 440), "https://ci.example/r/1"} {
		s.TargetURL = target
		if err := publish.NewBitbucketDataCenter(srv.URL+"/bitbucket/", "dc_token", srv.Client()).Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if long, short := rec.got[1].Body["url"], rec.got[2].Body["url"]; long != srv.URL+"/bitbucket/projects/PROJ/repos/app/commits/"+sha ||
		short != "https://ci.example/r/1" {
		t.Fatalf("urls %q and %q", long, short)
	}
}

func TestQuickRetriesWithinOneCall(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter){
		status(http.StatusTooManyRequests, "Retry-After", "7"),
		status(http.StatusServiceUnavailable),
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
	rec.answers = []func(http.ResponseWriter){status(503), status(503), status(503), status(503)}
	n := len(rec.got)
	err := g.Publish(context.Background(), st())
	if publish.ClassOf(err) != publish.Transient || errors.Is(err, publish.ErrPermanent) || publish.Unknown(err) || len(rec.got) != n+3 {
		t.Fatalf("exhausted retries: %v after %d requests (want transient, known not applied, after 3)", err, len(rec.got)-n)
	}
}

// A POST whose answer leaves open whether the provider applied it (a 500, a gateway's 502 or
// 504, a timeout) is never sent again within the call: a second POST would create a second
// status. It is answered Unknown, and the runner reads back before it posts again.
func TestAPostThatMayHaveLandedIsNotRepeatedBlindly(t *testing.T) {
	for _, code := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout} {
		rec := &recorder{answers: []func(http.ResponseWriter){status(code), status(code)}}
		srv := httptest.NewServer(rec)
		g := publish.NewGitHub(srv.URL, "t", srv.Client())
		g.Sleep = func(context.Context, time.Duration) error { return nil }
		err := g.Publish(context.Background(), st())
		srv.Close()
		if publish.ClassOf(err) != publish.Transient || !publish.Unknown(err) || len(rec.got) != 1 {
			t.Fatalf("%d: %v (unknown %v) after %d requests, want one request answered transient and unknown", code, err, publish.Unknown(err), len(rec.got))
		}
	}
	// The answer never comes: the provider took the request and the connection was cut (as
	// a timeout leaves it).
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { providerapitest.Cut(w) }))
	defer cut.Close()
	var requests atomic.Int32
	hc := cut.Client()
	hc.Transport = countingTransport{hc.Transport, &requests}
	g := publish.NewGitHub(cut.URL, "t", hc)
	g.Sleep = func(context.Context, time.Duration) error { return nil }
	err := g.Publish(context.Background(), st())
	if !publish.Unknown(err) || requests.Load() != 1 {
		t.Fatalf("a POST whose connection was cut: %v (unknown %v) after %d requests, want one, unknown", err, publish.Unknown(err), requests.Load())
	}
	// A connection never made sent nothing: retried, and known not applied.
	closed := httptest.NewServer(http.NotFoundHandler())
	addr := closed.URL
	closed.Close()
	requests.Store(0)
	g = publish.NewGitHub(addr, "t", &http.Client{Transport: countingTransport{http.DefaultTransport, &requests}})
	g.Sleep = func(context.Context, time.Duration) error { return nil }
	if err := g.Publish(context.Background(), st()); publish.Unknown(err) || requests.Load() != 3 {
		t.Fatalf("refused connection: %v (unknown %v) after %d requests, want three, not unknown", err, publish.Unknown(err), requests.Load())
	}
}

type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int32
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// A provider asking for a long wait gets it from the runner's schedule: the call never sleeps
// through it (an hour's Retry-After used to be slept inside the call).
func TestLongWaitsAreTheRunnersToSchedule(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	g := publish.NewGitHub(srv.URL, "t", srv.Client())
	var waits []time.Duration
	g.Sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	date := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		answer func(http.ResponseWriter)
		want   time.Duration
	}{
		{"retry-after seconds", status(http.StatusServiceUnavailable, "Retry-After", "3600"), time.Hour},
		{"retry-after date, against the answer's own Date", status(http.StatusTooManyRequests, "Date", date.Format(http.TimeFormat),
			"Retry-After", date.Add(20*time.Minute).Format(http.TimeFormat)), 20 * time.Minute},
		{"primary rate limit", status(http.StatusForbidden, "Date", date.Format(http.TimeFormat), "X-Ratelimit-Remaining", "0",
			"X-Ratelimit-Reset", fmt.Sprint(date.Add(15*time.Minute).Unix())), 15 * time.Minute},
		{"secondary rate limit", status(http.StatusForbidden, "Retry-After", "60"), time.Minute},
		{"a day's wait is bounded", status(http.StatusServiceUnavailable, "Retry-After", "86400"), time.Hour},
	}
	for _, c := range cases {
		rec.answers = []func(http.ResponseWriter){c.answer}
		waits = nil
		n := len(rec.got)
		err := g.Publish(context.Background(), st())
		if publish.ClassOf(err) != publish.Transient || publish.RetryAfterOf(err) != c.want || len(rec.got) != n+1 || len(waits) != 0 {
			t.Fatalf("%s: %v (class %v, retry after %v) after %d requests and waits %v: want transient, %v, one request, no sleep",
				c.name, err, publish.ClassOf(err), publish.RetryAfterOf(err), len(rec.got)-n, waits, c.want)
		}
	}
}

// The table of answers: only a refusal that can never succeed for this verdict is permanent;
// 401, 403 and 404 are the operator's to fix, retried on the long schedule.
func TestAnswersAreClassifiedByProvider(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	noSleep := func(context.Context, time.Duration) error { return nil }
	gh := publish.NewGitHub(srv.URL, "t", srv.Client())
	gh.Sleep = noSleep
	gt := publish.NewGitea(srv.URL, "t", srv.Client())
	gt.Sleep = noSleep
	gl := publish.NewGitLab(srv.URL, "t", srv.Client())
	gl.Sleep = noSleep
	bb := publish.NewBitbucket(srv.URL, "t", srv.Client())
	bb.Sleep = noSleep
	dc := publish.NewBitbucketDataCenter(srv.URL, "t", srv.Client())
	dc.Sleep = noSleep
	pubs := map[string]publish.Publisher{"github": gh, "gitea": gt, "gitlab": gl, "bitbucket": bb, "bitbucket-datacenter": dc}
	type row struct {
		code  int
		class publish.Class
	}
	common := []row{{401, publish.Operator}, {403, publish.Operator}, {404, publish.Operator}, {422, publish.Permanent},
		{413, publish.Permanent}, {410, publish.Permanent}, {500, publish.Transient}, {502, publish.Transient},
		{503, publish.Transient}, {429, publish.Transient}, {408, publish.Transient}}
	for name, p := range pubs {
		rows := append([]row{}, common...)
		if name != "gitlab" { // GitLab's 400 is read back first (below)
			rows = append(rows, row{400, publish.Permanent})
		}
		rows = append(rows, row{409, publish.Transient})
		for _, r := range rows {
			rec.mu.Lock()
			rec.answers = nil
			for range 3 {
				rec.answers = append(rec.answers, status(r.code))
			}
			rec.mu.Unlock()
			err := p.Publish(context.Background(), st())
			if got := publish.ClassOf(err); got != r.class {
				t.Errorf("%s %d: %v, class %v; want %v", name, r.code, err, got, r.class)
			}
			if (r.class == publish.Permanent) != errors.Is(err, publish.ErrPermanent) {
				t.Errorf("%s %d: errors.Is(ErrPermanent) disagrees with the class %v", name, r.code, r.class)
			}
			if publish.StatusOf(err) != r.code {
				t.Errorf("%s %d: status %d in the error", name, r.code, publish.StatusOf(err))
			}
		}
	}
	// A transport failure is transient.
	dead := publish.NewGitHub("http://127.0.0.1:1", "t", nil)
	dead.Sleep = noSleep
	if err := dead.Publish(context.Background(), st()); publish.ClassOf(err) != publish.Transient {
		t.Fatalf("unreachable provider: %v", err)
	}
}

// GitLab answers 409 while its per-commit lock is busy: a busy signal, retried.
func TestGitLabBusyIsRetried(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter){
		status(http.StatusConflict), status(http.StatusConflict),
	}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	g := publish.NewGitLab(srv.URL, "t", srv.Client())
	var waits []time.Duration
	g.Sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	if err := g.Publish(context.Background(), st()); err != nil {
		t.Fatalf("409 then 201: %v", err)
	}
	if len(rec.got) != 3 || len(waits) != 2 || waits[0] < 3*time.Second {
		t.Fatalf("%d requests, waits %v: want 3 requests, waiting at least 3 s for GitLab's lock", len(rec.got), waits)
	}
	rec.answers = []func(http.ResponseWriter){status(http.StatusConflict), status(http.StatusConflict), status(http.StatusConflict)}
	err := g.Publish(context.Background(), st())
	if publish.ClassOf(err) != publish.Transient || publish.RetryAfterOf(err) < 3*time.Second {
		t.Fatalf("409 throughout: %v (want transient, retry after the lock)", err)
	}
}

// GitLab limits target_url to 255 characters: a longer one is left out, never cut into a
// broken link, and never makes GitLab refuse the verdict.
func TestGitLabLeavesOutALongTargetURL(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := st()
	s.TargetURL = "https://ci.example.com/" + strings.Repeat("r", 300)
	if err := publish.NewGitLab(srv.URL, "t", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if u, ok := rec.got[0].Body["target_url"]; ok {
		t.Fatalf("target_url of %d characters sent: %q", len(u), u)
	}
	s.TargetURL = "https://ci.example.com/" + strings.Repeat("r", 255-23)
	publish.NewGitLab(srv.URL, "t", srv.Client()).Publish(context.Background(), s)
	if rec.got[1].Body["target_url"] != s.TargetURL {
		t.Fatalf("a 255-character target_url was not sent")
	}
}

// Bitbucket's key is cut by characters, never inside one.
func TestBitbucketKeyIsCutByCharacters(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := st()
	s.Repository, s.Context = "team/app", "vérification/"+strings.Repeat("é", 40)
	if err := publish.NewBitbucket(srv.URL, "t", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	key := rec.got[0].Body["key"]
	if utf8.RuneCountInString(key) != 40 || strings.ContainsRune(key, utf8.RuneError) || !strings.HasPrefix(s.Context, key) {
		t.Fatalf("key %q (%d characters): want the context's first 40 characters", key, utf8.RuneCountInString(key))
	}
	if rec.got[0].Body["name"] != s.Context {
		t.Fatalf("name %q", rec.got[0].Body["name"])
	}
}

// Bitbucket Cloud's pull request events carry 12-character hashes: the publisher resolves one
// to the full hash and posts against that.
func TestBitbucketResolvesAbbreviatedHashes(t *testing.T) {
	const full = "d3022fc0ca3d65c7f6bd7b6d8a9f3c3b9d3a6b1e"
	rec := &recorder{answers: []func(http.ResponseWriter){
		func(w http.ResponseWriter) {
			// Shaped like GET /2.0/repositories/{workspace}/{repo_slug}/commit/{commit} on Cloud.
			fmt.Fprintf(w, `{"type":"commit","hash":%q,"date":"2026-07-01T11:59:00+00:00","message":"fix: close the window\n",
				"links":{"self":{"href":"https://api.bitbucket.org/2.0/repositories/team/app/commit/%s"}},
				"repository":{"type":"repository","full_name":"team/app"}}`, full, full)
		},
	}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := st()
	s.Repository, s.SHA, s.TargetURL = "team/app", full[:12], ""
	if err := publish.NewBitbucket(srv.URL, "bb_token", srv.Client()).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 2 || rec.got[0].Method != "GET" || rec.got[0].Path != "/2.0/repositories/team/app/commit/"+full[:12] ||
		rec.got[0].Header.Get("Authorization") != "Bearer bb_token" {
		t.Fatalf("resolution %+v", rec.got)
	}
	post := rec.got[1]
	if post.Path != "/2.0/repositories/team/app/commit/"+full+"/statuses/build" || !strings.HasSuffix(post.Body["url"], "/commits/"+full) {
		t.Fatalf("posted %s with url %q: want the full hash", post.Path, post.Body["url"])
	}
	// An abbreviated hash Bitbucket does not know is the operator's (404), never a wrong post.
	rec.answers = []func(http.ResponseWriter){status(http.StatusNotFound)}
	n := len(rec.got)
	err := publish.NewBitbucket(srv.URL, "t", srv.Client()).Publish(context.Background(), s)
	if publish.ClassOf(err) != publish.Operator || len(rec.got) != n+1 {
		t.Fatalf("unknown abbreviated hash: %v after %d requests", err, len(rec.got)-n)
	}
	// An answer that does not extend the abbreviation is not trusted.
	rec.answers = []func(http.ResponseWriter){func(w http.ResponseWriter) { w.Write([]byte(`{"hash":"` + sha + `"}`)) }}
	n = len(rec.got)
	if err := publish.NewBitbucket(srv.URL, "t", srv.Client()).Publish(context.Background(), s); err == nil || len(rec.got) != n+1 {
		t.Fatalf("a hash that does not extend the abbreviation was used: %v", err)
	}
}
