package providerapi

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// sendBeforeKey carries a SendBefore bound in a context.
type sendBeforeKey struct{}

type sendBefore struct {
	at   time.Time
	wall func() time.Time
}

// SendBefore returns a context under which Client.Do sends no request once wall reads at or
// past at: the call answers a Transient *Error saying the request was not sent (so nothing
// was applied). It bounds the requests made under a grant to post on the wall clock, besides
// ctx's own deadline: a context's deadline runs on the monotonic clock, which stops while the
// host is suspended, so a request due before the grant ended could otherwise be sent long
// after, when a newer verdict may have been posted under a grant of its own. wall must read
// the wall clock alone: a time carrying a monotonic reading would be compared on it (nil:
// time.Now without its monotonic reading).
func SendBefore(ctx context.Context, at time.Time, wall func() time.Time) context.Context {
	if wall == nil {
		wall = func() time.Time { return time.Now().Round(0) }
	}
	return context.WithValue(ctx, sendBeforeKey{}, sendBefore{at: at.Round(0), wall: wall})
}

// WithoutSendBefore returns ctx without a SendBefore bound, its other values kept: for a
// request that one caller starts and others share (a GitHub App's token exchange), which posts
// nothing to a commit, so that no one caller's bound fails it for the others.
func WithoutSendBefore(ctx context.Context) context.Context {
	return context.WithValue(ctx, sendBeforeKey{}, nil)
}

// tooLateToSend is the error of a request that ctx's SendBefore bound forbids sending now,
// nil when it may be sent.
func tooLateToSend(ctx context.Context, req *http.Request) *Error {
	b, ok := ctx.Value(sendBeforeKey{}).(sendBefore)
	if !ok {
		return nil
	}
	if now := b.wall().Round(0); now.Before(b.at) {
		return nil
	}
	return &Error{Class: Transient, Err: fmt.Errorf("%s %s not sent: its time ended at %s by the wall clock (the host was suspended or its clock stepped since the grant to post, or the calls before it took that long)",
		req.Method, req.URL.EscapedPath(), b.at.UTC().Format(time.RFC3339))}
}
