package gitlab

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// A project hook's events are listed page by page as GitLab pages them, each attempt tied to
// its event by Idempotency-Key, a timeout read as no answer; a resend GitLab refuses 422 is
// Permanent, and a refused token is the operator's.
func TestHookEventsAreListedAndResentAsGitLabDocumentsThem(t *testing.T) {
	var resends []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("PRIVATE-TOKEN") != "tok" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"401 Unauthorized"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.EscapedPath() == "/api/v4/projects/acme%2Fapp/hooks/17/events":
			if r.URL.Query().Get("page") == "2" {
				w.Header().Set("X-Next-Page", "")
				fmt.Fprint(w, `[{"id":3,"trigger":"push_hooks","request_headers":{"Idempotency-Key":"k1"},"response_status":"internal error","created_at":"2026-07-01T10:00:00Z"}]`)
				return
			}
			w.Header().Set("X-Next-Page", "2")
			fmt.Fprint(w, `[{"id":5,"trigger":"push_hooks","request_headers":{"Idempotency-Key":"k1"},"response_status":"200","created_at":"2026-07-01T11:00:00Z"},`+
				`{"id":4,"trigger":"merge_request_hooks","request_headers":{},"response_status":503,"created_at":"2026-07-01T10:30:00Z"}]`)
		case r.Method == http.MethodPost && r.URL.Path == "/api/v4/groups/acme/hooks/9/events/4/resend":
			resends = append(resends, r.URL.Path)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{}`)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"event is too old"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "tok", srv.Client())
	var got []string
	err := c.HookEvents(context.Background(), Hook{Project: "acme/app", ID: 17}, 5, func(es []HookEvent) (bool, error) {
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%s:%d", e.ID, e.Delivery(), e.StatusCode()))
		}
		return true, nil
	})
	want := []string{"5:k1:200", "4:event-4:503", "3:k1:0"}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v %v, want %v", got, err, want)
	}
	if err := c.ResendHookEvent(context.Background(), Hook{Group: "acme", ID: 9}, 4); err != nil || len(resends) != 1 {
		t.Fatalf("resend: %v (%d sent)", err, len(resends))
	}
	if err := c.ResendHookEvent(context.Background(), Hook{Project: "acme/app", ID: 17}, 3); providerapi.ClassOf(err) != providerapi.Permanent {
		t.Errorf("a resend refused 422: %v, want Permanent", err)
	}
	bad := NewClient(srv.URL, "nope", srv.Client())
	if err := bad.HookEvents(context.Background(), Hook{Project: "acme/app", ID: 17}, 5, func([]HookEvent) (bool, error) { return true, nil }); providerapi.ClassOf(err) != providerapi.Operator {
		t.Errorf("a refused token: %v, want the operator's", err)
	}
	if err := (Hook{Project: "a", Group: "b", ID: 1}).Validate(); err == nil {
		t.Error("a hook of a project and a group at once passed")
	}
}
