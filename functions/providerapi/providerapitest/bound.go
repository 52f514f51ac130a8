package providerapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
)

// CheckAnAnswerPastItsBoundLeavesThePathsUnread runs read (a reader's Read of a change's paths,
// against the base URL and client given) on a provider whose every answer is longer than the
// 32 MiB amiss reads of one. Such an answer is the same on every attempt, so the read must not
// be retried: no error, the paths marked unread naming the bound (their rules fail closed),
// and one request.
func CheckAnAnswerPastItsBoundLeavesThePathsUnread(t *testing.T, read func(baseURL string, hc *http.Client) (change.Change, error)) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commits":[` + strings.Repeat(" ", 33<<20) + `]}`))
	}))
	defer srv.Close()
	got, err := read(srv.URL, srv.Client())
	if err != nil {
		t.Fatalf("read: %v (want the paths unread, not a retry)", err)
	}
	if got.Whole.Has(change.PathsInput) || !strings.Contains(got.UnreadReason(change.PathsInput), "longer than the 32 MiB amiss reads") {
		t.Fatalf("whole %q, unread %+v", got.Whole, got.Unread)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}
