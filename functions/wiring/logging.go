package wiring

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Invocations follows the invocations of one Lambda execution environment, so that every log
// line says which one it belongs to. Lambda runs one invocation at a time in an environment.
type Invocations struct {
	mu sync.Mutex
	id string
	n  int
}

// Begin marks the start of the invocation ctx carries (its Lambda request id).
func (inv *Invocations) Begin(ctx context.Context) {
	id := ""
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		id = lc.AwsRequestID
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.id = id
	inv.n++
}

// current returns the running invocation's request id ("" during the start-up) and whether the
// environment is still in its cold start: its start-up and its first invocation.
func (inv *Invocations) current() (string, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.id, inv.n <= 1
}

// NewLog returns a function's logger: JSON lines on w, each with the function's name, and
// with request_id (the Lambda request id of the invocation the line belongs to: the one in the
// context the line was logged with, else the one running; none in the lines of the start-up)
// and cold_start (true in the lines of the start-up and of the environment's first
// invocation). The marks come after the line's own attributes; a line logged through
// WithGroup carries them inside its group.
func NewLog(w io.Writer, function string) (*slog.Logger, *Invocations) {
	inv := &Invocations{}
	return slog.New(invocationHandler{Handler: slog.NewJSONHandler(w, nil), inv: inv}).With("function", function), inv
}

// invocationHandler adds the invocation's marks to every record.
type invocationHandler struct {
	slog.Handler
	inv *Invocations
}

func (h invocationHandler) Handle(ctx context.Context, r slog.Record) error {
	id, cold := h.inv.current()
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		id = lc.AwsRequestID
	}
	r = r.Clone()
	if id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	r.AddAttrs(slog.Bool("cold_start", cold))
	return h.Handler.Handle(ctx, r)
}

func (h invocationHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return invocationHandler{Handler: h.Handler.WithAttrs(attrs), inv: h.inv}
}

func (h invocationHandler) WithGroup(name string) slog.Handler {
	return invocationHandler{Handler: h.Handler.WithGroup(name), inv: h.inv}
}

// Invoked wraps a Lambda handler so that each invocation is marked (see Invocations) before
// the handler runs.
func Invoked[In, Out any](inv *Invocations, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		inv.Begin(ctx)
		return h(ctx, in)
	}
}
