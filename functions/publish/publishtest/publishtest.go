// Package publishtest is the contract every publisher that posts to a provider keeps, run
// against that provider's fake, as ledgertest is the contract of the ledgers: a publisher's
// test provides a Harness, and RunContract runs every case as a named subtest.
//
// The contract is what the runner relies on: a post that landed stands and reads back as ours;
// a refusal for good is Permanent, refused credentials the operator's, and neither is Unknown;
// a post whose answer was lost (a 500, a cut connection) is Unknown, and the read-back finds
// it; the read-back tells this delivery's verdict from another's, across every page the
// provider lists; a rate limit is Transient with the provider's own wait, returned rather than
// slept through; past the bound a grant to post sets on sending (providerapi.SendBefore),
// nothing is sent, and the failure is Transient and known not applied.
package publishtest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/publish"
)

// Fault is how the harness's fake answers every create (a status's POST, a check run's
// create) from now on, until the next Posts.
type Fault int

// The faults a provider's fake stages.
const (
	// Normal: created at once.
	Normal Fault = iota
	// Refused: the provider's refusal for good of this status (GitHub's 422 for a commit it
	// does not know; each provider's own).
	Refused
	// Unauthorized: 401, the credential refused.
	Unauthorized
	// Lost: applied, then answered 500 (the provider failed after the write).
	Lost
	// Cut: applied, then the connection closed without an answer.
	Cut
	// RateLimited: the provider's rate-limit answer, naming RateLimitWait as its own way of
	// naming a wait (Retry-After, a reset time against its Date).
	RateLimited
)

// RateLimitWait is the wait a RateLimited answer names.
const RateLimitWait = 90 * time.Second

// Harness is what a publisher's test provides: the publisher, posting to its provider's fake,
// and the fake's hands.
type Harness interface {
	// Publisher returns the publisher under test: it posts to the fake, makes one attempt a
	// call, and never sleeps.
	Publisher() publish.Publisher
	// Status returns the verdict of delivery n (from 1) on the harness's commit and context:
	// each n another delivery, with a state, a description and a link of its own.
	Status(n int) publish.Status
	// Shown reports whether the commit shows s under its context: the latest status (or check
	// run) there is s, as posted.
	Shown(s publish.Status) bool
	// Posted counts the statuses (or check runs) the fake created showing s.
	Posted(s publish.Status) int
	// Posts makes the fake answer every create from now on as f says.
	Posts(f Fault)
	// Crowd makes the fake hold n statuses (or check runs) of other deliveries or contexts on
	// s's commit, made before it, that a read-back of s must page past.
	Crowd(s publish.Status, n int)
}

// NewHarness makes a harness for one case, on a provider fake of its own.
type NewHarness func(t *testing.T) Harness

// RunContract runs every case of the contract against the harnesses newHarness makes.
func RunContract(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			c.run(&env{t: t, h: h, p: h.Publisher(), ctx: context.Background()})
		})
	}
}

type env struct {
	t   *testing.T
	h   Harness
	p   publish.Publisher
	ctx context.Context
}

func (e *env) standing(s publish.Status, want publish.Standing) {
	e.t.Helper()
	got, err := e.p.Standing(e.ctx, s)
	if err != nil || got != want {
		e.t.Fatalf("standing of delivery %q: %v, %v; want %v", s.Description, got, err, want)
	}
}

func (e *env) publish(s publish.Status) {
	e.t.Helper()
	if err := e.p.Publish(e.ctx, s); err != nil {
		e.t.Fatalf("publish %q: %v", s.Description, err)
	}
}

// refusal checks err, the failure of a post the provider refused: class want, the status
// code, known not applied, nothing created.
func (e *env) refusal(s publish.Status, err error, want publish.Class, code int) {
	e.t.Helper()
	switch {
	case err == nil:
		e.t.Fatal("the refused post answered no error")
	case publish.ClassOf(err) != want:
		e.t.Fatalf("%v: class %v, want %v", err, publish.ClassOf(err), want)
	case publish.Unknown(err):
		e.t.Fatalf("%v: unknown, although the provider refused it", err)
	case code != 0 && publish.StatusOf(err) != code:
		e.t.Fatalf("%v: status %d, want %d", err, publish.StatusOf(err), code)
	case (want == publish.Permanent) != errors.Is(err, publish.ErrPermanent):
		e.t.Fatalf("%v: errors.Is(ErrPermanent) disagrees with the class %v", err, want)
	case e.h.Posted(s) != 0 || e.h.Shown(s):
		e.t.Fatalf("%v: the refused status was created", err)
	}
	e.standing(s, publish.StandingNone)
}

var cases = []struct {
	name string
	run  func(*env)
}{
	{"a post that lands stands, and reads back as ours", func(e *env) {
		s := e.h.Status(1)
		e.standing(s, publish.StandingNone)
		e.publish(s)
		if !e.h.Shown(s) || e.h.Posted(s) != 1 {
			e.t.Fatalf("after a post: shown %v, %d created", e.h.Shown(s), e.h.Posted(s))
		}
		e.standing(s, publish.StandingOurs)
	}},
	{"a refusal for good is permanent, and posts nothing", func(e *env) {
		s := e.h.Status(1)
		e.h.Posts(Refused)
		e.refusal(s, e.p.Publish(e.ctx, s), publish.Permanent, 0)
	}},
	{"refused credentials are the operator's, and post nothing", func(e *env) {
		s := e.h.Status(1)
		e.h.Posts(Unauthorized)
		e.refusal(s, e.p.Publish(e.ctx, s), publish.Operator, http.StatusUnauthorized)
	}},
	{"a post answered 500 after it was applied is unknown, and reads back as ours", func(e *env) { lostPost(e, Lost) }},
	{"a post whose connection was cut after it was applied is unknown, and reads back as ours", func(e *env) { lostPost(e, Cut) }},
	{"the read-back tells this delivery's verdict from a newer one's", func(e *env) {
		older, newer := e.h.Status(1), e.h.Status(2)
		e.publish(older)
		e.standing(older, publish.StandingOurs)
		e.publish(newer)
		e.standing(older, publish.StandingOther)
		e.standing(newer, publish.StandingOurs)
		if !e.h.Shown(newer) || e.h.Shown(older) {
			e.t.Fatal("the commit does not show the newer verdict")
		}
	}},
	{"a rate limit is transient with the provider's wait, returned at once", func(e *env) {
		s := e.h.Status(1)
		e.h.Posts(RateLimited)
		err := e.p.Publish(e.ctx, s)
		if publish.ClassOf(err) != publish.Transient || publish.RetryAfterOf(err) != RateLimitWait || publish.Unknown(err) {
			e.t.Fatalf("%v: class %v, wait %v, unknown %v; want transient, %v, known not applied", err, publish.ClassOf(err),
				publish.RetryAfterOf(err), publish.Unknown(err), RateLimitWait)
		}
		if e.h.Posted(s) != 0 {
			e.t.Fatal("a rate-limited post was created")
		}
	}},
	{"past its bound on sending, nothing is posted, and the failure is transient and known", func(e *env) {
		s := e.h.Status(1)
		bound := time.Now()
		late := providerapi.SendBefore(e.ctx, bound, func() time.Time { return bound })
		err := e.p.Publish(late, s)
		if err == nil || publish.ClassOf(err) != publish.Transient || publish.Unknown(err) {
			e.t.Fatalf("a post past its bound: %v (class %v, unknown %v); want a transient failure, known not applied", err,
				publish.ClassOf(err), publish.Unknown(err))
		}
		if _, err := e.p.Standing(late, s); err == nil || publish.ClassOf(err) != publish.Transient || publish.Unknown(err) {
			e.t.Fatalf("a read-back past its bound: %v; want a transient failure", err)
		}
		if e.h.Posted(s) != 0 || e.h.Shown(s) {
			e.t.Fatal("a post past its bound was created")
		}
		e.publish(s) // within its time, the same post lands
		e.standing(s, publish.StandingOurs)
	}},
	{"the read-back finds the verdict past every page the provider lists", func(e *env) {
		older, newer := e.h.Status(1), e.h.Status(2)
		e.h.Crowd(older, 150)
		e.publish(older)
		e.standing(older, publish.StandingOurs)
		e.h.Crowd(older, 150)
		e.publish(newer)
		e.standing(older, publish.StandingOther)
		e.standing(newer, publish.StandingOurs)
	}},
}

func lostPost(e *env, f Fault) {
	s := e.h.Status(1)
	e.h.Posts(f)
	err := e.p.Publish(e.ctx, s)
	if err == nil || !publish.Unknown(err) || publish.ClassOf(err) != publish.Transient {
		e.t.Fatalf("%v: unknown %v, class %v; want an unknown, transient failure", err, publish.Unknown(err), publish.ClassOf(err))
	}
	e.h.Posts(Normal)
	if n := e.h.Posted(s); n != 1 {
		e.t.Fatalf("%d created, want the one applied", n)
	}
	e.standing(s, publish.StandingOurs)
	if !e.h.Shown(s) {
		e.t.Fatalf("the commit does not show %q", s.Description)
	}
}
