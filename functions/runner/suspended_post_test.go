package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/ledger"
)

// suspendAfterGrant runs suspended once, after its ledger answers the first grant to post (g,
// asked for with q): the moment a host may be suspended, between the grant and the post under
// it.
type suspendAfterGrant struct {
	ledger.Ledger
	suspended func(q ledger.SubjectRequest, g ledger.SubjectGrant)
}

func (s *suspendAfterGrant) AcquireSubject(ctx context.Context, q ledger.SubjectRequest) (ledger.SubjectGrant, error) {
	g, err := s.Ledger.AcquireSubject(ctx, q)
	if err == nil && g.Outcome == ledger.SubjectPost && s.suspended != nil {
		s.suspended(q, g)
		s.suspended = nil
	}
	return g, err
}

// A runner's host is suspended between the grant to post the older verdict and its post: its
// monotonic clock (which times the post's deadline and the lease's renewals) stops, the wall
// clock and the ledger's go on. Meanwhile the grant ends, and another runner is granted the
// subject and posts the newer verdict: long after, or as soon as the grant has ended. When the
// host wakes, the older verdict's post is not sent, and the newer verdict is left standing.
func TestAPostDueBeforeItsHostWasSuspendedIsNotSentAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		// wake is when the host wakes, by the wall clock, for the grant g asked for with q.
		wake func(q ledger.SubjectRequest, g ledger.SubjectGrant) time.Time
	}{
		{"for minutes", func(_ ledger.SubjectRequest, g ledger.SubjectGrant) time.Time {
			return g.Decided.Add(10 * time.Minute) // well past the grant and its settle time
		}},
		{"until its grant ends", func(q ledger.SubjectRequest, g ledger.SubjectGrant) time.Time {
			return g.Decided.Add(q.HoldFor) // the first moment another runner may be granted the subject
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
			older := w.pullRequest(badTitle, epoch.Add(-2*time.Minute))
			newer := w.pullRequest(goodTitle, epoch.Add(-time.Minute))
			other := w.runner("b", nil, 5*time.Second)
			asleep := &suspendAfterGrant{Ledger: w.l, suspended: func(q ledger.SubjectRequest, g ledger.SubjectGrant) {
				w.clock.Set(tc.wake(q, g))
				// The other runner posts the newer verdict (confirmed later, once the older
				// verdict's post, counted as unknown, has settled).
				if _, err := other.Process(context.Background(), newer); err != nil {
					t.Logf("process the newer verdict: %v", err)
				}
				w.standing("success", 1)
			}}
			r := w.runner("a", asleep, 5*time.Second)
			monotonic := ledger.NewManualClock(w.clock.Now()) // stands still while the host sleeps
			r.Now, r.Wall = monotonic.Now, w.clock.Now
			r.RenewEvery = time.Hour // the keeper's ticker sleeps with the host
			res, err := r.Process(context.Background(), older)
			if res.Done {
				t.Fatalf("the older verdict's attempt is done (%v) though its post was due before the host slept", err)
			}
			w.standing("success", 1)

			// Its next attempt, on a host awake, finds the newer verdict standing: superseded.
			w.process(other, newer)
			r.Now, r.RenewEvery = w.clock.Now, 5*time.Millisecond
			w.process(r, older)
			w.standing("success", 1)
			w.wantSuperseded(older, newer)
		})
	}
}
