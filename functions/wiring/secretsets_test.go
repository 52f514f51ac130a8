package wiring_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/amiss-ci/amiss/functions/wiring"
)

const (
	hookARN    = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-AbCdEf"
	tokenARN   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:token-AbCdEf"
	catchUpARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hooks-AbCdEf"
)

// Each function checks only the secrets it reads against its own AMISS_SECRET_ARNS (its
// role's grant): the ingress the webhook secrets, the runner the evaluator secrets and publish
// tokens, the cleanup catch-up's credentials. A secret it reads outside its grant is refused
// at start, naming the template parameter that grants it.
func TestEachFunctionChecksTheSecretsItReads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "amiss.yaml")
	os.WriteFile(p, []byte(`routes:
  r:
    provider: github
    secrets: [{id: a, from: "aws-secretsmanager:`+hookARN+`"}]
    repositories: [a/b]
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "aws-secretsmanager:`+tokenARN+`#token"}}
    catchup: {hook: repository, id: 7, owner: a/b, token: {from: "aws-secretsmanager:`+catchUpARN+`"}}
`), 0o600)
	for _, c := range []struct {
		name    string
		reads   wiring.SecretSet
		granted string
		refused string // a part of the error; empty: accepted
	}{
		{"ingress with the webhook secret", wiring.WebhookSecrets, hookARN, ""},
		{"ingress without it", wiring.WebhookSecrets, tokenARN, "routes.r.secrets[0].from: " + hookARN + " is not among AMISS_SECRET_ARNS (the function's role cannot read it: add it to the template's ExtraWebhookSecretArns parameter)"},
		{"runner with the token", wiring.RunnerSecrets, tokenARN, ""},
		{"runner granted none", wiring.RunnerSecrets, "none", "routes.r.publish.token.from: " + tokenARN + " is not among AMISS_SECRET_ARNS (the function's role cannot read it: add it to the template's SecretArns parameter)"},
		{"cleanup with the catch-up token", wiring.CatchUpSecrets, catchUpARN, ""},
		{"cleanup granted none", wiring.CatchUpSecrets, "none", "routes.r.catchup.token.from: " + catchUpARN + " is not among AMISS_SECRET_ARNS (the function's role cannot read it: add it to the template's CatchUpSecretArns parameter)"},
		{"a function reading none", wiring.NoSecrets, "none", ""},
	} {
		env(t, map[string]string{wiring.EnvConfig: p, wiring.EnvSecretARNs: c.granted})
		_, err := wiring.ConfigFor(c.reads)
		if c.refused == "" && err != nil || c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)) {
			t.Errorf("%s: %v, want refused: %q", c.name, err, c.refused)
		}
	}
}

// AMISS_DEAD_LETTER_QUEUE_URL gives the cleanup its dead-letter queue, reached through the SQS
// client (and AMISS_SQS_ENDPOINT); without it there is none.
func TestDeadLettersFromTheEnvironment(t *testing.T) {
	env(t, map[string]string{})
	if dl := wiring.DeadLetters(awsConfigForTest()); dl != nil {
		t.Fatalf("a dead-letter queue without a URL: %+v", dl)
	}
	var target, url string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target = r.Header.Get("X-Amz-Target")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write([]byte(`{"Messages":[]}`))
	}))
	defer srv.Close()
	url = srv.URL + "/000000000000/amiss-dead-letters"
	env(t, map[string]string{wiring.EnvSQSEndpoint: srv.URL, wiring.EnvDeadLetterQueueURL: url})
	awsCfg := awsConfigForTest()
	awsCfg.Credentials = credentials.NewStaticCredentialsProvider("k", "s", "")
	dl := wiring.DeadLetters(awsCfg)
	if dl == nil || dl.QueueURL != url {
		t.Fatalf("%+v", dl)
	}
	if got, err := dl.Receive(context.Background()); err != nil || len(got) != 0 || target != "AmazonSQS.ReceiveMessage" {
		t.Fatalf("receive through the stand-in: %v %v (target %q)", got, err, target)
	}
}
