package gitlabtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/webhook"
)

// Hooks fakes GitLab's project and group webhooks (GitLab 17.4 and later): they deliver to an
// endpoint, GitLab logs every attempt, lists a hook's log and sends a logged event again on
// request. As GitLab's REST API documentation gives the two operations for each kind of hook
// (doc/api/project_webhooks.md, doc/api/group_webhooks.md in gitlab-org/gitlab):
//
//	GET  /api/v4/projects/:id/hooks/:hook_id/events                        status, page, per_page
//	POST /api/v4/projects/:id/hooks/:hook_id/events/:hook_event_id/resend
//	GET  /api/v4/groups/:id/hooks/:hook_id/events                          status, page, per_page
//	POST /api/v4/groups/:id/hooks/:hook_id/events/:hook_event_id/resend
//
// and as GitLab's source carries them out:
//
//   - An attempt (WebHookService#execute, app/services/web_hook_service.rb) is a POST of the
//     event's body to the hook's URL with Content-Type, User-Agent, Idempotency-Key (the same on
//     every attempt of one event), X-Gitlab-Event ("Push Hook"), X-Gitlab-Webhook-UUID (new on
//     each attempt), X-Gitlab-Instance, X-Gitlab-Event-UUID (the triggering request's), and
//     X-Gitlab-Token when the hook has a secret token. A hook with a signing token also sends
//     webhook-id (the Idempotency-Key), webhook-timestamp and webhook-signature, the Standard
//     Webhooks headers (merge request 230944). The attempt gives up after DeliveryTimeout
//     (GitLab's webhook_timeout, 10 s by default) and is logged with the endpoint's status, or
//     "internal error" when none came.
//   - The listing (lib/api/hooks/events.rb, WebHooks::WebHookLogsFinder, WebHookLog.recent) holds
//     the attempts made since the start of the day seven days ago, newest first, each as
//     API::Entities::WebHookLog (id, url, trigger, request_headers with the secret token
//     redacted, request_data, response_headers, response_body, execution_duration,
//     response_status as a string, created_at); per_page is
//     1 to 20 (default 20), page from 1, paged with GitLab's offset headers (X-Page, X-Per-Page,
//     X-Next-Page, empty on the last page, X-Prev-Page, X-Total, X-Total-Pages, Link); status
//     filters by comma-separated HTTP codes or the categories successful (200-299),
//     client_failure (400-499) and server_failure (500-599 and "internal error"). A value
//     outside these is answered 400, as Grape answers it.
//   - A resend (lib/api/hooks/resend_hook.rb, WebHooks::Events::ResendService) is limited to 5
//     a minute for each project or group and user (web_hook_event_resend, answered 429 with no
//     Retry-After); finds the logged attempt among the hook's (GitLab keeps them 14 days: 404
//     after); refuses it 422 when the hook's URL changed since; otherwise sends the event again,
//     at once, with the same Idempotency-Key, and answers 201 {"response_status": N} when the
//     endpoint answered N, or 422 with the error when it did not answer.
//
// Anything else is a violation, recorded and answered as GitLab would. A request must carry
// PRIVATE-TOKEN with a token Authorize accepts (else 401). Requests outside the hooks' paths
// go to Next (the commit statuses fake).
type Hooks struct {
	// Authorize says whether a token is valid (nil: any non-empty one).
	Authorize func(token string) bool
	// Now is GitLab's clock (default time.Now).
	Now func() time.Time
	// DeliveryTimeout is how long an attempt waits for the endpoint (default 10 s).
	DeliveryTimeout time.Duration
	// ResendLimit is how many resends GitLab takes a minute for each project or group and token
	// (0: 5, GitLab's; negative: no limit, the feature flag turned off).
	ResendLimit int
	// Answer, when it returns a status code, answers the n-th authorized request (from 1) to a
	// hook's events with it instead.
	Answer func(n int) int
	// Next serves the requests outside the hooks' paths (nil: 404).
	Next http.Handler

	mu         sync.Mutex
	hooks      map[Hook]*hookState
	logs       []HookEvent
	lastID     int64
	resends    map[Hook]map[string]int
	limited    map[string]int
	requests   int
	violations []string
}

// Hook names a webhook: a project's (Parent is its path) or a group's (Group, Parent the
// group's path), by its id.
type Hook struct {
	Group  bool
	Parent string
	ID     int64
}

func (h Hook) kind() string {
	if h.Group {
		return "groups"
	}
	return "projects"
}

// HookConfig is a webhook's endpoint and secrets.
type HookConfig struct {
	URL string
	// Token is the secret token GitLab sends in X-Gitlab-Token ("": none).
	Token string
	// SigningToken, "whsec_" and a base64 key, signs each attempt (Standard Webhooks).
	SigningToken string
}

type hookState struct {
	HookConfig
}

// HookEvent is one logged attempt.
type HookEvent struct {
	ID   int64
	Hook Hook
	// URL is the hook's URL when the attempt was made.
	URL     string
	Trigger string
	// IdempotencyKey ties the attempts of one event together.
	IdempotencyKey string
	// Headers are the request's headers as GitLab logs them (the secret token redacted).
	Headers map[string]string
	Body    []byte
	// Status is the endpoint's HTTP status as GitLab logs it ("200"), or "internal error".
	Status string
	At     time.Time
	// Resent: made by a resend request.
	Resent bool
}

// Succeeded reports whether GitLab logged the attempt as a success (2xx).
func (e HookEvent) Succeeded() bool { return strings.HasPrefix(e.Status, "2") }

// Event is what Trigger sends: the hook's trigger (push_hooks, merge_request_hooks) and the
// body (a JSON object).
type Event struct {
	Trigger string
	Body    []byte
}

// AddHook makes a webhook.
func (g *Hooks) AddHook(h Hook, c HookConfig) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hooks == nil {
		g.hooks = map[Hook]*hookState{}
	}
	g.hooks[h] = &hookState{HookConfig: c}
}

// SetDeliveryTimeout sets DeliveryTimeout while the fake serves.
func (g *Hooks) SetDeliveryTimeout(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.DeliveryTimeout = d
}

// SetHookURL changes the hook's URL (GitLab then refuses to resend what was logged before).
func (g *Hooks) SetHookURL(h Hook, target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hooks[h].URL = target
}

func (g *Hooks) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Trigger makes the first attempt of a new event to h and returns it as logged.
func (g *Hooks) Trigger(h Hook, e Event) HookEvent {
	ev, _ := g.execute(h, e.Trigger, e.Body, uuid(), false)
	return ev
}

// Events lists the hook's logged attempts in the order they were made.
func (g *Hooks) Events(h Hook) []HookEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []HookEvent
	for _, e := range g.logs {
		if e.Hook == h {
			out = append(out, e)
		}
	}
	return out
}

// Resends counts the resend requests GitLab carried out (the event sent again), per
// Idempotency-Key, for the hook.
func (g *Hooks) Resends(h Hook) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.resends[h] {
		out[k] = v
	}
	return out
}

// Requests counts the authorized requests to the hooks' events (listings and resends).
func (g *Hooks) Requests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests
}

// Violations lists the requests that broke GitLab's API.
func (g *Hooks) Violations() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.violations)
}

// execute sends body to the hook and logs the attempt; it returns the log and, when the
// endpoint did not answer, the error GitLab reports.
func (g *Hooks) execute(h Hook, trigger string, body []byte, key string, resent bool) (HookEvent, string) {
	g.mu.Lock()
	st := g.hooks[h]
	cfg := st.HookConfig
	timeout := g.DeliveryTimeout
	g.mu.Unlock()
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	at := g.now().UTC().Truncate(time.Millisecond)
	headers := map[string]string{
		"Content-Type":          "application/json",
		"User-Agent":            "GitLab/17.4.0",
		"Idempotency-Key":       key,
		"X-Gitlab-Event":        hookToEvent(trigger),
		"X-Gitlab-Webhook-UUID": uuid(),
		"X-Gitlab-Instance":     "https://gitlab.example",
		"X-Gitlab-Event-UUID":   uuid(),
	}
	if cfg.Token != "" {
		headers["X-Gitlab-Token"] = cfg.Token
	}
	if cfg.SigningToken != "" {
		sig, err := webhook.Sign(cfg.SigningToken, key, at, body)
		if err != nil {
			panic(fmt.Sprintf("gitlabtest: the hook's signing token: %v", err))
		}
		headers["webhook-id"], headers["webhook-timestamp"], headers["webhook-signature"] = key, strconv.FormatInt(at.Unix(), 10), sig
	}
	status, errText := "", ""
	req, err := http.NewRequest(http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err == nil {
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		// A fresh connection for each attempt: Go's transport would send a request carrying an
		// Idempotency-Key again by itself after a reused connection failed.
		client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
		var resp *http.Response
		if resp, err = client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = strconv.Itoa(resp.StatusCode)
		}
	}
	if err != nil {
		status = "internal error"
		var ue *url.Error
		if errors.As(err, &ue) && ue.Timeout() {
			errText = "Net::ReadTimeout with #<TCPSocket:(closed)>"
		} else {
			errText = "Connection refused - connect(2) for " + cfg.URL
		}
	}
	if _, ok := headers["X-Gitlab-Token"]; ok {
		headers["X-Gitlab-Token"] = "[REDACTED]"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastID++
	ev := HookEvent{ID: g.lastID, Hook: h, URL: cfg.URL, Trigger: trigger, IdempotencyKey: key, Headers: headers,
		Body: body, Status: status, At: at, Resent: resent}
	g.logs = append(g.logs, ev)
	return ev, errText
}

// hookToEvent is X-Gitlab-Event of a trigger: push_hooks is "Push Hook".
func hookToEvent(trigger string) string {
	words := strings.Split(strings.TrimSuffix(trigger, "_hooks"), "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ") + " Hook"
}

func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

func (g *Hooks) violate(w http.ResponseWriter, code int, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	g.mu.Lock()
	g.violations = append(g.violations, msg)
	g.mu.Unlock()
	g.answer(w, code, map[string]string{"message": msg})
}

func (g *Hooks) answer(w http.ResponseWriter, code int, v any) {
	providerapitest.JSON(w, code, v, g.now())
}

// ServeHTTP implements http.Handler.
func (g *Hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	// api v4 {projects|groups} :id hooks :hook_id events [:hook_event_id resend]
	if len(parts) < 7 || parts[0] != "api" || parts[1] != "v4" || (parts[2] != "projects" && parts[2] != "groups") ||
		parts[4] != "hooks" || parts[6] != "events" {
		if g.Next != nil {
			g.Next.ServeHTTP(w, r)
			return
		}
		g.violate(w, http.StatusNotFound, "404 Not Found: %s %s", r.Method, r.URL.EscapedPath())
		return
	}
	io.Copy(io.Discard, r.Body)
	token := r.Header.Get("PRIVATE-TOKEN")
	if token == "" || (g.Authorize != nil && !g.Authorize(token)) {
		g.answer(w, http.StatusUnauthorized, map[string]string{"message": "401 Unauthorized"})
		return
	}
	parent, err := url.PathUnescape(parts[3])
	id, ierr := strconv.ParseInt(parts[5], 10, 64)
	h := Hook{Group: parts[2] == "groups", Parent: parent, ID: id}
	g.mu.Lock()
	_, known := g.hooks[h]
	g.requests++
	n := g.requests
	g.mu.Unlock()
	if err != nil || ierr != nil || !known {
		g.answer(w, http.StatusNotFound, map[string]string{"message": "404 Not Found"})
		return
	}
	if g.Answer != nil {
		if code := g.Answer(n); code != 0 {
			g.answer(w, code, map[string]string{"message": fmt.Sprintf("%d %s", code, http.StatusText(code))})
			return
		}
	}
	switch {
	case r.Method == http.MethodGet && len(parts) == 7:
		g.list(w, r, h)
	case r.Method == http.MethodPost && len(parts) == 9 && parts[8] == "resend":
		g.resend(w, h, token, parts[7])
	default:
		g.violate(w, http.StatusNotFound, "404 Not Found: %s %s", r.Method, r.URL.EscapedPath())
	}
}

// statusValue reports whether v is a value GitLab's status filter takes.
func statusValue(v string) bool {
	switch v {
	case "successful", "client_failure", "server_failure":
		return true
	}
	n, err := strconv.Atoi(v)
	return err == nil && http.StatusText(n) != ""
}

func matchesStatus(e HookEvent, filters []string) bool {
	if len(filters) == 0 {
		return true
	}
	code, _ := strconv.Atoi(e.Status)
	for _, f := range filters {
		switch f {
		case "successful":
			if code >= 200 && code <= 299 {
				return true
			}
		case "client_failure":
			if code >= 400 && code <= 499 {
				return true
			}
		case "server_failure":
			if code >= 500 && code <= 599 || e.Status == "internal error" {
				return true
			}
		default:
			if f == e.Status {
				return true
			}
		}
	}
	return false
}

// list answers a page of the hook's log: the attempts since the start of the day seven days
// ago, newest first.
func (g *Hooks) list(w http.ResponseWriter, r *http.Request, h Hook) {
	q := r.URL.Query()
	page, perPage := 1, 20
	var filters []string
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "page":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				g.answer(w, http.StatusBadRequest, map[string]string{"error": "page is invalid"})
				return
			}
			page = n
		case "per_page":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 20 {
				g.answer(w, http.StatusBadRequest, map[string]string{"error": "per_page does not have a valid value"})
				g.mu.Lock()
				g.violations = append(g.violations, fmt.Sprintf("per_page %q: GitLab takes 1 to 20 for a hook's events", v))
				g.mu.Unlock()
				return
			}
			perPage = n
		case "status":
			for _, s := range strings.Split(v, ",") {
				if !statusValue(strings.TrimSpace(s)) {
					g.answer(w, http.StatusBadRequest, map[string]string{"error": "status does not have a valid value"})
					return
				}
				filters = append(filters, strings.TrimSpace(s))
			}
		default:
			// Grape ignores a parameter it does not declare; a client sending one expects an
			// effect it will not get.
			g.mu.Lock()
			g.violations = append(g.violations, fmt.Sprintf("%q is not a parameter of a hook's events", k))
			g.mu.Unlock()
		}
	}
	now := g.now().UTC()
	y, m, d := now.AddDate(0, 0, -7).Date()
	from := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	g.mu.Lock()
	var match []HookEvent
	for i := len(g.logs) - 1; i >= 0; i-- {
		e := g.logs[i]
		if e.Hook == h && !e.At.Before(from) && !e.At.After(now) && matchesStatus(e, filters) {
			match = append(match, e)
		}
	}
	g.mu.Unlock()
	slices.SortStableFunc(match, func(a, b HookEvent) int { return b.At.Compare(a.At) })
	out := []map[string]any{}
	for _, e := range providerapitest.PageOf(match, page, perPage) {
		out = append(out, eventJSON(e))
	}
	pages := max((len(match)+perPage-1)/perPage, 1)
	next, prev := "", ""
	if page < pages {
		next = strconv.Itoa(page + 1)
	}
	if page > 1 {
		prev = strconv.Itoa(page - 1)
	}
	hd := w.Header()
	hd.Set("X-Page", strconv.Itoa(page))
	hd.Set("X-Per-Page", strconv.Itoa(perPage))
	hd.Set("X-Next-Page", next)
	hd.Set("X-Prev-Page", prev)
	hd.Set("X-Total", strconv.Itoa(len(match)))
	hd.Set("X-Total-Pages", strconv.Itoa(pages))
	providerapitest.Link(w, r, "page", page, perPage, len(match))
	g.answer(w, http.StatusOK, out)
}

func eventJSON(e HookEvent) map[string]any {
	var data any
	if json.Unmarshal(e.Body, &data) != nil {
		data = map[string]any{}
	}
	return map[string]any{"id": e.ID, "url": e.URL, "trigger": e.Trigger, "request_headers": e.Headers, "request_data": data,
		"response_headers": map[string]string{}, "response_body": "", "execution_duration": 0.01, "response_status": e.Status,
		"created_at": e.At.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
}

// resend sends a logged event again, as GitLab does, at once.
func (g *Hooks) resend(w http.ResponseWriter, h Hook, token, idText string) {
	limit := g.ResendLimit
	if limit == 0 {
		limit = 5
	}
	now := g.now()
	g.mu.Lock()
	window := fmt.Sprintf("%s/%s/%s/%d", h.kind(), h.Parent, token, now.Unix()/60)
	if g.limited == nil {
		g.limited = map[string]int{}
	}
	g.limited[window]++
	over := limit > 0 && g.limited[window] > limit
	g.mu.Unlock()
	if over {
		g.answer(w, http.StatusTooManyRequests, map[string]any{"message": map[string]string{
			"error": "This endpoint has been requested too many times. Try again later."}})
		return
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	g.mu.Lock()
	i := slices.IndexFunc(g.logs, func(e HookEvent) bool { return e.Hook == h && e.ID == id })
	var logged HookEvent
	if i >= 0 {
		logged = g.logs[i]
	}
	current := g.hooks[h].URL
	g.mu.Unlock()
	switch {
	case err != nil || i < 0 || now.Sub(logged.At) > 14*24*time.Hour:
		g.answer(w, http.StatusNotFound, map[string]string{"message": "404 Not found"})
		return
	case logged.URL != current:
		g.answer(w, http.StatusUnprocessableEntity, map[string]string{"message": "The hook URL has changed, and this log entry cannot be retried"})
		return
	}
	ev, errText := g.execute(h, logged.Trigger, logged.Body, logged.IdempotencyKey, true)
	g.mu.Lock()
	if g.resends == nil {
		g.resends = map[Hook]map[string]int{}
	}
	if g.resends[h] == nil {
		g.resends[h] = map[string]int{}
	}
	g.resends[h][logged.IdempotencyKey]++
	g.mu.Unlock()
	if errText != "" {
		g.answer(w, http.StatusUnprocessableEntity, map[string]string{"message": errText})
		return
	}
	code, _ := strconv.Atoi(ev.Status)
	g.answer(w, http.StatusCreated, map[string]int{"response_status": code})
}
