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

// HookEventRetention is how long GitLab lists a webhook's events: "from the past 7 days".
const HookEventRetention = 7 * 24 * time.Hour

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
	// every retry and resend of it (X-Gitlab-Event-UUID too, on GitLab versions before it).
	RequestHeaders map[string]string `json:"request_headers"`
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

// Delivery is what ties the attempts of one event together: its Idempotency-Key, else its
// X-Gitlab-Event-UUID, else (a GitLab that sends neither) the attempt's own id.
func (e HookEvent) Delivery() string {
	for _, name := range []string{"Idempotency-Key", "X-Gitlab-Event-UUID"} {
		for k, v := range e.RequestHeaders {
			if strings.EqualFold(k, name) && v != "" {
				return v
			}
		}
	}
	return "event-" + strconv.FormatInt(e.ID, 10)
}

// hookPermission names what a refusal of a hook's events lacks.
const hookPermission = "a token (api scope) of a Maintainer of the project, or an Owner of the group"

// HookEvents lists the hook's events (GET .../hooks/:hook_id/events, 100 a page) and hands
// each page to visit, which says whether to read on; at most maxPages pages.
func (c *Client) HookEvents(ctx context.Context, h Hook, maxPages int, visit func([]HookEvent) (more bool, err error)) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	page := 0
	err = c.Pages(ctx, providerapi.Request{Method: http.MethodGet, URL: p + "?per_page=100"}, maxPages, func(a *providerapi.Answer) (bool, error) {
		page++
		var es []HookEvent
		if err := a.Decode(fmt.Sprintf("page %d of the events of %v", page, h), &es); err != nil {
			return false, err
		}
		return visit(es)
	})
	return refused(err, "list the events of "+h.String())
}

// ResendHookEvent asks GitLab to send the event of attempt id to the hook again (POST
// .../events/:hook_event_id/resend). A 422 or a 404 for the event is GitLab's refusal for it
// (gone from its log): Permanent.
func (c *Client) ResendHookEvent(ctx context.Context, h Hook, id int64) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	_, err = c.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: p + "/" + strconv.FormatInt(id, 10) + "/resend"})
	if st := providerapi.StatusOf(err); st == http.StatusUnprocessableEntity {
		return providerapi.Reclass(err, providerapi.Permanent, fmt.Sprintf("resend event %d of %v", id, h))
	}
	return refused(err, fmt.Sprintf("resend event %d of %v", id, h))
}

func refused(err error, what string) error {
	switch providerapi.StatusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return providerapi.Reclass(err, providerapi.Operator, what+": needs "+hookPermission)
	}
	return err
}
