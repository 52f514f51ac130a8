package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
)

const sha = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"

// getStatus reads acme/app's combined status of sha.
var getStatus = providerapi.Request{Method: http.MethodGet, URL: "/repos/acme/app/commits/" + sha + "/status"}

func decodeJSON(resp *http.Response, v any) {
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
}

// A listing is read page by page by GitHub's Link header, however many pages it has, until the
// header names no next page; a listing longer than the bound is an error, never a list taken
// as whole.
func TestAListingIsReadByItsLinkHeader(t *testing.T) {
	fake := githubtest.New(githubtest.Token("t"))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	for i := range 250 {
		fake.AddStatus(githubtest.Created{Repository: "acme/app", SHA: sha, Context: fmt.Sprintf("ci/%03d", i), State: "success"})
	}
	c := github.NewTokenClient(srv.URL, "t", srv.Client())
	var contexts []string
	pages := 0
	r := getStatus
	r.URL += "?per_page=100"
	err := c.Pages(context.Background(), 0, r, 0, func(a *providerapi.Answer) (bool, error) {
		pages++
		var page struct {
			Statuses []struct{ Context string }
		}
		if err := a.Decode("a page", &page); err != nil {
			return false, err
		}
		for _, s := range page.Statuses {
			contexts = append(contexts, s.Context)
		}
		return true, nil
	})
	if err != nil || pages != 3 || len(contexts) != 250 || contexts[249] != "ci/249" {
		t.Fatalf("%d pages, %d contexts, %v", pages, len(contexts), err)
	}
	err = c.Pages(context.Background(), 0, r, 2, func(*providerapi.Answer) (bool, error) { return true, nil })
	if providerapi.ClassOf(err) != providerapi.Transient || !strings.Contains(err.Error(), "more than 2 pages") {
		t.Fatalf("a listing past its bound: %v", err)
	}
	if v := fake.Violations(); len(v) > 0 {
		t.Fatal(v)
	}
}

// A next-page link to another host (a proxy's rewrite, a forged answer) is never followed with
// the credential.
func TestANextLinkToAnotherHostIsNotFollowed(t *testing.T) {
	var asked []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Header.Get("Authorization"))
	}))
	defer evil.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", `<`+evil.URL+`/repos/acme/app/commits/x/status?page=2>; rel="next"`)
		w.Write([]byte(`{"statuses":[]}`))
	}))
	defer srv.Close()
	c := github.NewTokenClient(srv.URL, "secret-token", srv.Client())
	err := c.Pages(context.Background(), 0, getStatus, 0, func(*providerapi.Answer) (bool, error) { return true, nil })
	if err == nil || len(asked) != 0 || providerapi.ClassOf(err) != providerapi.Operator {
		t.Fatalf("followed a link to another host: %v, %d requests there", err, len(asked))
	}
}

// GitHub's rate limits come as 403 or 429: each is transient, with GitHub's wait (Retry-After
// in seconds or as a date against the answer's Date, x-ratelimit-reset against the Date, or a
// minute when GitHub names none); any other 403 is the operator's.
func TestGitHubsRateLimitsAreTransientWithItsWait(t *testing.T) {
	date := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		code   int
		header map[string]string
		body   string
		class  providerapi.Class
		wait   time.Duration
	}{
		{"primary", 403, map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": fmt.Sprint(date.Add(15 * time.Minute).Unix())}, "", providerapi.Transient, 15 * time.Minute},
		{"primary without a reset", 403, map[string]string{"X-Ratelimit-Remaining": "0"}, "", providerapi.Transient, time.Minute},
		{"secondary", 403, map[string]string{"Retry-After": "60"}, "", providerapi.Transient, time.Minute},
		{"secondary by date", 429, map[string]string{"Retry-After": date.Add(20 * time.Minute).Format(http.TimeFormat)}, "", providerapi.Transient, 20 * time.Minute},
		{"secondary in the message", 403, nil, `{"message":"You have exceeded a secondary rate limit."}`, providerapi.Transient, time.Minute},
		{"429 alone", 429, nil, "", providerapi.Transient, time.Minute},
		{"a scope", 403, nil, `{"message":"Resource not accessible by personal access token"}`, providerapi.Operator, 0},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", date.Format(http.TimeFormat))
			for k, v := range c.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(c.code)
			w.Write([]byte(c.body))
		}))
		cl := github.NewTokenClient(srv.URL, "t", srv.Client())
		cl.MaxAttempts = 1
		_, err := cl.Do(context.Background(), 0, getStatus)
		srv.Close()
		if providerapi.ClassOf(err) != c.class || providerapi.RetryAfterOf(err) != c.wait || providerapi.StatusOf(err) != c.code {
			t.Errorf("%s: %v (class %v, wait %v), want %v after %v", c.name, err, providerapi.ClassOf(err), providerapi.RetryAfterOf(err), c.class, c.wait)
		}
	}
}

// A token client's 401 is the operator's at once: there is no other token to try.
func TestATokensRefusalIsTheOperators(t *testing.T) {
	fake := githubtest.New(githubtest.Token("good"))
	srv := httptest.NewServer(fake)
	defer srv.Close()
	_, err := github.NewTokenClient(srv.URL, "bad", srv.Client()).Do(context.Background(), 0, getStatus)
	if providerapi.ClassOf(err) != providerapi.Operator || fake.Unauthorized() != 1 || strings.Contains(err.Error(), "bad") {
		t.Fatalf("%v after %d requests", err, fake.Unauthorized())
	}
	_, err = github.NewInstallationClient(srv.URL, noTokens{}, srv.Client()).Do(context.Background(), 0, getStatus)
	if !errors.Is(err, github.ErrNoInstallation) || providerapi.ClassOf(err) != providerapi.Operator || providerapi.Unknown(err) {
		t.Fatalf("no installation: %v", err)
	}
}

// noTokens is an App that has no installation token to give.
type noTokens struct{}

func (noTokens) Token(context.Context, int64) (github.InstallationToken, error) {
	return github.InstallationToken{}, errors.New("no token")
}
func (noTokens) Forget(int64, string) {}
