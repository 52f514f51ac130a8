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
// the webhook secrets, the ingress's the publish tokens, and only the cleanup's (catch-up's)
// the hooks' token.
func TestStartReadsOnlyTheFunctionsSecrets(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:HOOK"}]
    repositories: [a/b]
    evaluator: {url: "https://eval.example", secret: {from: "env:EVAL"}}
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "env:TOKEN"}}
    catchup: {hook: repository, id: 7, owner: a/b, token: {from: "env:HOOKS"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for reads, want := range map[SecretSet]string{WebhookSecrets: "env:HOOK", RunnerSecrets: "env:EVAL,env:TOKEN", NoSecrets: "",
		CatchUpSecrets: "env:HOOKS", AllSecrets: "env:HOOK,env:EVAL,env:TOKEN,env:HOOKS"} {
		var got readsOf
		err := resolveSecrets(context.Background(), cfg, &got, reads)
		if strings.Join(got, ",") != want || (want == "") != (err == nil) {
			t.Errorf("set %d read %v (%v), want %s", reads, got, err, want)
		}
	}
}
