package provider_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
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
	if want := []string{"github", "github-checks", "gitea", "gitlab", "bitbucket", "bitbucket-datacenter", "log"}; !reflect.DeepEqual(provider.Publishers(), want) {
		t.Errorf("publishers %v, want %v", provider.Publishers(), want)
	}
	if _, ok := provider.Sender(provider.Log); ok {
		t.Error("log receives webhooks")
	}
	if _, ok := provider.Sender(provider.GitHubChecks); ok {
		t.Error("github-checks receives webhooks: GitHub's are received under github")
	}
	if _, ok := provider.Sender(provider.BitbucketDataCenter); ok {
		t.Error("bitbucket-datacenter receives webhooks: Data Center's are received under bitbucket")
	}
	if _, err := provider.Extract("sourcehut", http.Header{}, []byte(`{}`)); err == nil {
		t.Error("an unknown provider's webhook was read")
	}
}

// Bitbucket's webhooks come from two APIs, each a publisher's: its changes name one of them,
// and its reader reads the one its target speaks.
func TestBitbucketWebhooksComeFromCloudAndDataCenter(t *testing.T) {
	bb, _ := provider.Sender(provider.Bitbucket)
	for _, api := range []string{change.BitbucketCloud, change.BitbucketDataCenter} {
		p, ok := provider.Lookup(api)
		if !ok || p.API != api || p.Publisher == nil || !bb.Receives(api) {
			t.Errorf("the API %q is no publisher's that bitbucket receives from", api)
		}
	}
	if bb.Receives(provider.GitHub) {
		t.Error("bitbucket receives GitHub's webhooks")
	}
	cloud := bb.Reader(provider.Target{API: provider.Bitbucket, BaseURL: "https://api.bitbucket.org", Token: "t"})
	dc := bb.Reader(provider.Target{API: provider.BitbucketDataCenter, BaseURL: "https://bitbucket.example", Token: "t"})
	if _, ok := cloud.(*bitbucket.Client); !ok {
		t.Errorf("a Cloud target reads with %T", cloud)
	}
	if _, ok := dc.(*bitbucketdc.Client); !ok {
		t.Errorf("a Data Center target reads with %T", dc)
	}
}
