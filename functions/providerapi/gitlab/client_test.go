package gitlab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
)

// GitLab names the next page in X-Next-Page (empty on the last): the listing is read to its
// end in as many requests as it has pages, whatever per_page the server keeps to; a server
// behind a proxy that strips the headers is read until an empty page.
func TestGitLabListingsFollowXNextPage(t *testing.T) {
	g := gitlabtest.New(nil)
	for i := range 45 {
		g.Add(gitlabtest.Status{Project: "group/project", SHA: "abc", Name: "ci", State: "success", Description: fmt.Sprint(i)})
	}
	for cap, wantLists := range map[int]int{0: 1, 20: 3} {
		g.MaxPerPage = cap
		srv := httptest.NewServer(g)
		c := gitlab.NewClient(srv.URL, "glpat", srv.Client())
		before := g.Lists()
		n := 0
		err := c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet,
			URL: gitlab.ProjectPath("group/project") + "/repository/commits/abc/statuses?per_page=100"}, 0,
			func(a *providerapi.Answer) (bool, error) {
				var page []json.RawMessage
				err := a.Decode("a page", &page)
				n += len(page)
				return true, err
			})
		srv.Close()
		if err != nil || n != 45 || g.Lists()-before != wantLists {
			t.Errorf("capped at %d: %d statuses in %d requests: %v", cap, n, g.Lists()-before, err)
		}
	}
	stripped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page") == "3" {
			w.Write([]byte(`[]`))
			return
		}
		w.Write([]byte(`[{"id":1}]`))
	}))
	defer stripped.Close()
	pages := 0
	err := gitlab.NewClient(stripped.URL, "glpat", stripped.Client()).Pages(context.Background(),
		providerapi.Request{Method: http.MethodGet, URL: "/api/v4/x?page=1"}, 0, func(*providerapi.Answer) (bool, error) { pages++; return true, nil })
	if err != nil || pages != 3 {
		t.Fatalf("without paging headers: %d pages, %v", pages, err)
	}
}

// GitLab's 409 is its per-commit lock: transient, after at least BusyWait; a 429 names its
// wait in RateLimit-Reset when it sends no Retry-After.
func TestGitLabsBusyAndRateLimitAnswers(t *testing.T) {
	date := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		code   int
		header map[string]string
		wait   time.Duration
	}{
		{http.StatusConflict, nil, gitlab.BusyWait},
		{http.StatusTooManyRequests, map[string]string{"Date": date.Format(http.TimeFormat), "RateLimit-Reset": fmt.Sprint(date.Add(40 * time.Second).Unix())}, 40 * time.Second},
		{http.StatusTooManyRequests, map[string]string{"Retry-After": "7", "RateLimit-Reset": "1"}, 7 * time.Second},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range c.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(c.code)
		}))
		cl := gitlab.NewClient(srv.URL, "glpat", srv.Client())
		cl.MaxAttempts = 1
		_, err := cl.Do(context.Background(), providerapi.Request{Method: http.MethodPost, URL: "/api/v4/x"})
		srv.Close()
		if providerapi.ClassOf(err) != providerapi.Transient || providerapi.RetryAfterOf(err) != c.wait || providerapi.Unknown(err) {
			t.Errorf("%d %v: %v, wait %v; want transient after %v", c.code, c.header, err, providerapi.RetryAfterOf(err), c.wait)
		}
	}
}
