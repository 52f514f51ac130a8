package evaluate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
)

// answering is an evaluator endpoint that answers every request with status and body.
func answering(t *testing.T, status int, body string) *evaluate.HTTP {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return &evaluate.HTTP{URL: srv.URL, Secret: []byte("s"), Client: srv.Client(), Timeout: 30 * time.Second}
}

var aPush = change.Change{Provider: "github", Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: change.Push,
	Whole: change.AllInputs}

// An answer longer than the evaluator reads is no verdict, even when what fits the limit reads
// as one: the rest of it may say otherwise.
func TestAnAnswerOverTheLimitIsNoVerdict(t *testing.T) {
	pad := strings.Repeat(" ", 64<<10)
	for _, body := range []string{
		`{"state":"success","description":"ok"}` + pad,
		`{"state":"success","description":"ok"}` + pad + `{"state":"failure","description":"the licence check failed"}`,
	} {
		v, err := answering(t, 200, body).Evaluate(context.Background(), aPush)
		if err == nil || !strings.Contains(err.Error(), "64 KiB") {
			t.Errorf("an answer of %d bytes: %+v %v, want an error naming the limit", len(body), v, err)
		}
	}
}

// Only a verdict is a verdict: an answer in another shape, a state that is not final, or any
// status but 2xx is an error (the attempt is retried, then the commit gets an error verdict).
// Fields the contract does not name are ignored.
func TestOnlyAVerdictIsAVerdict(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
	}{
		{200, "<html><body>Welcome</body></html>"},
		{200, `{"description":"no state"}`},
		{200, `{"state":"pending"}`},
		{200, `{"state":"Success"}`},
		{200, `{"state":"success"}{"state":"failure"}`},
		{200, `null`},
		{204, ``},
		{404, `{"state":"success"}`},
		{500, `{"state":"success"}`},
		{503, `{"state":"success"}`},
	} {
		if v, err := answering(t, c.status, c.body).Evaluate(context.Background(), aPush); err == nil {
			t.Errorf("%d %q taken as the verdict %+v", c.status, c.body, v)
		}
	}
	v, err := answering(t, 201, `{"state":"failure","description":"2 licences unknown","details":{"count":2},"files":[{"path":"x"}]}`).
		Evaluate(context.Background(), aPush)
	if err != nil || v.State != evaluate.Failure || v.Description != "2 licences unknown" || v.Files != nil {
		t.Errorf("a verdict with extra fields: %+v %v", v, err)
	}
}

// The evaluator's timeout bounds the whole call, the answer's body included: an endpoint that
// sends its headers and then stalls gets an error, not a wait without end.
func TestAStalledAnswerEndsAtTheTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		io.WriteString(w, `{"state":"succ`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	e := &evaluate.HTTP{URL: srv.URL, Secret: []byte("s"), Client: srv.Client(), Timeout: 2 * time.Second}
	if v, err := e.Evaluate(context.Background(), aPush); err == nil {
		t.Fatalf("a stalled answer: %+v", v)
	}
}

// The endpoint is told which inputs the change holds whole, always, and why each other one is
// not: a pull request's webhook names no files, and an endpoint must not read the absent list
// as "no files changed".
func TestTheEndpointIsToldWhatTheChangeDoesNotHoldWhole(t *testing.T) {
	var got map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = nil
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("the request body: %v", err)
		}
		io.WriteString(w, `{"state":"success","description":"ok"}`)
	}))
	defer srv.Close()
	e := &evaluate.HTTP{URL: srv.URL, Secret: []byte("s"), Client: srv.Client(), Timeout: 30 * time.Second}
	pr := change.Change{Provider: "github", Repository: "acme/app", SHA: strings.Repeat("a", 40), Event: change.PullRequest,
		Pull: &change.Pull{Number: 7, Title: "feat: x", TargetBranch: "main"}, Whole: change.TitleInput | change.PullInput}
	pr.MarkUnread(change.PathsInput, "GitHub lists at most 3,000 files of a pull request")
	bare := change.Change{Provider: "bitbucket", Repository: "acme/app", SHA: strings.Repeat("b", 40), Event: change.Push}
	for _, c := range []struct {
		name   string
		s      change.Change
		whole  string
		unread map[string]string // a reason, or "" for any reason that is not empty
	}{
		{"a pull request", pr, `["title","pull_request"]`,
			map[string]string{"commits": "", "paths": "GitHub lists at most 3,000 files of a pull request"}},
		{"a change holding nothing whole", bare, `[]`, map[string]string{"title": "", "pull_request": "", "commits": "", "paths": ""}},
		{"a push held whole", aPush, `["title","pull_request","commits","paths"]`, map[string]string{}},
	} {
		if _, err := e.Evaluate(context.Background(), c.s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got["whole"]) != c.whole {
			t.Errorf("%s: whole %s, want %s", c.name, got["whole"], c.whole)
		}
		var unread map[string]string
		if err := json.Unmarshal(got["unread"], &unread); err != nil || unread == nil {
			t.Errorf("%s: unread %s: %v", c.name, got["unread"], err)
			continue
		}
		if len(unread) != len(c.unread) {
			t.Errorf("%s: unread %v, want %d inputs", c.name, unread, len(c.unread))
		}
		for in, why := range c.unread {
			if unread[in] == "" || why != "" && unread[in] != why {
				t.Errorf("%s: unread %q: %q, want %q", c.name, in, unread[in], why)
			}
		}
	}
}

// An error names the endpoint without what its URL may carry as a credential (a password, a
// query such as an Azure Function's ?code=): the error of the last attempt becomes the commit's
// error verdict, which anyone who can see the commit reads.
func TestAnErrorNamesTheEndpointWithoutItsCredentials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens there any more: the request fails before an answer
	for _, base := range []string{srv.URL, closed.URL} {
		u := strings.Replace(base, "http://", "http://amiss:hunter2@", 1) + "/api/evaluate?code=k3y-SECRET"
		e := &evaluate.HTTP{URL: u, Secret: []byte("s"), Client: srv.Client(), Timeout: 30 * time.Second}
		_, err := e.Evaluate(context.Background(), aPush)
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "k3y-SECRET") ||
			!strings.Contains(msg, strings.TrimPrefix(base, "http://")+"/api/evaluate") {
			t.Errorf("the error %q shows a credential, or does not name the endpoint", msg)
		}
	}
}
