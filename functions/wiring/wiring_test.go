package wiring_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
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
	demoCfg, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	demo, err := wiring.Routes(demoCfg, fixedSecrets{}, nil, nil)(context.Background(), "demo")
	if err != nil || demo.Evaluator == nil || demo.Publisher == nil || demo.Context != "amiss/demo" {
		t.Fatalf("demo: %+v %v", demo, err)
	}
	cfg, err := config.LoadEnv("../../examples/github.yaml", func(k string) string { return map[string]string{"AMISS_REPOSITORIES": "acme/*"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	routes := wiring.Routes(cfg, fixedSecrets{"env:AMISS_GITHUB_TOKEN": "t"}, nil, nil)
	if gh, err := routes(context.Background(), "github"); err != nil || gh.Context != "amiss/local" {
		t.Fatalf("github: %+v %v", gh, err)
	}
	if _, err := wiring.Routes(cfg, fixedSecrets{}, nil, nil)(context.Background(), "github"); err == nil {
		t.Fatal("a route whose token is missing was built")
	}
	if _, err := routes(context.Background(), "nope"); err == nil {
		t.Fatal("an unknown route was built")
	}
}

// A catch-up credential that cannot be read is named by its field at start, as every secret.
func TestACatchUpCredentialIsResolvedAtStart(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  lab:
    provider: gitlab
    secrets: [{id: k, from: "env:AMISS_TEST_SET"}]
    repositories: [acme/app]
    publish: {provider: gitlab, base_url: "https://gitlab.example", token: {from: "env:AMISS_TEST_SET"}}
    catchup: {hook: project, id: 17, owner: acme/app, token: {from: "env:AMISS_TEST_HOOKS"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	env(t, map[string]string{"AMISS_TEST_SET": "v"})
	err = wiring.ResolveSecrets(context.Background(), cfg, wiring.Secrets(nil))
	if want := "routes.lab.catchup.token.from: route lab: catch-up token from env:AMISS_TEST_HOOKS cannot be read"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a missing catch-up token: %v, want %q", err, want)
	}
	env(t, map[string]string{"AMISS_TEST_SET": "v", "AMISS_TEST_HOOKS": "glpat"})
	if err := wiring.ResolveSecrets(context.Background(), cfg, wiring.Secrets(nil)); err != nil {
		t.Fatalf("readable secrets: %v", err)
	}
}

// Every secret is read once at start; each one that cannot be read is named by its field,
// its route and its source, with the remedy, and no secret value is ever in the error.
func TestSecretsAreResolvedAtStart(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  hooks:
    provider: github
    secrets: [{id: current, from: "env:AMISS_TEST_MISSING"}, {id: next, from: "env:AMISS_TEST_SET"}]
    repositories: [acme/app]
    publish: {provider: github, base_url: "https://api.github.com", token: {from: "file:/nonexistent/token"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	env(t, map[string]string{"AMISS_TEST_SET": "the-secret-value"})
	err = wiring.ResolveSecrets(context.Background(), cfg, wiring.Secrets(nil))
	if err == nil {
		t.Fatal("missing secrets resolved")
	}
	msg := err.Error()
	for _, want := range []string{
		"routes.hooks.secrets[0].from: route hooks: webhook secret current from env:AMISS_TEST_MISSING cannot be read",
		"export AMISS_TEST_MISSING=",
		"routes.hooks.publish.token.from: route hooks: publish token from file:/nonexistent/token cannot be read",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "the-secret-value") || strings.Contains(msg, "secrets[1]") {
		t.Errorf("error mentions the secret that was read:\n%s", msg)
	}
	env(t, map[string]string{"AMISS_TEST_SET": "v", "AMISS_TEST_MISSING": "w"})
	p := filepath.Join(t.TempDir(), "token")
	os.WriteFile(p, []byte("tok\n"), 0o600)
	cfg.Route("hooks").Publish.Token.From = "file:" + p
	if err := wiring.ResolveSecrets(context.Background(), cfg, wiring.Secrets(nil)); err != nil {
		t.Fatalf("readable secrets: %v", err)
	}
}

// A root made with other limits is refused with each differing setting named in the
// configuration's terms and a remedy, not with Go structs.
func TestLedgerWithOtherLimitsIsExplained(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	l, err := localfs.Prepare(context.Background(), dir, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	cfg, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env(t, map[string]string{wiring.EnvLedger: "file:" + dir})
	_, err = wiring.Ledger(context.Background(), cfg, false)
	if !errors.Is(err, wiring.ErrLimitsDiffer) {
		t.Fatalf("open with other limits: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "controller.record_cap: the root records 1000000, the configuration asks for 100000") ||
		!strings.Contains(msg, "use another root") || strings.Contains(msg, "{") {
		t.Fatalf("message:\n%s", msg)
	}
}

// An S3 ledger without a region fails at once, saying which variable to set.
func TestS3LedgerWithoutARegion(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	cfg, err := config.Load("../../examples/amiss.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env(t, map[string]string{wiring.EnvLedger: "s3://bucket/prefix/"})
	_, err = wiring.Ledger(context.Background(), cfg, false)
	if err == nil || !strings.Contains(err.Error(), "no AWS region: set AWS_REGION") {
		t.Fatalf("no region: %v", err)
	}
}

// AMISS_SQS_ENDPOINT and AMISS_SECRETS_ENDPOINT point the clients at local stand-ins.
func TestEndpointOverrides(t *testing.T) {
	var targets []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targets = append(targets, r.Header.Get("X-Amz-Target"))
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch r.Header.Get("X-Amz-Target") {
		case "secretsmanager.GetSecretValue":
			w.Write([]byte(`{"ARN":"arn:aws:secretsmanager:us-east-1:000000000000:secret:s","Name":"s","SecretString":"from-the-stand-in"}`))
		default:
			w.Write([]byte(`{"MessageId":"m1","MD5OfMessageBody":"x"}`))
		}
	}))
	defer srv.Close()
	env(t, map[string]string{wiring.EnvSQSEndpoint: srv.URL, wiring.EnvSecretsEndpoint: srv.URL, wiring.EnvQueueURL: srv.URL + "/000000000000/q"})
	awsCfg := awsConfigForTest()
	awsCfg.Credentials = credentials.NewStaticCredentialsProvider("k", "s", "")
	v, err := wiring.Secrets(&awsCfg).Get(context.Background(), "aws-secretsmanager:arn:aws:secretsmanager:us-east-1:000000000000:secret:s")
	if err != nil || v != "from-the-stand-in" {
		t.Fatalf("secret through the stand-in: %q %v", v, err)
	}
	q, err := wiring.SQSQueue(awsCfg)
	if err != nil {
		t.Fatal(err)
	}
	q.Send(context.Background(), queue.Message{Key: ledger.Key{1}, Binding: ledger.Digest{2}})
	if strings.Join(targets, ",") != "secretsmanager.GetSecretValue,AmazonSQS.SendMessage" {
		t.Fatalf("calls that reached the stand-in: %q", targets)
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

// One parser reads a ledger's location for every caller: AMISS_LEDGER must name its backend,
// an operator's -root may be a bare folder.
func TestParseLocation(t *testing.T) {
	for _, c := range []struct {
		spec    string
		folders bool
		want    wiring.Location
		bad     bool
	}{
		{spec: "file:/mnt/ledger", want: wiring.Location{Dir: "/mnt/ledger"}},
		{spec: "s3://b/p", want: wiring.Location{Bucket: "b", Prefix: "p/"}},
		{spec: "s3://b/p/", folders: true, want: wiring.Location{Bucket: "b", Prefix: "p/"}},
		{spec: "s3://b", want: wiring.Location{Bucket: "b"}},
		{spec: "var/ledger", folders: true, want: wiring.Location{Dir: "var/ledger"}},
		{spec: "var/ledger", bad: true},
		{spec: "s3://", folders: true, bad: true},
		{spec: "", folders: true, bad: true},
	} {
		got, err := wiring.ParseLocation(c.spec, "-root", c.folders)
		c.want.Spec = c.spec
		if c.bad != (err != nil) || (!c.bad && got != c.want) {
			t.Errorf("ParseLocation(%q, folders %v) = %+v, %v", c.spec, c.folders, got, err)
		}
	}
}

// An operator's command opens a root with the limits it records, and never creates one.
func TestOpenLedgerWithTheRecordedLimits(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	if _, err := wiring.OpenLedger(ctx, dir, wiring.LedgerOptions{Folders: true}); !errors.Is(err, ledger.ErrRootMismatch) {
		t.Fatalf("a missing root without a configuration: %v", err)
	}
	limits := ledger.DefaultLimits()
	limits.RecordCap = 7
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: limits, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	opened, err := wiring.OpenLedger(ctx, "file:"+dir, wiring.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if st, err := opened.Stats(ctx); err != nil || st.Limits.RecordCap != 7 {
		t.Fatalf("stats %+v, %v", st.Limits, err)
	}
}

// hangingSecrets never answers a read before the caller gives up.
type hangingSecrets struct{}

func (hangingSecrets) Get(ctx context.Context, ref string) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// A route lookup reads its secrets within the lookup's context (the runner's invocation), not
// the process's: a read that hangs ends when the caller's time does, with the cause.
func TestRouteLookupReadsSecretsWithinItsContext(t *testing.T) {
	cfg, err := config.LoadEnv("../../examples/github.yaml", func(k string) string { return map[string]string{"AMISS_REPOSITORIES": "acme/*"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := wiring.Routes(cfg, hangingSecrets{}, nil, nil)(ctx, "github"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "publish token") {
			t.Fatalf("lookup whose secret read hung: %v, want the deadline, naming the secret", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup still waits for its secret 5 s after its context ended")
	}
}

// A route reads what its webhooks lack (Route.Inputs) with its publisher's credential when it
// publishes to the API its webhooks come from (a GitHub App's tokens, or the publish token);
// a route publishing to the log has nothing to read with (the rules that need a read fail
// closed), unless a read block says where to read.
func TestARouteReadsWithThePublishersCredentialOrItsReadBlock(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	cfg, err := config.LoadEnv("../../examples/github-app.yaml", func(k string) string {
		return map[string]string{"AMISS_REPOSITORIES": "acme/*", "AMISS_APP_ID": "123", "AMISS_APP_KEY_FILE": "/app.pem"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	app, err := wiring.Routes(cfg, fixedSecrets{"file:/app.pem": pemKey}, nil, nil)(context.Background(), "github")
	if err != nil || app.Inputs == nil {
		t.Fatalf("an App's route: %+v %v", app, err)
	}
	cfg, err = config.LoadEnv("../../examples/github.yaml", func(k string) string { return map[string]string{"AMISS_REPOSITORIES": "acme/*"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if gh, err := wiring.Routes(cfg, fixedSecrets{"env:AMISS_GITHUB_TOKEN": "t"}, nil, nil)(context.Background(), "github"); err != nil || gh.Inputs == nil {
		t.Fatalf("a token's route: %+v %v", gh, err)
	}
	logged := `
routes:
  r:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/app"]
    rules: {forbidden_paths: ["secrets/**"]}
`
	cfg, err = config.Parse([]byte(logged))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := wiring.Routes(cfg, fixedSecrets{}, nil, nil)(context.Background(), "r"); err != nil || r.Inputs != nil {
		t.Fatalf("a route publishing to the log: %+v %v", r, err)
	}
	cfg, err = config.Parse([]byte(logged + "    read: {base_url: 'https://api.github.com', token: {from: 'env:R'}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := wiring.Routes(cfg, fixedSecrets{"env:R": "r"}, nil, nil)(context.Background(), "r"); err != nil || r.Inputs == nil {
		t.Fatalf("a route with a read block: %+v %v", r, err)
	}
}

// A Bitbucket route reads the API it publishes to or its read block names: Bitbucket Cloud's
// with the bitbucket publisher, a Data Center server's with bitbucket-datacenter's, each with
// its base URL and token.
func TestABitbucketRouteReadsTheAPIItPublishesTo(t *testing.T) {
	const route = `
routes:
  r:
    provider: bitbucket
    secrets: [{id: a, from: "env:X"}]
    repositories: ["PROJ/app"]
    rules: {forbidden_paths: ["secrets/**"]}
`
	for name, c := range map[string]struct {
		yaml string
		want any
	}{
		"Bitbucket Cloud": {route + "    publish: {provider: bitbucket, base_url: 'https://api.bitbucket.org', token: {from: 'env:T'}}\n", &bitbucket.Client{}},
		"a Data Center server": {route + "    publish: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:T'}}\n",
			&bitbucketdc.Client{}},
		"a Data Center read block": {route + "    read: {provider: bitbucket-datacenter, base_url: 'https://bitbucket.example', token: {from: 'env:T'}}\n",
			&bitbucketdc.Client{}},
	} {
		cfg, err := config.Parse([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := wiring.Routes(cfg, fixedSecrets{"env:T": "t"}, nil, nil)(context.Background(), "r")
		if err != nil || reflect.TypeOf(r.Inputs) != reflect.TypeOf(c.want) {
			t.Errorf("%s: reads with %T (%v), want %T", name, r.Inputs, err, c.want)
		}
	}
}
