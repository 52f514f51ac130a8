package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/amiss-ci/amiss/functions/metrics"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// A token the provider no longer accepts (revoked, expired, an App uninstalled) is what the
// deployment's alarms on refused publications and abandoned rows watch: every attempt GitHub
// answers 401 is counted publish_refused on the invocation's metrics line, and when the
// publish budget ends the row is abandoned and counted once. The publisher is GitHub's own,
// posting to a server that answers every request 401, and the metrics are the Embedded Metric
// Format lines CloudWatch reads.
func TestARevokedTokenIsCountedRefusedOnEachAttemptAndAbandonedOnceAtTheBudgetsEnd(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodPost {
			posts++
		}
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusUnauthorized)
		io.WriteString(rw, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest"}`)
	}))
	defer srv.Close()
	var out bytes.Buffer
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "runner"}, Out: &out}
	r := w.runner("a", verdict("success", "ok")) // the default budget: 72 hours
	r.Metrics = m
	gh := publish.NewGitHub(srv.URL, "revoked", srv.Client())
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: gh, Context: "amiss/verdict"}, nil
	}
	type line struct{ refused, abandoned float64 }
	var lines []line
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("not abandoned after 1000 invocations")
		}
		res, err := r.Process(context.Background(), w.msg)
		if err != nil {
			t.Fatalf("invocation %d: %v", i, err)
		}
		out.Reset()
		if err := m.Flush(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			var l map[string]any
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("metrics line %q: %v", sc.Text(), err)
			}
			refused, _ := l["publish_refused"].(float64)
			abandoned, _ := l["abandoned"].(float64)
			lines = append(lines, line{refused, abandoned})
		}
		if res.Done {
			break
		}
		w.clock.Set(res.RetryAt)
	}
	row, err := w.l.Inspect(context.Background(), w.msg.Key)
	if err != nil || row.State != ledger.StateAbandoned || !strings.Contains(row.Reason, "publish budget of 72h0m0s spent") ||
		!strings.Contains(row.Reason, "401") {
		t.Fatalf("row %v (%q), %v: want abandoned at the budget's end, naming the 401", row.State, row.Reason, err)
	}
	var refused, abandoned float64
	for i, l := range lines {
		refused += l.refused
		abandoned += l.abandoned
		if l.abandoned > 0 && i != len(lines)-1 {
			t.Fatalf("abandoned counted on invocation %d of %d", i, len(lines))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if posts < 10 || refused != float64(posts) || abandoned != 1 {
		t.Fatalf("%d posts answered 401: publish_refused counted %v times, abandoned %v times; want one refusal per post and one abandonment",
			posts, refused, abandoned)
	}
	t.Logf("a revoked token for 72 hours: %d posts refused over %d invocations, then abandoned", posts, len(lines))
}
