package wiring

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
)

// readsOf records the secrets read.
type readsOf []string

func (r *readsOf) Get(_ context.Context, ref string) (string, error) {
	*r = append(*r, ref)
	return "", errors.New("denied")
}

// At start a function reads the secrets it reads and no other: the runner's role cannot read
// the webhook secrets, the ingress's the publish tokens.
func TestStartReadsOnlyTheFunctionsSecrets(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:HOOK"}]
    repositories: [a/b]
    evaluator: {url: "https://eval.example", secret: {from: "env:EVAL"}}
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "env:TOKEN"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for reads, want := range map[SecretSet]string{WebhookSecrets: "env:HOOK", RunnerSecrets: "env:EVAL,env:TOKEN", NoSecrets: "",
		AllSecrets: "env:HOOK,env:EVAL,env:TOKEN"} {
		var got readsOf
		err := resolveSecrets(context.Background(), cfg, &got, reads)
		if strings.Join(got, ",") != want || (want == "") != (err == nil) {
			t.Errorf("set %d read %v (%v), want %s", reads, got, err, want)
		}
	}
}
