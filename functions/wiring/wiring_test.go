package wiring_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func env(t *testing.T, m map[string]string) {
	old := wiring.Getenv
	wiring.Getenv = func(k string) string { return m[k] }
	t.Cleanup(func() { wiring.Getenv = old })
}

func TestInvalidConfigurationFailsAtStart(t *testing.T) {
	p := filepath.Join(t.TempDir(), "amiss.yaml")
	os.WriteFile(p, []byte("routes:\n  r:\n    provider: github\n    secrets: [{id: a, from: 'env:X'}]\n"), 0o600)
	env(t, map[string]string{wiring.EnvConfig: p})
	_, err := wiring.Config()
	if err == nil || !strings.Contains(err.Error(), "routes.r.repositories") {
		t.Fatalf("invalid configuration: %v", err)
	}
}

func TestLedgerFromTheEnvironment(t *testing.T) {
	cfg, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "root")
	env(t, map[string]string{wiring.EnvLedger: "file:" + dir})
	l, err := wiring.Ledger(context.Background(), cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, bad := range []string{"", "ftp://x", "s3://"} {
		env(t, map[string]string{wiring.EnvLedger: bad})
		if _, err := wiring.Ledger(context.Background(), cfg, false); err == nil {
			t.Fatalf("ledger %q accepted", bad)
		}
	}
	env(t, map[string]string{})
	if _, err := wiring.SQSQueue(awsConfigForTest()); err == nil {
		t.Fatal("a queue without a URL")
	}
}

type fixedSecrets map[string]string

func (f fixedSecrets) Get(ctx context.Context, ref string) (string, error) {
	if v, ok := f[ref]; ok {
		return v, nil
	}
	return "", os.ErrNotExist
}

func TestRoutesBuildEvaluatorsAndPublishers(t *testing.T) {
	cfg, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := wiring.Routes(cfg, fixedSecrets{"env:AMISS_GITHUB_TOKEN": "t"}, nil, nil)
	demo, err := routes("demo")
	if err != nil || demo.Evaluator == nil || demo.Publisher == nil || demo.Context != "amiss/demo" {
		t.Fatalf("demo: %+v %v", demo, err)
	}
	if gh, err := routes("acme-github"); err != nil || gh.Context != "amiss/verdict" {
		t.Fatalf("acme-github: %+v %v", gh, err)
	}
	if _, err := wiring.Routes(cfg, fixedSecrets{}, nil, nil)("acme-github"); err == nil {
		t.Fatal("a route whose token is missing was built")
	}
	if _, err := routes("nope"); err == nil {
		t.Fatal("an unknown route was built")
	}
}

func TestSecretReferencesMustBeGranted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "amiss.yaml")
	arn := "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hooks-AbCdEf"
	os.WriteFile(p, []byte("routes:\n  r:\n    provider: github\n    secrets: [{id: a, from: 'aws-secretsmanager:"+arn+"#github'}]\n    repositories: [a/b]\n"), 0o600)
	env(t, map[string]string{wiring.EnvConfig: p, wiring.EnvSecretARNs: arn + ",arn:aws:secretsmanager:eu-west-1:123456789012:secret:other"})
	if _, err := wiring.Config(); err != nil {
		t.Fatalf("granted secret refused: %v", err)
	}
	env(t, map[string]string{wiring.EnvConfig: p, wiring.EnvSecretARNs: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:other"})
	if _, err := wiring.Config(); err == nil || !strings.Contains(err.Error(), "routes.r.secrets[0].from") {
		t.Fatalf("ungranted secret: %v", err)
	}
}
