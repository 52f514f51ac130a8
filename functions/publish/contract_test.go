package publish_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea/giteatest"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/publish/publishtest"
)

// Every publisher that posts to a provider keeps the publisher contract against its
// provider's fake.

func TestGitHubStatusesKeepThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, func(t *testing.T) publishtest.Harness { return newGitHubHarness(t, "statuses", false) })
}

func TestGitHubStatusesAsAnAppKeepThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, func(t *testing.T) publishtest.Harness { return newGitHubHarness(t, "statuses", true) })
}

func TestGitHubCheckRunsKeepThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, func(t *testing.T) publishtest.Harness { return newGitHubHarness(t, "checks", true) })
}

func TestGiteaKeepsThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, newGiteaHarness)
}

func TestGitLabKeepsThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, newGitLabHarness)
}

func TestBitbucketCloudKeepsThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, newBitbucketHarness)
}

func TestBitbucketDataCenterKeepsThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, func(t *testing.T) publishtest.Harness { return newBitbucketDCHarness(t, "") })
}

func TestBitbucketDataCenterUnderAContextPathKeepsThePublisherContract(t *testing.T) {
	publishtest.RunContract(t, func(t *testing.T) publishtest.Harness { return newBitbucketDCHarness(t, "/bitbucket") })
}

const contractRepo = "octo-org/octo-repo"

// contractStatus is delivery n's verdict on the commit sha, under the context amiss/verdict.
func contractStatus(n int) publish.Status {
	state := "failure"
	if n%2 == 0 {
		state = "success"
	}
	return publish.Status{Repository: contractRepo, SHA: sha, State: state, Description: fmt.Sprintf("the verdict of delivery %d", n),
		Context: "amiss/verdict", TargetURL: fmt.Sprintf("https://ci.example.com/r/%d", n), Installation: 7,
		ExternalID: fmt.Sprintf("%064x", n)}
}

// noSleep makes a publisher's client fail a wait at once: the contract's publishers make one
// attempt a call.
func noSleep(context.Context, time.Duration) error { return context.Canceled }

// fault is the behaviour of a staged fault; rateLimit is the provider's own rate-limit answer.
func fault(f publishtest.Fault, refused int, rateLimit func() providerapitest.Behavior) providerapitest.Behavior {
	switch f {
	case publishtest.Refused:
		return providerapitest.Behavior{Code: refused}
	case publishtest.Unauthorized:
		return providerapitest.Behavior{Code: http.StatusUnauthorized}
	case publishtest.Lost:
		return providerapitest.Behavior{Lost: http.StatusInternalServerError}
	case publishtest.Cut:
		return providerapitest.Behavior{Cut: true}
	case publishtest.RateLimited:
		return rateLimit()
	}
	return providerapitest.Behavior{}
}

// staged holds the fault of the harness's fake.
type staged struct {
	mu sync.Mutex
	f  publishtest.Fault
}

func (s *staged) Posts(f publishtest.Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f = f
}

func (s *staged) now() publishtest.Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f
}

// retryAfter is a 429 naming the wait in Retry-After.
func retryAfter() providerapitest.Behavior {
	return providerapitest.Behavior{Code: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": strconv.Itoa(int(publishtest.RateLimitWait.Seconds()))}}
}

// resetAt is code with the wait as a reset time (Unix seconds in header) against the answer's
// Date, plus extra headers.
func resetAt(code int, header string, extra ...string) providerapitest.Behavior {
	now := time.Now().UTC().Truncate(time.Second)
	h := map[string]string{"Date": now.Format(http.TimeFormat), header: strconv.FormatInt(now.Add(publishtest.RateLimitWait).Unix(), 10)}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return providerapitest.Behavior{Code: code, Header: h}
}

// gitHubHarness: the statuses or check-runs publisher, with a token or as an App, on the one
// GitHub fake.
type gitHubHarness struct {
	staged
	fake   *githubtest.GitHub
	checks bool
	pub    publish.Publisher
}

func newGitHubHarness(t *testing.T, kind string, asApp bool) publishtest.Harness {
	key, pemKey := appKey()
	h := &gitHubHarness{fake: githubtest.NewApp(42, &key.PublicKey), checks: kind == "checks"}
	h.fake.Authorize = githubtest.Token("ghp_token")
	h.fake.Install(7, contractRepo)
	// GitHub's primary rate limit: 403, x-ratelimit-remaining 0, reset at a Unix time.
	rateLimit := func() providerapitest.Behavior {
		return resetAt(http.StatusForbidden, "X-Ratelimit-Reset", "X-Ratelimit-Remaining", "0")
	}
	h.fake.Post = func(int, githubtest.Created) providerapitest.Behavior {
		return fault(h.now(), http.StatusUnprocessableEntity, rateLimit)
	}
	h.fake.Create = func(int, githubtest.CheckRun) providerapitest.Behavior {
		return fault(h.now(), http.StatusUnprocessableEntity, rateLimit)
	}
	srv := httptest.NewServer(h.fake)
	t.Cleanup(srv.Close)
	var client *github.Client
	switch {
	case asApp:
		app, err := github.NewApp(github.AppConfig{BaseURL: srv.URL, AppID: "42", PrivateKey: pemKey, Client: srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		if h.checks {
			p := publish.NewGitHubChecks(srv.URL, app, srv.Client())
			h.pub, client = p, p.Client
		} else {
			p := publish.NewGitHubApp(srv.URL, app, srv.Client())
			h.pub, client = p, p.Client
		}
	default:
		p := publish.NewGitHub(srv.URL, "ghp_token", srv.Client())
		h.pub, client = p, p.Client
	}
	client.MaxAttempts, client.Sleep = 1, noSleep
	t.Cleanup(func() {
		if v := h.fake.Violations(); len(v) > 0 {
			t.Errorf("requests GitHub's description refuses: %q", v)
		}
	})
	return h
}

func (h *gitHubHarness) Publisher() publish.Publisher { return h.pub }
func (h *gitHubHarness) Status(n int) publish.Status  { return contractStatus(n) }

func (h *gitHubHarness) shows(s publish.Status, c githubtest.Created) bool {
	return c.Context == s.Context && c.State == s.State && c.Description == s.Description && c.TargetURL == s.TargetURL
}

func (h *gitHubHarness) showsRun(s publish.Status, r githubtest.CheckRun) bool {
	return r.Name == s.Context && r.ExternalID == s.ExternalID && r.Conclusion == publish.Conclusion(s.State) && r.Status == "completed"
}

func (h *gitHubHarness) Shown(s publish.Status) bool {
	if h.checks {
		r, ok := h.fake.LatestRun(s.Repository, s.SHA, s.Context)
		return ok && h.showsRun(s, r)
	}
	c, ok := h.fake.Latest(s.Repository, s.SHA, s.Context)
	return ok && h.shows(s, c)
}

func (h *gitHubHarness) Posted(s publish.Status) int {
	n := 0
	if h.checks {
		for _, r := range h.fake.Runs(s.Repository, s.SHA) {
			if h.showsRun(s, r) {
				n++
			}
		}
		return n
	}
	for _, c := range h.fake.Created(s.Repository, s.SHA) {
		if h.shows(s, c) {
			n++
		}
	}
	return n
}

// Crowd: for statuses, other contexts on the commit (the combined status lists a context a
// line, 100 a page); for check runs, other deliveries' check runs of the name (listed 100 a
// page).
func (h *gitHubHarness) Crowd(s publish.Status, n int) {
	for i := range n {
		if h.checks {
			h.fake.AddCheckRun(githubtest.CheckRun{Repository: s.Repository, HeadSHA: s.SHA, Name: s.Context, ExternalID: fmt.Sprintf("crowd-%d-%d", i, time.Now().UnixNano()),
				Status: "completed", Conclusion: "success", Title: "t", Summary: "s"})
			continue
		}
		h.fake.AddStatus(githubtest.Created{Repository: s.Repository, SHA: s.SHA, Context: fmt.Sprintf("ci/job-%d-%d", i, time.Now().UnixNano()),
			State: "success"})
	}
}

// giteaHarness: the Gitea/Forgejo publisher on Gitea's fake.
type giteaHarness struct {
	staged
	fake *giteatest.Gitea
	pub  *publish.Gitea
}

func newGiteaHarness(t *testing.T) publishtest.Harness {
	h := &giteaHarness{fake: giteatest.New(func(tok string) bool { return tok == "gitea_token" })}
	h.fake.Post = func(int, giteatest.Status) providerapitest.Behavior {
		return fault(h.now(), http.StatusUnprocessableEntity, retryAfter)
	}
	srv := httptest.NewServer(h.fake)
	t.Cleanup(srv.Close)
	h.pub = publish.NewGitea(srv.URL, "gitea_token", srv.Client())
	h.pub.MaxAttempts, h.pub.Sleep = 1, noSleep
	t.Cleanup(func() {
		if v := h.fake.Violations(); len(v) > 0 {
			t.Errorf("requests Gitea refuses: %q", v)
		}
	})
	return h
}

func (h *giteaHarness) Publisher() publish.Publisher { return h.pub }
func (h *giteaHarness) Status(n int) publish.Status  { return contractStatus(n) }

func giteaShows(s publish.Status, c giteatest.Status) bool {
	return c.Context == s.Context && c.State == s.State && c.Description == s.Description && c.TargetURL == s.TargetURL
}

func (h *giteaHarness) Shown(s publish.Status) bool {
	c, ok := h.fake.Latest(s.Repository, s.SHA, s.Context)
	return ok && giteaShows(s, c)
}

func (h *giteaHarness) Posted(s publish.Status) int {
	n := 0
	for _, c := range h.fake.Statuses(s.Repository, s.SHA) {
		if giteaShows(s, c) {
			n++
		}
	}
	return n
}

func (h *giteaHarness) Crowd(s publish.Status, n int) {
	for i := range n {
		h.fake.Add(giteatest.Status{Repository: s.Repository, SHA: s.SHA, Context: fmt.Sprintf("ci/job-%d-%d", i, time.Now().UnixNano()), State: "success"})
	}
}

// gitLabHarness: the GitLab publisher on GitLab's fake.
type gitLabHarness struct {
	staged
	fake *gitlabtest.GitLab
	pub  *publish.GitLab
}

func newGitLabHarness(t *testing.T) publishtest.Harness {
	h := &gitLabHarness{fake: gitlabtest.New(func(tok string) bool { return tok == "glpat-token" })}
	h.fake.Post = func(int, gitlabtest.Status) providerapitest.Behavior {
		// GitLab's 422: the pipeline's job limit (a 400 is read back first).
		return fault(h.now(), http.StatusUnprocessableEntity, func() providerapitest.Behavior {
			return resetAt(http.StatusTooManyRequests, "RateLimit-Reset")
		})
	}
	srv := httptest.NewServer(h.fake)
	t.Cleanup(srv.Close)
	h.pub = publish.NewGitLab(srv.URL, "glpat-token", srv.Client())
	h.pub.MaxAttempts, h.pub.Sleep = 1, noSleep
	t.Cleanup(func() {
		if v := h.fake.Violations(); len(v) > 0 {
			t.Errorf("requests GitLab refuses: %q", v)
		}
	})
	return h
}

func (h *gitLabHarness) Publisher() publish.Publisher { return h.pub }
func (h *gitLabHarness) Status(n int) publish.Status  { return contractStatus(n) }

func gitlabShows(s publish.Status, c gitlabtest.Status) bool {
	state := "failed"
	if s.State == "success" {
		state = "success"
	}
	return c.Name == s.Context && c.State == state && c.Description == s.Description && c.TargetURL == s.TargetURL
}

func (h *gitLabHarness) Shown(s publish.Status) bool {
	c, ok := h.fake.Latest(s.Repository, s.SHA, s.Context)
	return ok && gitlabShows(s, c)
}

func (h *gitLabHarness) Posted(s publish.Status) int {
	n := 0
	for id := int64(1); ; id++ {
		c, ok := h.fake.ByID(id)
		if !ok {
			return n
		}
		if c.Project == s.Repository && c.SHA == s.SHA && gitlabShows(s, c) {
			n++
		}
	}
}

// Crowd: statuses of other deliveries under the name (GitLab lists a name's statuses oldest
// first, 100 a page at most).
func (h *gitLabHarness) Crowd(s publish.Status, n int) {
	for i := range n {
		h.fake.Add(gitlabtest.Status{Project: s.Repository, SHA: s.SHA, Name: s.Context, State: "success",
			Description: fmt.Sprintf("an earlier job %d", i)})
	}
}

// bitbucketHarness: the Bitbucket Cloud publisher on its fake.
type bitbucketHarness struct {
	staged
	fake *bitbuckettest.Bitbucket
	pub  *publish.Bitbucket
}

func newBitbucketHarness(t *testing.T) publishtest.Harness {
	h := &bitbucketHarness{fake: bitbuckettest.New(func(tok string) bool { return tok == "bb_token" })}
	h.fake.AddCommit(contractRepo, sha)
	h.fake.Post = func(int, bitbuckettest.Status) providerapitest.Behavior {
		return fault(h.now(), http.StatusBadRequest, retryAfter)
	}
	srv := httptest.NewServer(h.fake)
	t.Cleanup(srv.Close)
	h.pub = publish.NewBitbucket(srv.URL, "bb_token", srv.Client())
	h.pub.MaxAttempts, h.pub.Sleep = 1, noSleep
	t.Cleanup(func() {
		if v := h.fake.Violations(); len(v) > 0 {
			t.Errorf("requests Bitbucket refuses: %q", v)
		}
	})
	return h
}

func (h *bitbucketHarness) Publisher() publish.Publisher { return h.pub }
func (h *bitbucketHarness) Status(n int) publish.Status  { return contractStatus(n) }

func (h *bitbucketHarness) Shown(s publish.Status) bool {
	c, ok := h.fake.Status(s.Repository, s.SHA, publish.BitbucketKey(s.Context))
	state := "FAILED"
	if s.State == "success" {
		state = "SUCCESSFUL"
	}
	return ok && c.State == state && c.Desc == s.Description && c.URL == s.TargetURL && c.Name == s.Context
}

// Posted: Bitbucket keeps one status per key, so a status shown was posted once.
func (h *bitbucketHarness) Posted(s publish.Status) int {
	if h.Shown(s) {
		return 1
	}
	return 0
}

// Crowd: statuses of other keys on the commit (the read-back reads the key's alone).
func (h *bitbucketHarness) Crowd(s publish.Status, n int) {
	for i := range n {
		h.fake.Put(bitbuckettest.Status{Repository: s.Repository, SHA: s.SHA, Key: fmt.Sprintf("ci-%d-%d", i, time.Now().UnixNano()),
			State: "SUCCESSFUL", URL: "https://ci.example.com"})
	}
}

// bitbucketDCHarness: the Bitbucket Data Center publisher on its fake, served at the root or
// under a context path.
type bitbucketDCHarness struct {
	staged
	fake *bitbucketdctest.BitbucketDC
	pub  *publish.BitbucketDataCenter
}

// dcRepo is the contract's repository as Data Center names it: its project's key and its slug.
const dcRepo = "OCTO/octo-repo"

func newBitbucketDCHarness(t *testing.T, contextPath string) publishtest.Harness {
	h := &bitbucketDCHarness{fake: bitbucketdctest.New(func(tok string) bool { return tok == "dc_token" })}
	h.fake.ContextPath = contextPath
	h.fake.AddCommit(dcRepo, bitbucketdctest.Commit{ID: sha, Message: "the commit"})
	h.fake.Post = func(int, bitbucketdctest.Status) providerapitest.Behavior {
		return fault(h.now(), http.StatusBadRequest, retryAfter)
	}
	srv := httptest.NewServer(h.fake)
	t.Cleanup(srv.Close)
	h.pub = publish.NewBitbucketDataCenter(srv.URL+contextPath, "dc_token", srv.Client())
	h.pub.MaxAttempts, h.pub.Sleep = 1, noSleep
	t.Cleanup(func() {
		if v := h.fake.Violations(); len(v) > 0 {
			t.Errorf("requests Bitbucket Data Center refuses: %q", v)
		}
	})
	return h
}

func (h *bitbucketDCHarness) Publisher() publish.Publisher { return h.pub }

func (h *bitbucketDCHarness) Status(n int) publish.Status {
	s := contractStatus(n)
	s.Repository = dcRepo
	return s
}

func (h *bitbucketDCHarness) Shown(s publish.Status) bool {
	c, ok := h.fake.Status(s.Repository, s.SHA, s.Context)
	state := "FAILED"
	if s.State == "success" {
		state = "SUCCESSFUL"
	}
	return ok && c.State == state && c.Description == s.Description && c.URL == s.TargetURL && c.Name == s.Context
}

// Posted: Data Center keeps one status per key, so a status shown was posted once.
func (h *bitbucketDCHarness) Posted(s publish.Status) int {
	if h.Shown(s) {
		return 1
	}
	return 0
}

// Crowd: statuses of other keys on the commit (the read-back reads the key's alone).
func (h *bitbucketDCHarness) Crowd(s publish.Status, n int) {
	for i := range n {
		h.fake.Put(bitbucketdctest.Status{Repository: s.Repository, Commit: s.SHA, Key: fmt.Sprintf("ci-%d-%d", i, time.Now().UnixNano()),
			State: "SUCCESSFUL", URL: "https://ci.example.com"})
	}
}

// appKey is the App's key, generated once for the package's tests.
var appKey = sync.OnceValues(githubtest.GenerateKey)
