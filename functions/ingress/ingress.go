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

// Handle serves one API Gateway HTTP API request, in steps that each either hand the next
// what they learnt or answer at once: read the request (its route and body); authenticate it;
// extract its changes and check them against the route; encode each change as a delivery;
// admit and queue each delivery; answer. Every answer is logged once, on a line carrying all
// that was learnt before it, and counted once under its outcome. Nothing is written before
// admission, so a webhook refused before it leaves the ledger and the queue as they were.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	x := h.exchange(req)
	in, answered := x.read(req)
	if answered != nil {
		return *answered, nil
	}
	proof, answered := x.authenticate(ctx, in)
	if answered != nil {
		return *answered, nil
	}
	cs, answered := x.extract(in)
	if answered != nil {
		return *answered, nil
	}
	ds, answered := x.deliveries(in, proof, cs)
	if answered != nil {
		return *answered, nil
	}
	branches, answered := x.admit(ctx, in, proof, cs, ds)
	if answered != nil {
		return *answered, nil
	}
	return *x.answer(branches), nil
}

// exchange is one request on its way through Handle. Its log gains what each step learns
// (route, scheme, identity, repository and event, body time, lifetime), so that the line of
// the answer carries everything known when it was given.
type exchange struct {
	h         *Handler
	routeName string
	log       *slog.Logger
}

// received is a request read: its route, its headers, and its body decoded and within the
// controller's limit.
type received struct {
	route  *config.Route
	header http.Header
	body   []byte
}

// exchange starts the exchange of req: the route's name is the path parameter, or else what
// follows /hooks/ in the path, and every line logs it bounded (loggable).
func (h *Handler) exchange(req events.APIGatewayV2HTTPRequest) *exchange {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	name := req.PathParameters["route"]
	if name == "" {
		name, _ = strings.CutPrefix(req.RawPath, "/hooks/")
	}
	return &exchange{h: h, routeName: name, log: log.With("route", loggable(name))}
}

// read takes the request of a POST to a known route: any other method is 400, an unknown
// route 404. Its body is decoded from base64 when API Gateway sent it so (400 if it is not
// base64), and is at most the controller's max_body_bytes (413): a body whose encoding is
// longer than the limit's could be is refused before it is decoded.
func (x *exchange) read(req events.APIGatewayV2HTTPRequest) (received, *events.APIGatewayV2HTTPResponse) {
	if m := req.RequestContext.HTTP.Method; m != "" && m != http.MethodPost {
		return received{}, x.reply(http.StatusBadRequest, response{Outcome: "malformed", Message: "webhooks are POSTed"})
	}
	route := x.h.Config.Route(x.routeName)
	if route == nil {
		return received{}, x.reply(http.StatusNotFound, response{Outcome: "unknown-route", Message: "no such route"})
	}
	x.log = x.log.With("scheme", route.Scheme)
	limit := x.h.Config.Controller.MaxBodyBytes
	if len(req.Body) > base64.StdEncoding.EncodedLen(limit)+4 {
		return received{}, x.reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "body over " + strconv.Itoa(limit) + " bytes"})
	}
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return received{}, x.reply(http.StatusBadRequest, response{Outcome: "malformed", Message: "body is not valid base64"})
		}
	}
	if len(body) > limit {
		return received{}, x.reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "body over " + strconv.Itoa(limit) + " bytes"})
	}
	header := http.Header{}
	for k, v := range req.Headers {
		header.Add(k, v)
	}
	return received{route: route, header: header, body: body}, nil
}

// authenticate verifies the request's signature against the route's secrets, and gives what
// it proves: the webhook's replay identity and its signed or body time. A secret that cannot
// be read is logged (by its id, never its value) and left out; when none can be read the
// answer is 503, never 401, as the signature was not checked. A signature that cannot be
// parsed is 400, one that does not verify 401 (its reason logged, not answered).
func (x *exchange) authenticate(ctx context.Context, in received) (webhook.Proof, *events.APIGatewayV2HTTPResponse) {
	verifier, err := webhook.New(in.route.Scheme)
	if err != nil {
		x.log.Error("route scheme", "err", err)
		return webhook.Proof{}, x.h.unavailable(x.log, "configuration")
	}
	secrets := make([]webhook.Secret, 0, len(in.route.Secrets))
	for _, s := range in.route.Secrets {
		v, err := x.h.Secrets.Get(ctx, s.From)
		if err != nil {
			x.log.Error("secret unavailable", "secret", s.ID, "err", err) // the error never holds the value
			continue
		}
		secrets = append(secrets, webhook.Secret{ID: s.ID, Value: v})
	}
	if len(secrets) == 0 {
		return webhook.Proof{}, x.h.unavailable(x.log, "secrets")
	}
	proof, err := verifier.Verify(webhook.Request{Header: in.header, Body: in.body}, secrets)
	switch {
	case errors.Is(err, webhook.ErrMalformed):
		return webhook.Proof{}, x.reply(http.StatusBadRequest, response{Outcome: "malformed", Message: malformedMessage(in.header, in.body, err)})
	case err != nil:
		return webhook.Proof{}, x.reply(http.StatusUnauthorized, response{Outcome: "unauthenticated", Message: "signature not accepted"}, "reason", err.Error())
	}
	x.log = x.log.With("identity", identityDigest(proof.Identity), "secret", proof.SecretID)
	if proof.DeliveryID != "" {
		x.log = x.log.With("delivery_id", proof.DeliveryID, "delivery_id_signed", false)
	}
	return proof, nil
}

// extract reads the webhook's changes as its route's provider writes them and checks them
// against the route. An event that is not evaluated (a ping, a closed pull request, an event
// the route does not list) is 204; a body the provider cannot read 400; a repository the route
// may not publish for, or a webhook from an API it does not publish to or read from, 403. A
// push of more than change.MaxBranches branches is 413, but only once the route's own checks
// passed: a route that would not evaluate the push answers as it answers any push.
func (x *exchange) extract(in received) ([]change.Change, *events.APIGatewayV2HTTPResponse) {
	cs, err := provider.Extract(in.route.Provider, in.header, in.body)
	switch {
	case errors.Is(err, change.ErrIgnored):
		return nil, x.reply(http.StatusNoContent, response{Outcome: "ignored"}, "reason", err.Error())
	case err != nil:
		return nil, x.reply(http.StatusBadRequest, response{Outcome: "malformed", Message: malformedMessage(in.header, in.body, err)})
	}
	c := cs[0] // the changes of one webhook share event, repository and API
	if !in.route.Accepts(c.Event) {
		return nil, x.reply(http.StatusNoContent, response{Outcome: "ignored"}, "reason", "event "+c.Event+" not accepted by the route")
	}
	x.log = x.log.With("repository", c.Repository, "event", c.Event)
	if !in.route.Allows(c.Repository) {
		return nil, x.reply(http.StatusForbidden, response{Outcome: "forbidden", Message: "the route may not publish for this repository"})
	}
	if err := in.route.Takes(c.API); err != nil {
		return nil, x.reply(http.StatusForbidden, response{Outcome: "forbidden", Message: err.Error()})
	}
	if err := change.CheckBranches(cs); err != nil {
		return nil, x.reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: err.Error()})
	}
	return cs, nil
}

// deliveries encodes each change as the delivery the ledger admits: bound to the route, the
// scheme, the change's identity (ChangeIdentity) and the body's digest, holding the change,
// the times the signature proves and the route's bounds on their age. A change over the
// controller's max_change_bytes refuses the whole webhook (413) before any change is admitted.
func (x *exchange) deliveries(in received, proof webhook.Proof, cs []change.Change) ([]ledger.Delivery, *events.APIGatewayV2HTTPResponse) {
	ds := make([]ledger.Delivery, len(cs))
	for i, c := range cs {
		encoded, err := c.Marshal(x.h.Config.Controller.MaxChangeBytes)
		if err != nil {
			return nil, x.reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: err.Error()})
		}
		ds[i] = ledger.Delivery{
			Binding: ledger.Binding{Route: in.route.Name, Scheme: proof.Scheme, Identity: ChangeIdentity(proof.Identity, i),
				BodyDigest: ledger.SumBody(in.body)},
			Change:     encoded,
			SignedAt:   proof.SignedAt,
			MaxAge:     in.route.MaxAge,
			BodyAt:     proof.BodyAt,
			MaxBodyAge: in.route.MaxBodyAge,
		}
	}
	return ds, nil
}

// admit admits each delivery in order and queues each one the ledger holds to be evaluated
// (admitted now, or pending since an earlier copy), stopping at the first that cannot be
// admitted or queued; a duplicate (already done) is not queued. When the message of a
// delivery admitted cannot be sent, its row stays pending: the cleanup reports it stranded and
// re-drives it, and the sender's retry (after the 503) queues it again. The same identity with
// another body is 409; a full ledger, or one that does not answer, 503 with Retry-After; a
// change over the ledger's limit 413. A stale admission is 401 naming the window missed; when
// the window closes part way through a push's branches, the answer lists the branches before
// it, which were taken and are evaluated. It gives each branch's answer, in order, and the
// answer's line then carries the lifetime the ledger gave the rows.
func (x *exchange) admit(ctx context.Context, in received, proof webhook.Proof, cs []change.Change, ds []ledger.Delivery) ([]branchAnswer, *events.APIGatewayV2HTTPResponse) {
	if !proof.BodyAt.IsZero() {
		x.log = x.log.With("body_time", proof.BodyAt.UTC().Format(time.RFC3339), "body_time_field", proof.BodyTimeField)
	}
	branches := make([]branchAnswer, len(ds))
	var lifetime ledger.Lifetime
	for i, d := range ds {
		blog := x.log
		if len(ds) > 1 {
			blog = x.log.With("ref", cs[i].Ref)
		}
		a, err := x.h.Ledger.Admit(ctx, d)
		if errors.Is(err, ledger.ErrTooLarge) {
			return nil, x.reply(http.StatusRequestEntityTooLarge, response{Outcome: "too-large", Message: "change over the ledger's limit"})
		}
		if err != nil {
			blog.Error("admit", "err", err)
			return nil, x.h.unavailable(blog, "ledger")
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
			if err := x.h.Queue.Send(ctx, queue.Message{Key: a.Key, Binding: d.Binding.Digest()}); err != nil {
				// The row stays pending: cleanup reports it stranded and re-drives it.
				blog.Error("enqueue", "err", err, "admission", a.Outcome.String())
				return nil, x.h.unavailable(blog, "queue")
			}
		case ledger.Duplicate:
		case ledger.BindingConflict:
			return nil, x.reply(http.StatusConflict, response{Outcome: "conflict", Key: key, Message: "this delivery id was seen with another body"}, at...)
		case ledger.Stale:
			return nil, x.reply(http.StatusUnauthorized, x.stale(in.route, proof, d, cs[i].Ref, branches[:i]), at...)
		case ledger.Full:
			blog.Warn("ledger full")
			return nil, x.h.unavailable(blog, "full")
		default:
			blog.Error("admit answered an unknown outcome", "outcome", a.Outcome.String())
			return nil, x.h.unavailable(blog, "ledger")
		}
		branches[i] = branchAnswer{Ref: cs[i].Ref, Outcome: admissionOutcome(a.Outcome), Key: key}
	}
	if lifetime != 0 {
		x.log = x.log.With("lifetime", lifetime.String())
	}
	return branches, nil
}

// stale is the answer to a delivery the ledger found outside its accepted window: the time
// that was checked (the signed time, or the body's own and the field it came from) and the
// window it missed. When branches before this one (ref) were taken, the window closed between
// two branches' admissions: those are listed, and are evaluated; this one and those after it
// are not.
func (x *exchange) stale(route *config.Route, proof webhook.Proof, d ledger.Delivery, ref string, taken []branchAnswer) response {
	limits := x.h.Config.Limits()
	r := response{Outcome: "stale", Message: fmt.Sprintf(
		"signed at %s, outside the accepted window: at most %s old and at most %s ahead of the ledger's time",
		d.SignedAt.UTC().Format(time.RFC3339), limits.AcceptedAge(route.MaxAge), limits.FutureSkew)}
	if !d.BodyAt.IsZero() {
		r.Message = fmt.Sprintf("the body's %s is %s, outside the accepted window: at most %s old and at most %s ahead of the ledger's time",
			proof.BodyTimeField, d.BodyAt.UTC().Format(time.RFC3339), limits.AcceptedBodyAge(route.MaxBodyAge), limits.FutureSkew)
	}
	if len(taken) > 0 {
		r.Message = fmt.Sprintf("%s: %s and the branches after it are not evaluated; those before it were taken (listed)", r.Message, ref)
		r.Branches = taken
	}
	return r
}

// answer is the answer to a webhook whose every change the ledger took or found. One change:
// 202 admitted, 200 pending (already admitted, queued again) or 200 duplicate (already done),
// with its key. A push of several branches: the first of admitted, pending and duplicate that
// any branch had (202 when admitted, else 200), listing each branch's.
func (x *exchange) answer(branches []branchAnswer) *events.APIGatewayV2HTTPResponse {
	if len(branches) == 1 {
		b := branches[0]
		switch b.Outcome {
		case "admitted":
			return x.reply(http.StatusAccepted, response{Outcome: "admitted", Key: b.Key}, "key", b.Key)
		case "pending":
			return x.reply(http.StatusOK, response{Outcome: "pending", Key: b.Key, Message: "already admitted; queued again"}, "key", b.Key)
		}
		return x.reply(http.StatusOK, response{Outcome: "duplicate", Key: b.Key, Message: "already done"}, "key", b.Key)
	}
	r := response{Outcome: "duplicate", Message: fmt.Sprintf("a push of %d branches, each evaluated on its own", len(branches)), Branches: branches}
	keys := make([]string, len(branches))
	for i, b := range branches {
		keys[i] = b.Key
		if b.Outcome == "admitted" || b.Outcome == "pending" && r.Outcome == "duplicate" {
			r.Outcome = b.Outcome
		}
	}
	if r.Outcome == "admitted" {
		return x.reply(http.StatusAccepted, r, "keys", keys)
	}
	return x.reply(http.StatusOK, r, "keys", keys)
}

// reply logs the answer on the exchange's log with its status, outcome and attrs, counts its
// outcome, and gives it.
func (x *exchange) reply(status int, r response, attrs ...any) *events.APIGatewayV2HTTPResponse {
	x.log.Info("webhook", append([]any{"status", status, "outcome", r.Outcome}, attrs...)...)
	x.h.count(r.Outcome)
	return x.h.reply(status, r)
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

// count counts an answer under its outcome, the metric's name.
func (h *Handler) count(outcome string) {
	if h.Metrics != nil {
		h.Metrics.Count(outcome, 1)
	}
}

// unavailable logs on log and gives a 503 with Retry-After for what is unavailable, counted as
// full when the ledger is full and as unavailable otherwise.
func (h *Handler) unavailable(log *slog.Logger, what string) *events.APIGatewayV2HTTPResponse {
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
	return r
}

// reply is the response of status with r as its JSON body (none for 204).
func (h *Handler) reply(status int, r response) *events.APIGatewayV2HTTPResponse {
	resp := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}}
	if status != http.StatusNoContent {
		b, _ := json.Marshal(r)
		resp.Body = string(b)
	}
	return &resp
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
