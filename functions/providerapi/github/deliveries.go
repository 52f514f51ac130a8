package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// RedeliveryWindow is how long GitHub keeps a webhook delivery that can be asked for again:
// "you can only redeliver deliveries that were made in the past 3 days".
const RedeliveryWindow = 72 * time.Hour

// Hook names a webhook whose deliveries GitHub lists: the App's own webhook (App), an
// organization's (Org and ID) or a repository's (Repo, owner/name, and ID).
type Hook struct {
	App  bool
	Org  string
	Repo string
	ID   int64
}

// Validate reports a hook that names none, or more than one, of the three kinds.
func (h Hook) Validate() error {
	n := 0
	if h.App {
		n++
	}
	if h.Org != "" {
		n++
	}
	if h.Repo != "" {
		n++
		if _, _, err := Repository(h.Repo); err != nil {
			return err
		}
	}
	switch {
	case n != 1:
		return errors.New("a GitHub hook is the App's, an organization's or a repository's: name exactly one")
	case !h.App && h.ID <= 0:
		return errors.New("an organization's or a repository's hook needs its id (X-GitHub-Hook-ID of its deliveries)")
	}
	return nil
}

func (h Hook) String() string {
	switch {
	case h.App:
		return "the App's webhook"
	case h.Org != "":
		return fmt.Sprintf("webhook %d of organization %s", h.ID, h.Org)
	}
	return fmt.Sprintf("webhook %d of %s", h.ID, h.Repo)
}

// path is the hook's deliveries path.
func (h Hook) path() (string, error) {
	if err := h.Validate(); err != nil {
		return "", err
	}
	switch {
	case h.App:
		return "/app/hook/deliveries", nil
	case h.Org != "":
		return "/orgs/" + url.PathEscape(h.Org) + "/hooks/" + strconv.FormatInt(h.ID, 10) + "/deliveries", nil
	}
	repo, _ := RepoPath(h.Repo)
	return repo + "/hooks/" + strconv.FormatInt(h.ID, 10) + "/deliveries", nil
}

// permission names what a refusal of the hook's deliveries lacks.
func (h Hook) permission() string {
	switch {
	case h.App:
		return "the App's JWT (the App's own webhook)"
	case h.Org != "":
		return "admin:org_hook (a classic token of an organization owner), or an App's organization_hooks read and write"
	}
	return "admin:repo_hook (a classic token of a repository admin), or an App's repository_hooks read and write"
}

// Delivery is one attempt GitHub made to deliver an event to a hook (schema
// hook-delivery-item). Attempts of one event share its GUID; a redelivery is a new attempt.
type Delivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	// Status is GitHub's word for the outcome ("OK", "failed to connect", "timed out", ...)
	// and StatusCode the endpoint's HTTP status (0: no answer).
	Status       string `json:"status"`
	StatusCode   int    `json:"status_code"`
	Event        string `json:"event"`
	Action       string `json:"action"`
	Installation int64  `json:"installation_id"`
	RepositoryID int64  `json:"repository_id"`
}

// maxDeliveryPage is GitHub's largest page of deliveries.
const maxDeliveryPage = 100

// Deliveries lists the hook's deliveries newest first, a page of 100 at a time by the cursor
// GitHub's Link header names (hooks' deliveries are paged by cursor, not page number), and
// hands each page to visit, which says whether to read on; at most maxPages pages. The App's
// webhook is listed with the App's JWT (a client made by NewAppClient); an organization's or a
// repository's with a token that administers its hooks.
func (c *Client) Deliveries(ctx context.Context, h Hook, maxPages int, visit func([]Delivery) (more bool, err error)) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	page := 0
	err = c.Pages(ctx, 0, providerapi.Request{Method: http.MethodGet, URL: p + "?per_page=" + strconv.Itoa(maxDeliveryPage), MaxBytes: maxListingBytes}, maxPages,
		func(a *providerapi.Answer) (bool, error) {
			page++
			var ds []Delivery
			if err := a.Decode(fmt.Sprintf("page %d of the deliveries of %v", page, h), &ds); err != nil {
				return false, err
			}
			return visit(ds)
		})
	return refusedFor(err, h.permission())
}

// Redeliver asks GitHub to deliver the event of delivery id to the hook again (202: a new
// attempt, with the same GUID, is on its way). A 422 is GitHub's refusal for this delivery
// (too old to redeliver, or unknown): Permanent. The request may have applied when its answer
// is lost (Unknown): GitHub may then deliver the event twice, which the ledger answers
// duplicate.
func (c *Client) Redeliver(ctx context.Context, h Hook, id int64) error {
	p, err := h.path()
	if err != nil {
		return &providerapi.Error{Class: providerapi.Operator, Err: err}
	}
	_, err = c.Do(ctx, 0, providerapi.Request{Method: http.MethodPost, URL: p + "/" + strconv.FormatInt(id, 10) + "/attempts"})
	if providerapi.StatusOf(err) == http.StatusUnprocessableEntity {
		return providerapi.Reclass(err, providerapi.Permanent, fmt.Sprintf("redeliver delivery %d of %v", id, h))
	}
	return refusedFor(err, h.permission())
}

// NewAppClient returns the App's own client: it authenticates with the App's JWT, for the
// App's endpoints (its webhook's deliveries).
func NewAppClient(a *App) *Client {
	c := newClient(a.base, a.client.HTTP)
	c.app, c.Now = a, a.now
	return c
}
