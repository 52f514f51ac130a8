package provider_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/webhook"
)

// Every row that receives webhooks names schemes the webhook package verifies, and every row
// that publishes builds a publisher.
func TestTheTableIsWhole(t *testing.T) {
	for _, name := range provider.Senders() {
		p, _ := provider.Sender(name)
		for _, s := range p.Schemes {
			if _, err := webhook.New(s); err != nil {
				t.Errorf("%s: scheme %s: %v", name, s, err)
			}
		}
	}
	for _, name := range provider.Publishers() {
		p, _ := provider.Publishing(name)
		if p.Publisher(provider.Target{BaseURL: "https://example.com", Token: "t", Client: http.DefaultClient}) == nil {
			t.Errorf("%s builds no publisher", name)
		}
	}
	if want := []string{"github", "gitea", "forgejo", "gitlab", "bitbucket", "standard-webhooks"}; !reflect.DeepEqual(provider.Senders(), want) {
		t.Errorf("senders %v, want %v", provider.Senders(), want)
	}
	if want := []string{"github", "github-checks", "gitea", "gitlab", "bitbucket", "log"}; !reflect.DeepEqual(provider.Publishers(), want) {
		t.Errorf("publishers %v, want %v", provider.Publishers(), want)
	}
	if _, ok := provider.Sender(provider.Log); ok {
		t.Error("log receives webhooks")
	}
	if _, ok := provider.Sender(provider.GitHubChecks); ok {
		t.Error("github-checks receives webhooks: GitHub's are received under github")
	}
	if _, err := provider.Extract("sourcehut", http.Header{}, []byte(`{}`)); err == nil {
		t.Error("an unknown provider's webhook was read")
	}
}
