package webhook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/webhook"
)

const hookSecret = "a webhook secret"

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// signed verifies body under scheme as the provider signs it, with the event header the
// provider sends (which the signature does not cover).
func signed(t *testing.T, scheme, event, body string) webhook.Proof {
	t.Helper()
	mac := hexMAC(hookSecret, body)
	var h = hdr()
	switch scheme {
	case webhook.SchemeGitHub:
		h = hdr("X-Hub-Signature-256", "sha256="+mac, "X-GitHub-Event", event)
	case webhook.SchemeGitea:
		h = hdr("X-Gitea-Signature", mac, "X-Gitea-Event", event)
	case webhook.SchemeForgejo:
		h = hdr("X-Forgejo-Signature", mac, "X-Forgejo-Event", event)
	case webhook.SchemeBitbucket:
		h = hdr("X-Hub-Signature", "sha256="+mac, "X-Event-Key", event)
	}
	p, err := verify(t, scheme, h, body, sec(hookSecret))
	if err != nil {
		t.Fatalf("%s %s: %v", scheme, event, err)
	}
	return p
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Per provider and event kind, the provider-set time a signed body carries, or none (the
// marker stays permanent), as the tables in docs/providers say.
func TestBodyTimePerProviderAndEventKind(t *testing.T) {
	for _, c := range []struct {
		scheme, event, file string
		want                time.Time
		field               string
	}{
		{webhook.SchemeGitHub, "push", "github-push.json", at("2026-07-01T11:58:00Z"), "repository.pushed_at"},
		{webhook.SchemeGitHub, "pull_request", "github-pull_request-synchronize.json", at("2026-07-01T11:57:30Z"), "pull_request.updated_at"},
		{webhook.SchemeGitHub, "pull_request", "github-pull_request-opened.json", at("2026-07-01T11:50:00Z"), "pull_request.updated_at"},
		{webhook.SchemeGitea, "pull_request", "gitea-pull_request-opened.json", at("2026-07-01T11:50:00Z"), "pull_request.created_at"},
		{webhook.SchemeForgejo, "pull_request", "gitea-pull_request-opened.json", at("2026-07-01T11:50:00Z"), "pull_request.created_at"},
		{webhook.SchemeGitea, "push", "gitea-push.json", time.Time{}, ""},
		{webhook.SchemeForgejo, "push", "gitea-push.json", time.Time{}, ""},
		{webhook.SchemeGitea, "pull_request", "gitea-pull_request-synchronized.json", time.Time{}, ""},
		{webhook.SchemeBitbucket, "repo:push", "bitbucket-cloud-push.json", time.Time{}, ""},
		{webhook.SchemeBitbucket, "pullrequest:updated", "bitbucket-cloud-pullrequest-updated.json", time.Time{}, ""},
		{webhook.SchemeBitbucket, "pullrequest:created", "bitbucket-cloud-pullrequest-updated.json", time.Time{}, ""},
		{webhook.SchemeBitbucket, "repo:refs_changed", "bitbucket-dc-refs-changed.json", at("2026-07-01T11:57:00Z"), "date"},
		{webhook.SchemeBitbucket, "pr:from_ref_updated", "bitbucket-dc-pr-from-ref-updated.json", at("2026-07-01T11:57:30Z"), "date"},
	} {
		p := signed(t, c.scheme, c.event, fixture(t, c.file))
		if !p.BodyAt.Equal(c.want) || p.BodyTimeField != c.field || !p.SignedAt.IsZero() {
			t.Errorf("%s %s (%s): body time %v from %q, want %v from %q", c.scheme, c.event, c.file, p.BodyAt, p.BodyTimeField, c.want, c.field)
		}
	}
}

// Commit timestamps are chosen by whoever makes the commit: the GitHub push fixture's commits
// are dated 2001 and 2099, and neither moves the body time, nor does the Bitbucket Cloud push's
// commit date make that push bounded.
func TestCommitTimestampsNeverCount(t *testing.T) {
	body := fixture(t, "github-push.json")
	p := signed(t, webhook.SchemeGitHub, "push", body)
	if !p.BodyAt.Equal(at("2026-07-01T11:58:00Z")) {
		t.Fatalf("body time %v", p.BodyAt)
	}
	// Without the provider's pushed_at, the commit dates do not stand in for it.
	noPushed := strings.Replace(body, `"pushed_at": 1782907080`, `"pushed_at": null`, 1)
	if p := signed(t, webhook.SchemeGitHub, "push", noPushed); !p.BodyAt.IsZero() {
		t.Fatalf("a push without pushed_at got the body time %v from %s", p.BodyAt, p.BodyTimeField)
	}
}

// The time is read from the body alone: the same body under any event header gets the same
// time, so relabelling a captured body can neither find a fresher field nor make its marker
// permanent.
func TestBodyTimeIgnoresTheUnsignedEventHeader(t *testing.T) {
	for _, c := range []struct{ scheme, file string }{
		{webhook.SchemeGitHub, "github-pull_request-synchronize.json"},
		{webhook.SchemeGitHub, "github-push.json"},
		{webhook.SchemeBitbucket, "bitbucket-dc-refs-changed.json"},
		{webhook.SchemeBitbucket, "bitbucket-cloud-pullrequest-updated.json"},
		{webhook.SchemeGitea, "gitea-pull_request-opened.json"},
	} {
		body := fixture(t, c.file)
		var first webhook.Proof
		for i, event := range []string{"push", "pull_request", "repo:push", "pullrequest:created", "pr:opened", "ping", ""} {
			p := signed(t, c.scheme, event, body)
			if i == 0 {
				first = p
			} else if !p.BodyAt.Equal(first.BodyAt) || p.BodyTimeField != first.BodyTimeField {
				t.Errorf("%s as %q: %v from %q, as push: %v from %q", c.file, event, p.BodyAt, p.BodyTimeField, first.BodyAt, first.BodyTimeField)
			}
		}
	}
}

// A synchronize whose pull request time did not move still gets the push to its head: the
// later of the two provider-set times.
func TestGitHubPullRequestTakesTheLaterProviderTime(t *testing.T) {
	body := strings.Replace(fixture(t, "github-pull_request-synchronize.json"), `"updated_at": "2026-07-01T11:57:30Z"`, `"updated_at": "2026-06-21T09:00:00Z"`, 1)
	p := signed(t, webhook.SchemeGitHub, "pull_request", body)
	if !p.BodyAt.Equal(at("2026-07-01T11:57:29Z")) || p.BodyTimeField != "pull_request.head.repo.pushed_at" {
		t.Fatalf("body time %v from %q", p.BodyAt, p.BodyTimeField)
	}
	// A fork that was deleted leaves head.repo null: updated_at alone.
	gone := strings.Replace(fixture(t, "github-pull_request-opened.json"), `"repo": {"id": 9999, "name": "app", "full_name": "octocat/app", "pushed_at": "2026-06-01T08:00:00Z"}`, `"repo": null`, 1)
	if p := signed(t, webhook.SchemeGitHub, "pull_request", gone); !p.BodyAt.Equal(at("2026-07-01T11:50:00Z")) {
		t.Fatalf("deleted fork: %v", p.BodyAt)
	}
}

// A time that is not a time (malformed, another type, out of range) is no time: the marker
// stays permanent rather than taking a guess.
func TestMalformedBodyTimesAreNone(t *testing.T) {
	body := fixture(t, "github-push.json")
	for _, v := range []string{`"yesterday"`, `1.5e9`, `-5`, `99999999999999999`, `true`, `{"t":1}`, `"2026-07-01"`} {
		b := strings.Replace(body, `"pushed_at": 1782907080`, `"pushed_at": `+v, 1)
		if p := signed(t, webhook.SchemeGitHub, "push", b); !p.BodyAt.IsZero() {
			t.Errorf("pushed_at %s: body time %v", v, p.BodyAt)
		}
	}
	// The documented string form is read too.
	b := strings.Replace(body, `"pushed_at": 1782907080`, `"pushed_at": "2026-07-01T11:58:00Z"`, 1)
	if p := signed(t, webhook.SchemeGitHub, "push", b); !p.BodyAt.Equal(at("2026-07-01T11:58:00Z")) {
		t.Errorf("RFC 3339 pushed_at: %v", p.BodyAt)
	}
}

// GitLab's shared token proves nothing about the body, so nothing in it is a signed time.
func TestGitLabTokenBodyCarriesNoTime(t *testing.T) {
	body := fixture(t, "bitbucket-dc-refs-changed.json")
	p, err := verify(t, webhook.SchemeGitLabToken, hdr("X-Gitlab-Token", hookSecret), body, sec(hookSecret))
	if err != nil {
		t.Fatal(err)
	}
	if !p.BodyAt.IsZero() || !p.SignedAt.IsZero() {
		t.Fatalf("gitlab-token proof %+v", p)
	}
}
