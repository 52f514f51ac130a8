package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
)

// TestTwoClientsRaceWithLostResponses runs two ledger clients (two Lambdas, each with its own
// HTTP transport and cache), 8 goroutines each, over the same 200 deliveries, with one request
// in 20 applied but its response lost. Every delivery must end done, with one saved result,
// and every publication must carry that result.
func TestTwoClientsRaceWithLostResponses(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	const deliveries, perClient = 200, 8
	ctx := context.Background()
	prefix := newPrefix(t)
	limits := ledgertest.Limits()
	limits.RecordCap = 10_000
	clock := ledger.SystemClock{}
	lossy := func() *transport {
		tr := newTransport(&counter{})
		var mu sync.Mutex
		rnd := rand.New(rand.NewPCG(1, 2))
		tr.setRule(func(r *http.Request) fault {
			mu.Lock()
			defer mu.Unlock()
			if isMutating(r) && rnd.IntN(20) == 0 {
				return loseResponse
			}
			return pass
		})
		return tr
	}
	clients := []ledger.Ledger{openOn(t, prefix, lossy(), clock, limits, 0), openOn(t, prefix, lossy(), clock, limits, 0)}
	ds := make([]ledger.Delivery, deliveries)
	for i := range ds {
		body := fmt.Appendf(nil, `{"race":%d}`, i)
		ds[i] = ledger.Delivery{Binding: ledger.Binding{Route: "race", Scheme: "github-sha256", Identity: fmt.Sprintf("race-%d", i),
			BodyDigest: ledger.SumBody(body)}, Change: body}
	}
	var mu sync.Mutex
	saved := map[int]map[string]bool{}     // delivery -> digests of successful saves
	published := map[int]map[string]bool{} // delivery -> digests published
	note := func(m map[int]map[string]bool, i int, digest string) {
		mu.Lock()
		defer mu.Unlock()
		if m[i] == nil {
			m[i] = map[string]bool{}
		}
		m[i][digest] = true
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*perClient)
	for c, l := range clients {
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("client%d-g%d", c, g)
				w := &ledgertest.Worker{Ledger: l, Owner: owner, Lease: 2 * time.Second,
					// A lost answer: the next round retries, as a sender or SQS would.
					Tolerate: func(err error) bool { return errors.Is(err, ledger.ErrBusy) || errors.Is(err, ledger.ErrUnavailable) },
					Report: func(i int, fence uint64) []byte {
						return fmt.Appendf(nil, `{"delivery":%d,"by":%q,"fence":%d}`, i, owner, fence)
					},
					OnSaved:   func(i int, _ uint64, report []byte) { note(saved, i, ledger.SumBody(report).String()) },
					OnPublish: func(i int, report []byte) { note(published, i, ledger.SumBody(report).String()) },
				}
				if err := w.Run(ctx, ds, 3*time.Minute); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := openOn(t, prefix, newTransport(&counter{}), clock, limits, 0)
	takeovers := 0
	for i, d := range ds {
		row, err := check.Inspect(ctx, d.Key())
		if err != nil || row.State != ledger.StateDone {
			t.Fatalf("delivery %d: %v %v, want done", i, row.State, err)
		}
		want := row.Report.Digest.String()
		if len(saved[i]) > 1 {
			t.Fatalf("delivery %d: %d different results saved", i, len(saved[i]))
		}
		for dg := range saved[i] {
			if dg != want {
				t.Fatalf("delivery %d: saved %s, row holds %s", i, dg, want)
			}
		}
		if len(published[i]) != 1 || !published[i][want] {
			t.Fatalf("delivery %d: published %v, saved %s", i, published[i], want)
		}
		if row.Attempts > 1 || row.PublishAttempts > 0 {
			takeovers++
		}
	}
	st, err := check.Stats(ctx)
	if err != nil || st.Rows != deliveries || st.ByState[ledger.StateDone] != deliveries || st.CapacityUsed < st.Rows {
		t.Fatalf("stats %+v %v", st, err)
	}
	t.Logf("2 clients x %d goroutines, %d deliveries, 1 in 20 writes' responses lost: every delivery done once, one verdict each; %d claimed more than once; capacity %d",
		perClient, deliveries, takeovers, st.CapacityUsed)
}
