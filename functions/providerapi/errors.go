package providerapi

import (
	"errors"
	"fmt"
	"time"
)

// ErrPermanent: the provider refused the request for good; sending it again cannot help.
var ErrPermanent = errors.New("refused for good")

// Class says what a failed request means for the work that needed it.
type Class int

// The classes of failure.
const (
	// Transient: the provider or the network failed, or a rate limit; a later attempt may
	// succeed.
	Transient Class = iota + 1
	// Operator: the provider refused the credentials or cannot see the repository (401, 403,
	// 404), or the base URL is wrong (a redirect); an operator fixes it, so it is retried on
	// the long schedule and reported as an error.
	Operator
	// Permanent: the provider refused this request for good.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Operator:
		return "operator"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a failed request: the class of the provider's last answer, its HTTP status (0 for
// a transport error or a request never sent), whether the provider may have applied it all the
// same, and the wait the provider asked for, if any. Err names the request and the answer; it
// never holds a credential.
type Error struct {
	Class  Class
	Status int
	// Unknown: the request may have been applied (a write that was sent, and whose answer was
	// cut, timed out, or came from a gateway that does not say what the provider did).
	Unknown bool
	// RetryAfter is the provider's own wait before the next attempt (Retry-After, a rate
	// limit's reset), zero when it named none.
	RetryAfter time.Duration
	// Message is the provider's own message in its answer, when it sent one.
	Message string
	// At is the provider's time at the answer (its Date header); zero when it sent none.
	At  time.Time
	Err error
}

func (e *Error) Error() string {
	if e.Class == Permanent {
		return fmt.Sprintf("%v: %v", ErrPermanent, e.Err)
	}
	return fmt.Sprintf("%v (%v)", e.Err, e.Class)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) hold for a permanent refusal.
func (e *Error) Is(target error) bool { return target == ErrPermanent && e.Class == Permanent }

// ClassOf classifies an error a client returned: its *Error's class, Permanent for an error
// wrapping ErrPermanent, and Transient for anything else (a cancelled context, an unknown
// failure).
func ClassOf(err error) Class {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	if errors.Is(err, ErrPermanent) {
		return Permanent
	}
	return Transient
}

// RetryAfterOf returns the wait the provider asked for, or zero.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// Unknown reports whether a failed request may have been applied all the same. An error no
// client classified is assumed to be (the worst case), unless it is permanent.
func Unknown(err error) bool {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Unknown
	}
	return err != nil && !errors.Is(err, ErrPermanent)
}

// StatusOf returns the provider's HTTP status in err, or zero.
func StatusOf(err error) int {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}

// Known returns err with Unknown cleared: a failure that the caller knows applied nothing (a
// read, a request refused before it was sent). Any other error is returned as it is.
func Known(err error) error {
	var pe *Error
	if errors.As(err, &pe) && pe.Unknown {
		e := *pe
		e.Unknown = false
		return &e
	}
	return err
}

// Wrap returns err as an *Error whose message is prefixed by what: the class, status, outcome
// and wait of the *Error it holds are kept (and so is the error around it, for errors.Is); an
// error that holds none becomes one of class c.
func Wrap(err error, c Class, what string) error {
	var pe *Error
	if !errors.As(err, &pe) {
		return &Error{Class: c, Err: fmt.Errorf("%s: %w", what, err)}
	}
	e := *pe
	inner := err
	if direct, ok := err.(*Error); ok {
		inner = direct.Err
	}
	e.Err = fmt.Errorf("%s: %w", what, inner)
	return &e
}

// StatusMessage is the provider's message in err (its answer's "message"), or err's text.
func StatusMessage(err error) string {
	var pe *Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// Reclass returns err as an *Error of class c, its message prefixed by what, keeping its
// status, outcome and wait: for a provider's answer that a caller knows better than the
// generic table (a 422 that refuses one request for good). Nil stays nil.
func Reclass(err error, c Class, what string) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if !errors.As(Wrap(err, c, what), &pe) {
		return err
	}
	pe.Class = c
	return pe
}
