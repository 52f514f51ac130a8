package gitlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// HookEventRetention is how long GitLab lists a webhook's events: "in the past 7 days" (from
// the start of the day seven days ago; GitLab keeps them 14 days, and resends one as long).
const HookEventRetention = 7 * 24 * time.Hour

// hookEventsPage is the most events GitLab lists a page (per_page 1 to 20).
const hookEventsPage = 20

// ResendLimitWait is the wait after GitLab refuses a resend 429: it takes 5 a minute for each
// project or group and user, and names no wait.
const ResendLimitWait = time.Minute

// Hook names a project's webhook (Project: its path or numeric id) or a group's (Group), by
// its id.
type Hook struct {
	Project string
	Group   string
	ID      int64
}

// Validate reports a hook that names neither or both of a project and a group, or no id.
func (h Hook) Validate() error {
	switch {
	case (h.Project == "") == (h.Group == ""):
		return errors.New("a GitLab hook is a project's or a group's: name exactly one")
	case h.ID <= 0:
		return errors.New("a GitLab hook needs its id (Settings, Webhooks)")
	}
	return nil
}

// Parent is the project's or the group's path.
func (h Hook) Parent() string {
	if h.Group != "" {
		return h.Group
	}
	return h.Project
}

func (h Hook) String() string {
	if h.Group != "" {
		return fmt.Sprintf("webhook %d of group %s", h.ID, h.Group)
	}
	return fmt.Sprintf("webhook %d of project %s", h.ID, h.Project)
}

func (h Hook) path() (string, error) {
	if err := h.Validate(); err != nil {
		return "", err
	}
	parent := ProjectPath(h.Project)
	if h.Group != "" {
		parent = "/api/v4/groups/" + url.PathEscape(h.Group)
	}
	return parent + "/hooks/" + strconv.FormatInt(h.ID, 10) + "/events", nil
}

// HookEvent is one attempt GitLab made to deliver an event to a webhook (its web hook log).
type HookEvent struct {
	ID      int64  `json:"id"`
	Trigger string `json:"trigger"`
	// RequestHeaders are the headers sent: Idempotency-Key names the event, the same on
	// every retry and resend of it.
	RequestHeaders map[string]string `json:"request_headers"`
	// RequestData is the body sent; only the project it names is read.
	RequestData struct {
		Project struct {
			Path string `json:"path_with_namespace"`
		} `json:"project"`
	} `json:"request_data"`
	// ResponseStatus is the endpoint's HTTP status, or GitLab's word when none came
	// ("internal error": a timeout, a connection refused).
	ResponseStatus json.RawMessage `json:"response_status"`
	CreatedAt      time.Time       `json:"created_at"`
}

// StatusCode is the endpoint's HTTP status (0: no answer came).
func (e HookEvent) StatusCode() int {
	var s string
	if json.Unmarshal(e.ResponseStatus, &s) != nil {
		var n int
		if json.Unmarshal(e.ResponseStatus, &n) == nil {
			return n
		}
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

// Delivery is what ties the attempts of one event together: its Idempotency-Key (sent since
// GitLab 17.4, the version that resends), else, for an attempt logged without one, the
// attempt's own id. X-Gitlab-Event-UUID cannot tie them: it names the request that triggered
// the event, shared by every event that request triggered, and a resend gets its own.
func (e HookEvent) Delivery() string {
	for k, v := range e.RequestHeaders {
		if strings.EqualFold(k, "Idempotency-Key") && v != "" {
			return v
		}
	}
	return "event-" + strconv.FormatInt(e.ID, 10)
}

// hookPermission names what a refusal of a hook's events lacks.
const hookPermission = "a token (api scope) of a Maintainer of the project, or an Owner of the group"

// HookEvents lists the hook's events (GET .../hooks/:hook_id/events, 20 a page, GitLab's
// most) newest first, and hands each page to visit, which says whether to read on; at most
// maxPages pages.
func (c *Client) HookEvents(ctx context.Context, h Hook, maxPages int, visit func([]HookEvent) (more bool, err error)) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	page := 0
	err = c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: p + "?per_page=" + strconv.Itoa(hookEventsPage)}, maxPages, func(a *providerapi.Answer) (bool, error) {
		page++
		var es []HookEvent
		if err := a.Decode(fmt.Sprintf("page %d of the events of %v", page, h), &es); err != nil {
			return false, err
		}
		return visit(es)
	})
	return refused(err, "list the events of "+h.String())
}

// ErrResentAndFailed is what ResendHookEvent answers when GitLab sent the event again and the
// hook's endpoint did not answer (GitLab's 422 with the connection's error), or GitLab did not
// send it for now (the hook disabled after failures): a later resend may succeed.
var ErrResentAndFailed = errors.New("GitLab did not deliver the event again")

// ResendHookEvent asks GitLab to send the event of attempt id to the hook again (POST
// .../events/:hook_event_id/resend). GitLab sends it at once: 201 when the endpoint answered
// (whatever its status; the next listing shows it). A 422 is ErrResentAndFailed (a Transient
// error that applied: Unknown), except GitLab's refusal for this event, the hook's URL having
// changed since, which is Permanent. A 429 (5 resends a minute for each project or group
// and user) waits at least ResendLimitWait.
func (c *Client) ResendHookEvent(ctx context.Context, h Hook, id int64) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	rc := *c
	rc.Classify = func(resp *http.Response, body []byte, now time.Time) *providerapi.Error {
		e := classify(resp, body, now)
		if resp.StatusCode == http.StatusTooManyRequests {
			e.RetryAfter = max(e.RetryAfter, ResendLimitWait)
		}
		return e
	}
	what := fmt.Sprintf("resend event %d of %v", id, h)
	_, err = rc.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: p + "/" + strconv.FormatInt(id, 10) + "/resend"})
	if providerapi.StatusOf(err) != http.StatusUnprocessableEntity {
		return refused(err, what)
	}
	msg := providerapi.StatusMessage(err)
	switch lower := strings.ToLower(msg); {
	case strings.Contains(lower, "url has changed"):
		return providerapi.Reclass(err, providerapi.Permanent, what)
	case strings.Contains(lower, "not authorized"):
		return providerapi.Reclass(err, providerapi.Operator, what+": needs "+hookPermission)
	}
	return &providerapi.Error{Class: providerapi.Transient, Status: http.StatusUnprocessableEntity, Unknown: true, Message: msg,
		Err: fmt.Errorf("%s: %w: %s", what, ErrResentAndFailed, msg)}
}

func refused(err error, what string) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return providerapi.Reclass(err, providerapi.Operator, what+": needs "+hookPermission)
	}
	return err
}
