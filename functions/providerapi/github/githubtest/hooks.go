package githubtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Webhooks and their deliveries, as GitHub keeps them:
//
//	apps/list-webhook-deliveries           GET   /app/hook/deliveries                              App JWT, cursor-paged
//	apps/redeliver-webhook-delivery        POST  /app/hook/deliveries/{id}/attempts                App JWT
//	orgs/list-webhook-deliveries           GET   /orgs/{org}/hooks/{hook_id}/deliveries            token, cursor-paged
//	orgs/redeliver-webhook-delivery        POST  /orgs/{org}/hooks/{hook_id}/deliveries/{id}/attempts
//	repos/list-webhook-deliveries          GET   /repos/{owner}/{repo}/hooks/{hook_id}/deliveries  token, cursor-paged
//	repos/redeliver-webhook-delivery       POST  /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{id}/attempts
//
// Deliver makes an attempt as GitHub's hookshot does: a POST of the body to the hook's URL,
// signed (X-Hub-Signature-256) with its secret, naming the event, the delivery's GUID and the
// hook, given up after DeliveryTimeout; every attempt is recorded with the status the endpoint
// answered (0 when none came: "timed out", "failed to connect"). Listings are newest first, of
// the attempts made within RedeliveryWindow, paged by a cursor in the Link header. A
// redelivery request makes a new attempt of the same GUID (redelivery true) before it is
// answered 202, and is refused 422 for a delivery older than RedeliveryWindow.

// RedeliveryWindow is how long GitHub lists a delivery and accepts a request to redeliver it.
const RedeliveryWindow = 72 * time.Hour

// Hook names a webhook: the App's (App), an organization's (Org, ID) or a repository's (Repo,
// ID).
type Hook struct {
	App  bool
	Org  string
	Repo string
	ID   int64
}

// HookDelivery is one attempt of a delivery.
type HookDelivery struct {
	ID           int64
	GUID         string
	DeliveredAt  time.Time
	Redelivery   bool
	Status       string
	StatusCode   int
	Event        string
	Action       string
	Installation int64
	RepositoryID int64
	Body         []byte
}

type hook struct {
	url, secret string
	deliveries  []HookDelivery
	// asked counts the redelivery requests answered 202, per GUID.
	asked map[string]int
}

// AddHook makes a webhook that delivers to target, signing with secret.
func (g *GitHub) AddHook(h Hook, target, secret string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hooks == nil {
		g.hooks = map[Hook]*hook{}
	}
	g.hooks[h] = &hook{url: target, secret: secret, asked: map[string]int{}}
}

// SetDeliveryTimeout sets DeliveryTimeout while the fake serves.
func (g *GitHub) SetDeliveryTimeout(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.DeliveryTimeout = d
}

// SetHookURL points the hook at target (an ingress coming back at another address).
func (g *GitHub) SetHookURL(h Hook, target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hooks[h].url = target
}

// Event is what Deliver sends: the event's name, its action, the installation and repository
// id it names, and the body.
type Event struct {
	Name         string
	Action       string
	Installation int64
	RepositoryID int64
	Body         []byte
}

// Deliver makes the first attempt of a new delivery of e to h and returns it.
func (g *GitHub) Deliver(h Hook, e Event) HookDelivery {
	var b [16]byte
	rand.Read(b[:])
	guid := hex.EncodeToString(b[:])
	return g.attempt(h, HookDelivery{GUID: guid, Event: e.Name, Action: e.Action, Installation: e.Installation,
		RepositoryID: e.RepositoryID, Body: e.Body})
}

// attempt sends d's body to the hook and records the attempt.
func (g *GitHub) attempt(h Hook, d HookDelivery) HookDelivery {
	g.mu.Lock()
	hk := g.hooks[h]
	target, secret := hk.url, hk.secret
	g.deliveryID++
	d.ID = g.deliveryID
	timeout := g.DeliveryTimeout
	g.mu.Unlock()
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d.DeliveredAt = g.now().UTC()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(d.Body)
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(d.Body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "GitHub-Hookshot/amiss-test")
		req.Header.Set("X-GitHub-Event", d.Event)
		req.Header.Set("X-GitHub-Delivery", d.GUID)
		req.Header.Set("X-GitHub-Hook-ID", strconv.FormatInt(h.ID, 10))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		var resp *http.Response
		resp, err = (&http.Client{Timeout: timeout}).Do(req)
		if err == nil {
			resp.Body.Close()
			d.StatusCode, d.Status = resp.StatusCode, http.StatusText(resp.StatusCode)
			if resp.StatusCode/100 == 2 {
				d.Status = "OK"
			}
		}
	}
	var ue *url.Error
	switch {
	case err == nil:
	case errors.As(err, &ue) && ue.Timeout():
		d.Status = "timed out"
	default:
		d.Status = "failed to connect"
	}
	g.mu.Lock()
	hk.deliveries = append(hk.deliveries, d)
	g.mu.Unlock()
	return d
}

// Attempts lists the hook's attempts in the order they were made.
func (g *GitHub) Attempts(h Hook) []HookDelivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.hooks[h].deliveries)
}

// RedeliveriesAsked counts the redelivery requests GitHub accepted for each GUID of the hook.
func (g *GitHub) RedeliveriesAsked(h Hook) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.hooks[h].asked {
		out[k] = v
	}
	return out
}

// hookOf reads the hook a deliveries request names (parts: the path's segments).
func hookOf(op string, parts []string) (Hook, []string) {
	switch {
	case strings.HasPrefix(op, "apps/"):
		return Hook{App: true}, parts[2:]
	case strings.HasPrefix(op, "orgs/"):
		id, _ := strconv.ParseInt(parts[3], 10, 64)
		return Hook{Org: parts[1], ID: id}, parts[4:]
	}
	id, _ := strconv.ParseInt(parts[4], 10, 64)
	return Hook{Repo: parts[1] + "/" + parts[2], ID: id}, parts[5:]
}

// serveHooks serves the deliveries operations; the caller authenticated the request.
func (g *GitHub) serveHooks(w http.ResponseWriter, r *http.Request, op string, parts []string) {
	h, rest := hookOf(op, parts) // rest: deliveries[/{id}/attempts]
	g.mu.Lock()
	hk := g.hooks[h]
	var answer int
	if g.HookAnswer != nil {
		g.hookRequests++
		answer = g.HookAnswer(op, g.hookRequests)
	}
	g.mu.Unlock()
	switch {
	case hk == nil:
		g.refuse(w, http.StatusNotFound, "Not Found")
		return
	case answer == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "60")
		g.refuse(w, answer, "You have exceeded a secondary rate limit")
		return
	case answer == http.StatusForbidden && g.HookRateLimitReset > 0:
		// The primary rate limit, as GitHub answers it: 403, no requests left, and when the
		// window resets.
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Used", "5000")
		w.Header().Set("X-RateLimit-Resource", "core")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(g.now().Add(g.HookRateLimitReset).Unix(), 10))
		g.refuse(w, answer, "API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.")
		return
	case answer != 0:
		g.refuse(w, answer, http.StatusText(answer))
		return
	}
	if strings.HasSuffix(op, "/list-webhook-deliveries") {
		g.listDeliveries(w, r, hk)
		return
	}
	id, _ := strconv.ParseInt(rest[1], 10, 64)
	g.mu.Lock()
	i := slices.IndexFunc(hk.deliveries, func(d HookDelivery) bool { return d.ID == id })
	var d HookDelivery
	if i >= 0 {
		d = hk.deliveries[i]
	}
	g.mu.Unlock()
	switch {
	case i < 0:
		g.refuse(w, http.StatusNotFound, "Not Found")
		return
	case g.now().Sub(d.DeliveredAt) > RedeliveryWindow:
		g.refuse(w, http.StatusUnprocessableEntity, "Cannot redeliver a delivery older than 3 days")
		return
	}
	g.mu.Lock()
	hk.asked[d.GUID]++
	g.mu.Unlock()
	d.Redelivery = true
	g.attempt(h, d)
	g.answer(w, http.StatusAccepted, map[string]any{})
}

// listDeliveries answers a page of the hook's recent attempts, newest first, after the cursor.
func (g *GitHub) listDeliveries(w http.ResponseWriter, r *http.Request, hk *hook) {
	q := r.URL.Query()
	_, perPage, ok := g.pageQuery(w, url.Values{"per_page": q["per_page"]})
	if !ok {
		return
	}
	before := int64(-1)
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(c, "v1_"), 10, 64)
		if err != nil || !strings.HasPrefix(c, "v1_") {
			g.refuse(w, http.StatusBadRequest, fmt.Sprintf("cursor %q is not a cursor this API gave", c))
			return
		}
		before = n
	}
	now := g.now()
	g.mu.Lock()
	var page []map[string]any
	more := false
	var last int64
	for i := len(hk.deliveries) - 1; i >= 0; i-- {
		d := hk.deliveries[i]
		if (before >= 0 && d.ID >= before) || now.Sub(d.DeliveredAt) > RedeliveryWindow {
			continue
		}
		if len(page) == perPage {
			more = true
			break
		}
		var action any
		if d.Action != "" {
			action = d.Action
		}
		page = append(page, map[string]any{"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.Format(time.RFC3339),
			"redelivery": d.Redelivery, "duration": 0.01, "status": d.Status, "status_code": d.StatusCode, "event": d.Event,
			"action": action, "installation_id": nullable(d.Installation), "repository_id": nullable(d.RepositoryID), "throttled_at": nil})
		last = d.ID
	}
	g.mu.Unlock()
	if more {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", "v1_"+strconv.FormatInt(last, 10))
		next.RawQuery = nq.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<http://%s%s>; rel="next"`, r.Host, next.RequestURI()))
	}
	if page == nil {
		page = []map[string]any{}
	}
	g.answer(w, http.StatusOK, page)
}

func nullable(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
