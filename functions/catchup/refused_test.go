package catchup_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
)

// A delivery the ingress refused for what its body says (here a repository the route may not
// publish for: 403) gets the same answer however often it is sent again. Catch-up does not
// follow it: it never asks for it, and never reports it lost, while a delivery that failed
// for want of an answer beside it is asked for once and caught up.
func TestADeliveryTheIngressRefusedIsNeitherAskedForNorReportedLost(t *testing.T) {
	w := newWorld(t)
	_, forbidden := w.pushFrom(appHook, up, "other/tool")
	if forbidden.StatusCode != http.StatusForbidden {
		t.Fatalf("a push of other/tool was answered %d, want 403", forbidden.StatusCode)
	}
	sha, failed := w.push(appHook, down)
	src := w.sources()[0]
	for w.clock.Now().Sub(forbidden.DeliveredAt) <= github.RedeliveryWindow+time.Hour {
		w.clock.Advance(6 * time.Hour)
		if _, err := w.runner().Run(context.Background(), src); err != nil {
			t.Fatal(err)
		}
	}
	w.asked(appHook, map[string]int{failed.GUID: 1})
	if got := w.gauges.get("catchup_found_failed"); got != 1 {
		t.Errorf("catchup_found_failed %v, want the one delivery that failed", got)
	}
	if got := w.gauges.get("catchup_given_up"); got != 0 {
		t.Errorf("catchup_given_up %v, want none: %s", got, w.gaveUpLine())
	}
	w.drain()
	w.verdicts(sha)
	w.noViolations()
}

// As TestADeliveryTheIngressRefusedIsNeitherAskedForNorReportedLost, on a GitLab group's
// hook: an event of a project the route may not publish for is not resent.
func TestAGitLabEventTheIngressRefusedIsNeitherResentNorReportedLost(t *testing.T) {
	w := newGitLabWorld(t)
	_, forbidden := w.pushFrom(groupHook, up, "other/tool")
	if forbidden.Status != "403" {
		t.Fatalf("a push of other/tool was logged %q, want 403", forbidden.Status)
	}
	sha, failed := w.push(groupHook, down)
	src := w.sources()[1]
	for w.clock.Now().Sub(forbidden.At) <= gitlab.HookEventRetention+time.Hour {
		w.clock.Advance(12 * time.Hour)
		if _, err := w.runner().Run(context.Background(), src); err != nil {
			t.Fatal(err)
		}
	}
	w.asked(groupHook, map[string]int{failed.IdempotencyKey: 1})
	if got := w.gauges.get("catchup_given_up"); got != 0 {
		t.Errorf("catchup_given_up %v, want none: %s", got, w.gaveUpLine())
	}
	w.drain()
	w.verdicts(sha)
	w.noViolations()
}

// A 400 is what an ingress answers a body it cannot read, and also what a broken release
// answers every webhook until it is rolled back: the same body, redelivered once the release
// is fixed, is admitted. Catch-up follows a delivery answered 400 as it follows one answered
// 503, so the webhooks a broken release refused get their verdicts once it is fixed.
func TestADeliveryABrokenReleaseRefusedAsMalformedIsCaughtUpOnceItIsFixed(t *testing.T) {
	w := newWorld(t)
	sha, refused := w.push(appHook, broken)
	if refused.StatusCode != http.StatusBadRequest {
		t.Fatalf("the broken release answered %d, want 400", refused.StatusCode)
	}
	w.clock.Advance(time.Hour)
	if _, err := w.runner().Run(context.Background(), w.sources()[0]); err != nil {
		t.Fatal(err)
	}
	w.asked(appHook, map[string]int{refused.GUID: 1})
	w.drain()
	w.verdicts(sha)
	w.noViolations()
}
