// Package ingress is the webhook ingress: an API Gateway HTTP API (payload format 2.0) handler,
// also served over plain HTTP by amiss serve, that authenticates a webhook, derives its replay
// identity and lifetime from what the signature proves, admits it into the ledger and hands
// its key to the queue.
//
// A webhook is one delivery, but for a Bitbucket push that updates several branches: each branch
// is admitted and queued as a delivery of its own (ChangeIdentity), and the answer lists each
// one's outcome.
//
// Answers: 202 admitted and queued; 200 duplicate, or pending and queued again; 204 an event
// that is not evaluated (a ping, a closed pull request); 400 malformed; 401 a bad or missing
// signature, or a signed time outside the accepted window; 403 a repository the route may not
// publish for, or a webhook from an API the route does not publish to or read from (a Bitbucket
// Data Center server's on a route of Bitbucket Cloud, or back); 404 an unknown route; 409 the
// same identity with another body; 413 a body over the limit, or a push of more than
// change.MaxBranches branches; 503 with Retry-After when the ledger is full or the ledger, the secrets or the
// queue are unavailable. Never a 5xx for a client's mistake, and never a secret or a body in a
// log line.
package ingress

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
)

// Handler is the ingress.
type Handler struct {
	Config  *config.Config
	Ledger  ledger.Ledger
	Queue   queue.Queue
	Secrets secrets.Source
	Log     *slog.Logger
	// Metrics counts outcomes (admitted, pending, duplicate, conflict, full, stale, ...); nil:
	// none.
	Metrics interface{ Count(name string, n int) }
	// RetryAfter is the Retry-After of a 503 (default 30 seconds).
	RetryAfter time.Duration
}

// response is the JSON body of every answer.
type response struct {
	Outcome string `json:"outcome"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message,omitempty"`
	// Branches is a push of several branches' answer for each (Outcome admitted, pending or
	// duplicate); Key is then empty.
	Branches []branchAnswer `json:"branches,omitempty"`
}

// branchAnswer is the answer for one branch of a push.
type branchAnswer struct {
	Ref     string `json:"ref"`
	Outcome string `json:"outcome"`
	Key     string `json:"key"`
}

// Handle serves one API Gateway HTTP API request.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	routeName := req.PathParameters["route"]
	if routeName == "" {
		routeName, _ = strings.CutPrefix(req.RawPath, "/hooks/")
	}
	log = log.With("route", loggable(routeName))
	reply := func(status int, r response, attrs ...any) (events.APIGatewayV2HTTPResponse, error) {
		log.Info("webhook", append([]any{"status", status, "outcome", r.Outcome}, attrs...)...)
		h.count(r.Outcome)
		return h.reply(status, r), nil
	}
	if m := req.RequestContext.HTTP.Method; m != "" && m != http.MethodPost {
		return reply(http.StatusBadRequest, response{Outcome: "malformed", Message: "webhooks are POSTed"})
	}
	route := h.Config.Route(routeName)
	if route == nil {
		return reply(http.StatusNotFound, response{Outcome: "unknown-route", Message: "no such route"})
	}
	log = log.With("scheme", route.Scheme)
	limit := h.Config.Controller.MaxBodyBytes
	if len(req.Body) > base64.StdEncoding.EncodedLen(limit)+4 {
		return reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "body over " + strconv.Itoa(limit) + " bytes"})
	}
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return reply(http.StatusBadRequest, response{Outcome: "malformed", Message: "body is not valid base64"})
		}
	}
	if len(body) > limit {
		return reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "body over " + strconv.Itoa(limit) + " bytes"})
	}
	header := http.Header{}
	for k, v := range req.Headers {
		header.Add(k, v)
	}

	verifier, err := webhook.New(route.Scheme)
	if err != nil {
		log.Error("route scheme", "err", err)
		return h.unavailable(log, "configuration")
	}
	secrets := make([]webhook.Secret, 0, len(route.Secrets))
	for _, s := range route.Secrets {
		v, err := h.Secrets.Get(ctx, s.From)
		if err != nil {
			log.Error("secret unavailable", "secret", s.ID, "err", err) // the error never holds the value
			continue
		}
		secrets = append(secrets, webhook.Secret{ID: s.ID, Value: v})
	}
	if len(secrets) == 0 {
		return h.unavailable(log, "secrets")
	}
	proof, err := verifier.Verify(webhook.Request{Header: header, Body: body}, secrets)
	switch {
	case errors.Is(err, webhook.ErrMalformed):
		return reply(http.StatusBadRequest, response{Outcome: "malformed", Message: malformedMessage(header, body, err)})
	case err != nil:
		return reply(http.StatusUnauthorized, response{Outcome: "unauthenticated", Message: "signature not accepted"}, "reason", err.Error())
	}
	log = log.With("identity", identityDigest(proof.Identity), "secret", proof.SecretID)
	if proof.DeliveryID != "" {
		log = log.With("delivery_id", proof.DeliveryID, "delivery_id_signed", false)
	}

	cs, err := provider.Extract(route.Provider, header, body)
	switch {
	case errors.Is(err, change.ErrIgnored):
		return reply(http.StatusNoContent, response{Outcome: "ignored"}, "reason", err.Error())
	case err != nil:
		return reply(http.StatusBadRequest, response{Outcome: "malformed", Message: malformedMessage(header, body, err)})
	}
	c := cs[0] // the changes of one webhook share event, repository and API
	if !route.Accepts(c.Event) {
		return reply(http.StatusNoContent, response{Outcome: "ignored"}, "reason", "event "+c.Event+" not accepted by the route")
	}
	log = log.With("repository", c.Repository, "event", c.Event)
	if !route.Allows(c.Repository) {
		return reply(http.StatusForbidden, response{Outcome: "forbidden", Message: "the route may not publish for this repository"})
	}
	if err := route.Takes(c.API); err != nil {
		return reply(http.StatusForbidden, response{Outcome: "forbidden", Message: err.Error()})
	}
	if err := change.CheckBranches(cs); err != nil {
		return reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: err.Error()})
	}
	ds := make([]ledger.Delivery, len(cs))
	for i, c := range cs {
		encoded, err := c.Marshal(h.Config.Controller.MaxChangeBytes)
		if err != nil {
			return reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: err.Error()})
		}
		ds[i] = ledger.Delivery{
			Binding: ledger.Binding{Route: route.Name, Scheme: proof.Scheme, Identity: ChangeIdentity(proof.Identity, i),
				BodyDigest: ledger.SumBody(body)},
			Change:     encoded,
			SignedAt:   proof.SignedAt,
			MaxAge:     route.MaxAge,
			BodyAt:     proof.BodyAt,
			MaxBodyAge: route.MaxBodyAge,
		}
	}
	if !proof.BodyAt.IsZero() {
		log = log.With("body_time", proof.BodyAt.UTC().Format(time.RFC3339), "body_time_field", proof.BodyTimeField)
	}
	branches := make([]branchAnswer, len(ds))
	var lifetime ledger.Lifetime
	for i, d := range ds {
		blog := log
		if len(ds) > 1 {
			blog = log.With("ref", cs[i].Ref)
		}
		a, err := h.Ledger.Admit(ctx, d)
		if errors.Is(err, ledger.ErrTooLarge) {
			return reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "change over the ledger's limit"})
		}
		if err != nil {
			blog.Error("admit", "err", err)
			return h.unavailable(blog, "ledger")
		}
		key := a.Key.String()
		blog = blog.With("key", key) // whole, as amiss ledger inspect takes it
		at := []any{"key", key}
		if len(ds) > 1 {
			at = append(at, "ref", cs[i].Ref)
		}
		lifetime = a.Lifetime
		switch a.Outcome {
		case ledger.Admitted, ledger.Pending:
			if err := h.Queue.Send(ctx, queue.Message{Key: a.Key, Binding: d.Binding.Digest()}); err != nil {
				// The row stays pending: cleanup reports it stranded and re-drives it.
				blog.Error("enqueue", "err", err, "admission", a.Outcome.String())
				return h.unavailable(blog, "queue")
			}
		case ledger.Duplicate:
		case ledger.BindingConflict:
			return reply(http.StatusConflict, response{Outcome: "conflict", Key: key, Message: "this delivery id was seen with another body"}, at...)
		case ledger.Stale:
			limits := h.Config.Limits()
			r := response{Outcome: "stale", Message: fmt.Sprintf(
				"signed at %s, outside the accepted window: at most %s old and at most %s ahead of the ledger's time",
				d.SignedAt.UTC().Format(time.RFC3339), limits.AcceptedAge(route.MaxAge), limits.FutureSkew)}
			if !d.BodyAt.IsZero() {
				r.Message = fmt.Sprintf("the body's %s is %s, outside the accepted window: at most %s old and at most %s ahead of the ledger's time",
					proof.BodyTimeField, d.BodyAt.UTC().Format(time.RFC3339), limits.AcceptedBodyAge(route.MaxBodyAge), limits.FutureSkew)
			}
			if i > 0 {
				// The window closed between two branches' admissions: those before were taken,
				// and are evaluated; this one and those after are not.
				r.Message = fmt.Sprintf("%s: %s and the branches after it are not evaluated; those before it were taken (listed)", r.Message, cs[i].Ref)
				r.Branches = branches[:i]
			}
			return reply(http.StatusUnauthorized, r, at...)
		case ledger.Full:
			blog.Warn("ledger full")
			return h.unavailable(blog, "full")
		default:
			blog.Error("admit answered an unknown outcome", "outcome", a.Outcome.String())
			return h.unavailable(blog, "ledger")
		}
		branches[i] = branchAnswer{Ref: cs[i].Ref, Outcome: admissionOutcome(a.Outcome), Key: key}
	}
	if lifetime != 0 {
		log = log.With("lifetime", lifetime.String())
	}
	if len(branches) == 1 {
		b := branches[0]
		switch b.Outcome {
		case "admitted":
			return reply(http.StatusAccepted, response{Outcome: "admitted", Key: b.Key}, "key", b.Key)
		case "pending":
			return reply(http.StatusOK, response{Outcome: "pending", Key: b.Key, Message: "already admitted; queued again"}, "key", b.Key)
		}
		return reply(http.StatusOK, response{Outcome: "duplicate", Key: b.Key, Message: "already done"}, "key", b.Key)
	}
	// A push of several branches: the answer is the first of admitted, pending and duplicate
	// that any branch had, and lists each branch's.
	r := response{Outcome: "duplicate", Message: fmt.Sprintf("a push of %d branches, each evaluated on its own", len(branches)), Branches: branches}
	keys := make([]string, len(branches))
	for i, b := range branches {
		keys[i] = b.Key
		if b.Outcome == "admitted" || b.Outcome == "pending" && r.Outcome == "duplicate" {
			r.Outcome = b.Outcome
		}
	}
	if r.Outcome == "admitted" {
		return reply(http.StatusAccepted, r, "keys", keys)
	}
	return reply(http.StatusOK, r, "keys", keys)
}

// ChangeIdentity is the replay identity of the i-th change (from 0) of a webhook whose
// signature proves identity: the first change's is the webhook's own, each further one (a
// Bitbucket push's next branch) the webhook's and the change's place in it. The same webhook
// sent again lists its changes in the same order, so every change gets the key it had; a
// webhook of one change (every one but a push of several Bitbucket branches) keeps the key it
// always had. The place, not the branch's name, tells changes apart: names that are not UTF-8
// may read alike once decoded. No other webhook's identity on the route can equal a further
// change's: a Bitbucket route's scheme identifies a webhook by its body's digest, hex without
// a space. A scheme whose identity the sender chooses (Standard Webhooks' webhook-id may hold
// a space) must not give several changes this way: its id "X 1" would be the key of webhook
// X's second branch.
func ChangeIdentity(identity string, i int) string {
	if i == 0 {
		return identity
	}
	return identity + " " + strconv.Itoa(i)
}

// admissionOutcome names an admission that queued a delivery or found it done, as answers
// name it.
func admissionOutcome(o ledger.AdmitOutcome) string {
	switch o {
	case ledger.Admitted:
		return "admitted"
	case ledger.Pending:
		return "pending"
	}
	return "duplicate"
}

func (h *Handler) count(outcome string) {
	if h.Metrics != nil {
		h.Metrics.Count(outcome, 1)
	}
}

func (h *Handler) unavailable(log *slog.Logger, what string) (events.APIGatewayV2HTTPResponse, error) {
	log.Info("webhook", "status", http.StatusServiceUnavailable, "outcome", "unavailable", "cause", what)
	if what == "full" {
		h.count("full")
	} else {
		h.count("unavailable")
	}
	r := h.reply(http.StatusServiceUnavailable, response{Outcome: "unavailable", Message: what + " unavailable; retry later"})
	after := h.RetryAfter
	if after <= 0 {
		after = 30 * time.Second
	}
	r.Headers["Retry-After"] = strconv.Itoa(int(after.Seconds()))
	return r, nil
}

func (h *Handler) reply(status int, r response) events.APIGatewayV2HTTPResponse {
	resp := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}}
	if status != http.StatusNoContent {
		b, _ := json.Marshal(r)
		resp.Body = string(b)
	}
	return resp
}

// maxLoggedRoute is the longest route name logged whole: longer than any valid name.
const maxLoggedRoute = 64

// loggable bounds what a log line holds of a route name taken from the request path: an
// unknown name may be as long as the path.
func loggable(route string) string {
	if len(route) <= maxLoggedRoute {
		return route
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(route[:maxLoggedRoute], ""), len(route))
}

// identityDigest is what logs show of an identity: enough to correlate, nothing more.
func identityDigest(identity string) string {
	d := ledger.SumBody([]byte(identity))
	return d.String()[:16]
}
