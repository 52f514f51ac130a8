package runner

import (
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// How long a post whose outcome is unknown may still land, for the inputs docs/runner.md and
// docs/configuration.md name: a grant to post lasts the route's timeout twice over and 10 s
// (70 s with the default 30 s timeout), and after it a post may land for the route's settle
// time and 10 s for clocks (70 s with the default minute). A report the subject's record heard
// answers the wait on the ledger's clock (its settle time, which an older post's may put
// further); a report it did not hear leaves the whole grant and the settle time after it.
func TestTheSettleWaitIsTheRoutesSettleTimeAndTenSecondsAfterTheGrant(t *testing.T) {
	decided := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	heard := func(wait time.Duration) *ledger.SubjectGrant {
		return &ledger.SubjectGrant{Outcome: ledger.SubjectRetry, Decided: decided, RetryAt: decided.Add(wait)}
	}
	for _, c := range []struct {
		name         string
		route        Route
		heard        *ledger.SubjectGrant
		hold, settle time.Duration
		wait         time.Duration
	}{
		{"defaults, the report heard", Route{}, heard(70 * time.Second), 70 * time.Second, 70 * time.Second, 70 * time.Second},
		{"defaults, the report not heard", Route{}, nil, 70 * time.Second, 70 * time.Second, 140 * time.Second},
		{"an older post settling later, heard", Route{}, heard(100 * time.Second), 70 * time.Second, 70 * time.Second, 100 * time.Second},
		{"timeout 1s and settle 2s, heard", Route{Timeout: time.Second, Settle: 2 * time.Second}, heard(12 * time.Second),
			12 * time.Second, 12 * time.Second, 12 * time.Second},
		{"timeout 1s and settle 2s, not heard", Route{Timeout: time.Second, Settle: 2 * time.Second}, nil,
			12 * time.Second, 12 * time.Second, 24 * time.Second},
		{"settle 1h, not heard", Route{Settle: time.Hour}, nil, 70 * time.Second, time.Hour + 10*time.Second,
			time.Hour + 80*time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := ledger.SubjectRequest{HoldFor: c.route.holdFor(), Settle: c.route.settle()}
			if q.HoldFor != c.hold || q.Settle != c.settle {
				t.Fatalf("a grant asks to hold %v and settle %v, want %v and %v", q.HoldFor, q.Settle, c.hold, c.settle)
			}
			if got := settleWait(q, c.heard); got != c.wait {
				t.Fatalf("settle wait %v, want %v", got, c.wait)
			}
		})
	}
}
