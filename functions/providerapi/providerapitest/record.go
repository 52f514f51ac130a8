package providerapitest

import (
	"fmt"
	"sync"
)

// Record is what a fake keeps of the requests it served: the valid requests of each operation
// (numbered from 1, so that a fake's Answer can refuse the n-th), the requests refused for
// their token, and the requests that broke the provider's API (violations, which a test
// asserts are none). A fake embeds it, so that its Requests, AllRequests, Unauthorized and
// Violations are the fake's own. Its methods are safe for concurrent use, and take no lock of
// the fake's: a fake may call them holding its own.
type Record struct {
	mu           sync.Mutex
	requests     map[string]int
	unauthorized int
	violations   []string
}

// Tally counts a valid request of op, and returns its number among op's (from 1).
func (r *Record) Tally(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.requests == nil {
		r.requests = map[string]int{}
	}
	r.requests[op]++
	return r.requests[op]
}

// Requests returns how many valid requests of the operation op were made.
func (r *Record) Requests(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[op]
}

// AllRequests returns how many valid requests were made, of every operation.
func (r *Record) AllRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.requests {
		n += c
	}
	return n
}

// Refused counts a request refused for its token.
func (r *Record) Refused() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unauthorized++
}

// Unauthorized counts the requests refused for their token.
func (r *Record) Unauthorized() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unauthorized
}

// Violate records a request that broke the API, as format and a say, and returns what it
// recorded (for the fake's answer).
func (r *Record) Violate(format string, a ...any) string {
	msg := fmt.Sprintf(format, a...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, msg)
	return msg
}

// Violations lists the requests that broke the API, in order.
func (r *Record) Violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.violations...)
}

// Refuse is a fake's Answer refusing every request of the operations ops (of every operation
// when none is named) with code.
func Refuse(code int, ops ...string) func(op string, n int) int {
	return func(op string, _ int) int {
		for _, o := range ops {
			if o == op {
				return code
			}
		}
		if len(ops) == 0 {
			return code
		}
		return 0
	}
}

// Refusal is what answer (a fake's Answer; nil: serve every request) says of the n-th valid
// request of op (from 1, as Tally numbers it): 0 to serve it, or the status to refuse it with.
func Refusal(answer func(op string, n int) int, op string, n int) int {
	if answer == nil {
		return 0
	}
	return answer(op, n)
}
