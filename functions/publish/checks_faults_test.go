package publish_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/publish"
)

// faultAt serves every request with the checks fake, except the n-th (from 1), which the fake
// applies before its answer is lost as fault says: "cut" (the connection closed without an
// answer) or a gateway's 502 or GitHub's own 500.
func faultAt(fake *githubtest.GitHub, n int, fault string) http.Handler {
	var mu sync.Mutex
	seen := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen++
		hit := seen == n
		mu.Unlock()
		if !hit {
			fake.ServeHTTP(w, r)
			return
		}
		fake.ServeHTTP(httptest.NewRecorder(), r) // applied; the answer never reaches the client
		switch fault {
		case "cut":
			providerapitest.Cut(w)
		case "502":
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
}

// A verdict refusing 120 files takes four requests: the listing, the create (50 annotations)
// and two updates (50, 20). Whichever of them GitHub applies and answers with a cut, a 502 or
// a 500, the publication taken up again (as the runner does after a read-back) leaves exactly
// one check run of the delivery, with each of the 120 annotations once, standing as ours.
func TestAFaultAtAnyStepOfAPublicationLeavesOneCompleteCheckRun(t *testing.T) {
	for step := 1; step <= 4; step++ {
		for _, fault := range []string{"cut", "502", "500"} {
			t.Run(fmt.Sprintf("request %d %s", step, fault), func(t *testing.T) {
				fake := githubtest.New(nil)
				srv := httptest.NewServer(faultAt(fake, step, fault))
				defer srv.Close()
				p := publish.NewGitHubChecks(srv.URL, &installationTokens{}, srv.Client())
				p.MaxAttempts = 1
				s := refusing(120)
				err := p.Publish(context.Background(), s)
				if err == nil {
					t.Fatal("the publication succeeded through a fault")
				}
				if step > 1 && !publish.Unknown(err) {
					t.Fatalf("a fault after the listing: %v, want an unknown outcome", err)
				}
				if step == 1 && publish.Unknown(err) {
					t.Fatalf("a fault of the listing: %v, an unknown outcome although nothing was posted", err)
				}
				if err := p.Publish(context.Background(), s); err != nil {
					t.Fatalf("taken up again: %v", err)
				}
				noViolations(t, fake)
				runs := fake.Runs(s.Repository, s.SHA)
				if len(runs) != 1 || fake.Creates() != 1 {
					t.Fatalf("%d check runs, %d creates; want exactly one", len(runs), fake.Creates())
				}
				if n := len(runs[0].Annotations); n != 120 {
					t.Fatalf("%d annotations, want each of the 120 once", n)
				}
				for i, a := range runs[0].Annotations {
					if want := fmt.Sprintf("secrets/%04d.pem", i); a.Path != want {
						t.Fatalf("annotation %d on %s, want %s", i, a.Path, want)
					}
				}
				if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOurs {
					t.Fatalf("standing %v %v, want ours", st, err)
				}
			})
		}
	}
}

// The commit holds 150 check runs of the name from other deliveries (more than a page of the
// listing) when this delivery's create is applied and its answer lost: taken up again, the
// publisher reads every page, finds its check run on the second and updates it; and a newer
// delivery's check run, listed on the second page too, is what stands.
func TestACheckRunIsFoundBeyondTheFirstPageOfItsName(t *testing.T) {
	fake := githubtest.New(nil)
	p := checksServer(t, fake)
	for i := range 150 {
		other := refusing(0)
		other.State, other.ExternalID = "success", fmt.Sprintf("%064d", i)
		if err := p.Publish(context.Background(), other); err != nil {
			t.Fatal(err)
		}
	}
	fake.Create = func(n int, _ githubtest.CheckRun) githubtest.Behavior {
		return githubtest.Behavior{Cut: n == 151}
	}
	s := refusing(60)
	if err := p.Publish(context.Background(), s); err == nil || !publish.Unknown(err) {
		t.Fatalf("first publication: %v, want an unknown outcome", err)
	}
	if err := p.Publish(context.Background(), s); err != nil {
		t.Fatalf("taken up again: %v", err)
	}
	noViolations(t, fake)
	runs := fake.Runs(s.Repository, s.SHA)
	if len(runs) != 151 || fake.Creates() != 151 {
		t.Fatalf("%d check runs after %d creates, want 151", len(runs), fake.Creates())
	}
	if mine := runs[150]; mine.ExternalID != deliveryKey || len(mine.Annotations) != 60 {
		t.Fatalf("this delivery's check run: %s with %d annotations", mine.ExternalID, len(mine.Annotations))
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOurs {
		t.Fatalf("standing %v %v, want ours", st, err)
	}
	newer := refusing(0)
	newer.State, newer.ExternalID = "success", strings.Repeat("b", 64)
	if err := p.Publish(context.Background(), newer); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Standing(context.Background(), s); err != nil || st != publish.StandingOther {
		t.Fatalf("after a newer delivery's check run on page 2: %v %v, want other", st, err)
	}
}

// A publication refused with 401 twice (the token and its successor): the error names neither
// token, nor does any other failure's.
func TestACheckRunPublicationErrorHoldsNoToken(t *testing.T) {
	fake := githubtest.New(func(string) bool { return false })
	srv := httptest.NewServer(fake)
	defer srv.Close()
	err := publish.NewGitHubChecks(srv.URL, &installationTokens{}, srv.Client()).Publish(context.Background(), refusing(1))
	if err == nil || publish.ClassOf(err) != publish.Operator {
		t.Fatalf("%v, want the operator's", err)
	}
	if s := err.Error(); strings.Contains(s, "token-7-") {
		t.Fatalf("the error holds an installation token: %s", s)
	}
}
