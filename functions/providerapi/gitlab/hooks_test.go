package gitlab_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab/gitlabtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// hookWorld is GitLab's hooks fake, a project hook and a group hook delivering to an
// endpoint that answers code (0: it cuts the connection, as an unreachable one).
type hookWorld struct {
	fake   *gitlabtest.Hooks
	client *gitlab.Client
	now    time.Time
	code   atomic.Int32
}

var (
	projectHook = gitlabtest.Hook{Parent: "acme/app", ID: 17}
	groupHook   = gitlabtest.Hook{Group: true, Parent: "acme", ID: 9}
)

func newHookWorld(t *testing.T) *hookWorld {
	w := &hookWorld{now: time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)}
	w.code.Store(http.StatusOK)
	endpoint := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if code := int(w.code.Load()); code != 0 {
			rw.WriteHeader(code)
			return
		}
		providerapitest.Cut(rw)
	}))
	t.Cleanup(endpoint.Close)
	w.fake = &gitlabtest.Hooks{Authorize: func(tok string) bool { return tok == "glpat" }, Now: func() time.Time { return w.now }}
	w.fake.AddHook(projectHook, gitlabtest.HookConfig{URL: endpoint.URL, Token: "secret"})
	w.fake.AddHook(groupHook, gitlabtest.HookConfig{URL: endpoint.URL, Token: "secret"})
	api := httptest.NewServer(w.fake)
	t.Cleanup(api.Close)
	w.client = gitlab.NewClient(api.URL, "glpat", api.Client())
	w.client.Sleep = func(context.Context, time.Duration) error { return nil }
	return w
}

func (w *hookWorld) push(h gitlabtest.Hook, code int) gitlabtest.HookEvent {
	w.code.Store(int32(code))
	defer w.code.Store(http.StatusOK)
	w.now = w.now.Add(time.Minute)
	return w.fake.Trigger(h, gitlabtest.Event{Trigger: "push_hooks", Body: []byte(`{"object_kind":"push","project":{"path_with_namespace":"acme/app"}}`)})
}

func (w *hookWorld) list(t *testing.T, h gitlab.Hook, maxPages int) []gitlab.HookEvent {
	t.Helper()
	var got []gitlab.HookEvent
	err := w.client.HookEvents(context.Background(), h, maxPages, func(es []gitlab.HookEvent) (bool, error) {
		got = append(got, es...)
		return true, nil
	})
	if err != nil {
		t.Fatalf("list the events of %v: %v", h, err)
	}
	return got
}

// A hook's events are listed as GitLab lists them: newest first, at most 20 a page (a larger
// per_page is refused 400), back to the start of the day seven days ago; each attempt says
// what the endpoint answered, "internal error" read as no answer.
func TestHookEventsAreListedNewestFirstTwentyAPage(t *testing.T) {
	w := newHookWorld(t)
	old := w.push(projectHook, http.StatusOK)
	w.now = w.now.Add(8 * 24 * time.Hour) // the first event is now past GitLab's listing
	var made []gitlabtest.HookEvent
	for i := range 45 {
		code := http.StatusOK
		switch i % 3 {
		case 1:
			code = http.StatusServiceUnavailable
		case 2:
			code = 0
		}
		made = append(made, w.push(projectHook, code))
	}
	before := w.fake.Requests()
	got := w.list(t, gitlab.Hook{Project: "acme/app", ID: 17}, 10)
	if v := w.fake.Violations(); len(v) > 0 {
		t.Fatalf("requests GitLab would refuse: %q", v)
	}
	if n := w.fake.Requests() - before; n != 3 {
		t.Errorf("45 events listed in %d requests, want 3 pages of 20", n)
	}
	if len(got) != len(made) {
		t.Fatalf("listed %d events, want the %d of the past 7 days (not %d, older)", len(got), len(made), old.ID)
	}
	for i, e := range got {
		want := made[len(made)-1-i]
		wantCode := map[string]int{"200": 200, "503": 503, "internal error": 0}[want.Status]
		if e.ID != want.ID || e.StatusCode() != wantCode || e.Delivery() != want.IdempotencyKey || e.RequestData.Project.Path != "acme/app" ||
			!e.CreatedAt.Equal(want.At) {
			t.Fatalf("event %d listed as %+v (status %d, delivery %s), want %+v", i, e, e.StatusCode(), e.Delivery(), want)
		}
	}
	// The fake filters by status as GitLab documents it.
	for status, total := range map[string]string{"server_failure": "30", "successful": "15", "503,200": "30"} {
		a, err := w.client.Do(context.Background(), providerapi.Request{Method: http.MethodGet,
			URL: "/api/v4/projects/acme%2Fapp/hooks/17/events?status=" + status})
		if err != nil {
			t.Errorf("events of status %s: %v", status, err)
		} else if got := a.Header.Get("X-Total"); got != total {
			t.Errorf("events of status %s: X-Total %q, want %s", status, got, total)
		}
	}
	if _, err := w.client.Do(context.Background(), providerapi.Request{Method: http.MethodGet,
		URL: "/api/v4/projects/acme%2Fapp/hooks/17/events?status=failed"}); providerapi.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a status GitLab does not take: %v, want 400", err)
	}
	// A listing cut at its page bound says so.
	err := w.client.HookEvents(context.Background(), gitlab.Hook{Project: "acme/app", ID: 17}, 2, func([]gitlab.HookEvent) (bool, error) { return true, nil })
	if providerapi.ClassOf(err) != providerapi.Transient {
		t.Errorf("a listing longer than its bound: %v, want a transient error", err)
	}
}

// The attempts of one event share its Idempotency-Key, a resend's too; two events never
// share a delivery, even when GitLab logged them without the key and with the same
// X-Gitlab-Event-UUID (the request that triggered both).
func TestAttemptsOfOneEventAreTiedByItsIdempotencyKeyAlone(t *testing.T) {
	w := newHookWorld(t)
	first := w.push(groupHook, http.StatusServiceUnavailable)
	if err := w.client.ResendHookEvent(context.Background(), gitlab.Hook{Group: "acme", ID: 9}, first.ID); err != nil {
		t.Fatalf("resend: %v", err)
	}
	got := w.list(t, gitlab.Hook{Group: "acme", ID: 9}, 5)
	if len(got) != 2 || got[0].Delivery() != got[1].Delivery() || got[0].Delivery() != first.IdempotencyKey || got[0].StatusCode() != 200 {
		t.Fatalf("the event and its resend: %+v, want two attempts of delivery %s, the newest a 200", got, first.IdempotencyKey)
	}
	var a, b gitlab.HookEvent
	json.Unmarshal([]byte(`{"id":1,"request_headers":{"X-Gitlab-Event-UUID":"same"},"response_status":"internal error"}`), &a)
	json.Unmarshal([]byte(`{"id":2,"request_headers":{"X-Gitlab-Event-UUID":"same"},"response_status":"200"}`), &b)
	if a.Delivery() == b.Delivery() {
		t.Errorf("two events logged without an Idempotency-Key are one delivery %q", a.Delivery())
	}
}

// GitLab resends at once: when the endpoint answers, 201 (whatever it answered); when it does
// not, 422 with the error, after trying: that is no refusal of the event, and a later resend
// may succeed. The one refusal for good is the hook's URL having changed since.
func TestAResendTheEndpointDidNotAnswerIsNoRefusal(t *testing.T) {
	w := newHookWorld(t)
	h := gitlab.Hook{Project: "acme/app", ID: 17}
	e := w.push(projectHook, 0)
	w.code.Store(0)
	err := w.client.ResendHookEvent(context.Background(), h, e.ID)
	if !errors.Is(err, gitlab.ErrResentAndFailed) || providerapi.ClassOf(err) == providerapi.Permanent || !providerapi.Unknown(err) {
		t.Fatalf("a resend to an endpoint that did not answer: %v (class %v), want ErrResentAndFailed, not a refusal", err, providerapi.ClassOf(err))
	}
	if n := w.fake.Resends(projectHook)[e.IdempotencyKey]; n != 1 {
		t.Fatalf("GitLab sent the event again %d times, want 1", n)
	}
	w.code.Store(http.StatusServiceUnavailable)
	if err := w.client.ResendHookEvent(context.Background(), h, e.ID); err != nil {
		t.Errorf("a resend the endpoint answered 503: %v, want GitLab's 201", err)
	}
	w.fake.SetHookURL(projectHook, "http://127.0.0.1:1/moved")
	if err := w.client.ResendHookEvent(context.Background(), h, e.ID); providerapi.ClassOf(err) != providerapi.Permanent {
		t.Errorf("a resend after the hook's URL changed: %v, want Permanent", err)
	}
	if v := w.fake.Violations(); len(v) > 0 {
		t.Errorf("requests GitLab would refuse: %q", v)
	}
}

// GitLab takes 5 resends a minute for each project and user and refuses the next 429 naming no
// wait: the client does not send it again within the call, and says to wait a minute.
func TestAResendOverGitLabsLimitWaitsAMinute(t *testing.T) {
	w := newHookWorld(t)
	h := gitlab.Hook{Project: "acme/app", ID: 17}
	e := w.push(projectHook, http.StatusServiceUnavailable)
	w.now = w.now.Truncate(time.Minute)
	for i := range 5 {
		if err := w.client.ResendHookEvent(context.Background(), h, e.ID); err != nil {
			t.Fatalf("resend %d: %v", i+1, err)
		}
	}
	before := w.fake.Requests()
	err := w.client.ResendHookEvent(context.Background(), h, e.ID)
	if providerapi.ClassOf(err) != providerapi.Transient || providerapi.RetryAfterOf(err) < gitlab.ResendLimitWait {
		t.Fatalf("the sixth resend in a minute: %v (wait %v), want transient, a minute's wait", err, providerapi.RetryAfterOf(err))
	}
	if n := w.fake.Requests() - before; n != 1 {
		t.Errorf("the refused resend was sent %d times within the call, want once", n)
	}
	w.now = w.now.Add(time.Minute)
	if err := w.client.ResendHookEvent(context.Background(), h, e.ID); err != nil {
		t.Errorf("a resend the next minute: %v", err)
	}
}

// A token GitLab refuses, and a hook it does not know, are the operator's to fix; a hook of a
// project and a group at once is no hook.
func TestARefusedHookTokenIsTheOperators(t *testing.T) {
	w := newHookWorld(t)
	for _, c := range []struct {
		token string
		hook  gitlab.Hook
	}{{"nope", gitlab.Hook{Project: "acme/app", ID: 17}}, {"glpat", gitlab.Hook{Project: "acme/app", ID: 18}}} {
		cl := gitlab.NewClient(w.client.BaseURL, c.token, nil)
		err := cl.HookEvents(context.Background(), c.hook, 5, func([]gitlab.HookEvent) (bool, error) { return true, nil })
		if providerapi.ClassOf(err) != providerapi.Operator {
			t.Errorf("token %s, %v: %v, want the operator's", c.token, c.hook, err)
		}
	}
	if err := (gitlab.Hook{Project: "a", Group: "b", ID: 1}).Validate(); err == nil {
		t.Error("a hook of a project and a group at once passed")
	}
}
