// Package wiring builds what the Lambda functions and the local server share from their
// environment: the configuration, the ledger, the queue and the secrets resolver. It is the one
// place that knows the backends; handlers see only the ledger contract.
//
// Environment:
//
//	AMISS_CONFIG            path of the YAML configuration (default amiss.yaml beside the binary)
//	AMISS_LEDGER            file:/mnt/ledger (a FileLedger root, EFS in AWS) or s3://bucket/prefix/
//	AMISS_S3_ENDPOINT       an S3-compatible endpoint (optional; path-style addressing is then used)
//	AMISS_QUEUE_URL         the SQS queue the ingress and cleanup send to (the runner's, for visibility)
//	AMISS_SQS_ENDPOINT      another SQS endpoint (optional: a local run's stand-in queue)
//	AMISS_SECRETS_ENDPOINT  another Secrets Manager endpoint (optional: a local run's stand-in)
//	AMISS_LEASE             the runner's lease window (default 1m; keep it short in tests)
//	AMISS_SECRET_ARNS       the Secrets Manager ARNs the function may read (its role's grant; "none": no ARN)
//	AMISS_DEAD_LETTER_QUEUE_URL  the dead-letter queue the cleanup empties (optional: none locally)
//	AWS_REGION              set by Lambda
//
// The configuration may read more variables through ${NAME} (see package config): the
// template declares those its packaged configuration reads.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// Environment variable names.
const (
	EnvConfig     = "AMISS_CONFIG"
	EnvLedger     = "AMISS_LEDGER"
	EnvS3Endpoint = "AMISS_S3_ENDPOINT"
	EnvQueueURL   = "AMISS_QUEUE_URL"
	EnvSecretARNs = "AMISS_SECRET_ARNS"
	EnvLease      = "AMISS_LEASE"
	// EnvSQSEndpoint and EnvSecretsEndpoint point the clients at stand-ins (a local run).
	EnvSQSEndpoint     = "AMISS_SQS_ENDPOINT"
	EnvSecretsEndpoint = "AMISS_SECRETS_ENDPOINT"
	// EnvDeadLetterQueueURL names the dead-letter queue the cleanup function reads.
	EnvDeadLetterQueueURL = "AMISS_DEAD_LETTER_QUEUE_URL"
)

// Getenv reads the environment (tests replace it).
var Getenv = os.Getenv

// SecretSet says which of the configuration's secrets a process reads.
type SecretSet int

// Secret sets.
const (
	// NoSecrets: none.
	NoSecrets SecretSet = iota
	// WebhookSecrets: the routes' webhook secrets (the ingress function).
	WebhookSecrets
	// RunnerSecrets: the evaluator secrets, publish and read tokens and keys (the runner
	// function).
	RunnerSecrets
	// AllSecrets: every secret (amiss serve, which runs all three).
	AllSecrets
	// CatchUpSecrets: the credentials catch-up reads webhook deliveries with (the cleanup
	// function, which runs catch-up).
	CatchUpSecrets
)

// Reads reports whether a process reading s reads the secret u.
func (s SecretSet) Reads(u config.SecretUse) bool {
	switch s {
	case WebhookSecrets:
		return u.Webhook
	case RunnerSecrets:
		return !u.Webhook && !u.CatchUp
	case CatchUpSecrets:
		return u.CatchUp
	case AllSecrets:
		return true
	}
	return false
}

// Config loads the configuration named by AMISS_CONFIG. An invalid one is an error naming the
// field: the function fails at start rather than at the first request. So is a Secrets Manager
// reference outside AMISS_SECRET_ARNS (when set): the function's role could not read it.
func Config() (*config.Config, error) { return ConfigFor(AllSecrets) }

// ConfigFor loads the configuration as Config does, checking only the secrets in reads
// against AMISS_SECRET_ARNS: each function's variable lists what its own role may read.
func ConfigFor(reads SecretSet) (*config.Config, error) {
	c, err := loadConfig()
	if err != nil {
		return nil, err
	}
	if allowed := Getenv(EnvSecretARNs); allowed != "" {
		if err := checkSecretARNs(c, strings.Split(allowed, ","), reads); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkSecretARNs fails on a secret reference in reads the function may not read.
func checkSecretARNs(c *config.Config, allowed []string, reads SecretSet) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[strings.TrimSpace(a)] = true
	}
	for _, u := range c.SecretUses() {
		arn, isSM := strings.CutPrefix(u.From, "aws-secretsmanager:")
		if !isSM || !reads.Reads(u) {
			continue
		}
		arn, _, _ = strings.Cut(arn, "#")
		if !ok[arn] {
			return fmt.Errorf("%s: %s is not among %s (the function's role cannot read it: add it to the template's %s parameter)", u.Path, arn, EnvSecretARNs, templateParameter(u))
		}
	}
	return nil
}

// templateParameter names the template parameter that grants the secret u.
func templateParameter(u config.SecretUse) string {
	switch {
	case u.Webhook:
		return "ExtraWebhookSecretArns"
	case u.CatchUp:
		return "CatchUpSecretArns"
	}
	return "SecretArns"
}

// ResolveSecrets reads every secret the configuration refers to, once, so that a secret that
// cannot be read stops the process at start instead of failing each request. The error lists
// every secret that failed, each by its field, its route and its source, with the remedy; it
// never holds a secret's value.
func ResolveSecrets(ctx context.Context, c *config.Config, res secrets.Source) error {
	return resolveSecrets(ctx, c, res, AllSecrets)
}

// resolveSecrets reads the secrets in reads as ResolveSecrets does.
func resolveSecrets(ctx context.Context, c *config.Config, res secrets.Source, reads SecretSet) error {
	var errs []error
	for _, u := range c.SecretUses() {
		if reads.Reads(u) {
			errs = append(errs, ResolveSecret(ctx, res, u))
		}
	}
	return errors.Join(errs...)
}

// ResolveSecret reads one secret and drops its value: the error, when it cannot be read,
// names the field, the route and the source, and says what to do.
func ResolveSecret(ctx context.Context, res secrets.Source, u config.SecretUse) error {
	if _, err := res.Get(ctx, u.From); err != nil {
		return fmt.Errorf("%s: route %s: %s from %s cannot be read: %w; %s", u.Path, u.Route, u.What, u.From, err, remedy(u.From))
	}
	return nil
}

// remedy says how to make a secret reference readable.
func remedy(ref string) string {
	kind, rest, _ := strings.Cut(ref, ":")
	switch kind {
	case "env":
		return fmt.Sprintf("set %s in amiss's environment (export %s=...; in Lambda the template must declare it)", rest, rest)
	case "file":
		return "create the file, readable by amiss, holding the secret"
	case "aws-secretsmanager":
		return "check the ARN (and the #key of a JSON secret), that the secret has a value, and that the role may read it (the template's WebhookSecretArn or ExtraWebhookSecretArns for a webhook secret, CatchUpSecretArns for a catch-up credential, SecretArns for the others; SecretsKmsKeyArn for a secret under a customer-managed KMS key)"
	}
	return "use env:NAME, file:PATH or aws-secretsmanager:ARN"
}

func loadConfig() (*config.Config, error) {
	path := Getenv(EnvConfig)
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(filepath.Dir(exe), "amiss.yaml")
	}
	return config.LoadEnv(path, Getenv)
}

// AWS loads the AWS configuration (region and credentials from the default chain).
func AWS(ctx context.Context) (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(ctx)
}

// Ledger opens the ledger AMISS_LEDGER names, with the limits of cfg (see OpenLedger). A
// Lambda cold start only opens (no scan); prepare is for long-lived processes and cleanup. A
// root created with other limits is refused with the differing settings named (see
// LimitsError).
func Ledger(ctx context.Context, cfg *config.Config, prepare bool) (ledger.Ledger, error) {
	return OpenLedger(ctx, Getenv(EnvLedger), LedgerOptions{Config: cfg, Prepare: prepare})
}

// ErrLimitsDiffer: a ledger root records other limits than the configuration asks for.
var ErrLimitsDiffer = errors.New("the ledger root was created with other limits")

// LimitsError explains, setting by setting, why a root created with the limits stored cannot
// be opened with cfg, and what to do; nil when the limits match.
func LimitsError(cfg *config.Config, root string, stored ledger.Limits) error {
	diff := cfg.LimitsMismatch(stored)
	if diff == nil {
		return nil
	}
	return fmt.Errorf("%w: %s\n  %s\nA root keeps the limits it was created with: use another root (a new folder or prefix), or a configuration with the root's values",
		ErrLimitsDiffer, root, strings.Join(diff, "\n  "))
}

// S3Client returns an S3 client for the ledger named spec (for messages): the region and
// credentials from the default chain, AMISS_S3_ENDPOINT for an S3-compatible store. Without a
// region it fails with the remedy, rather than at the first request.
func S3Client(ctx context.Context, spec string) (*s3.Client, error) {
	endpoint := Getenv(EnvS3Endpoint)
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: Getenv("AWS_REGION"), Endpoint: endpoint, PathStyle: endpoint != ""})
	if err != nil {
		return nil, err
	}
	if client.Options().Region == "" {
		return nil, fmt.Errorf("%s: no AWS region: set AWS_REGION to the bucket's region (for example AWS_REGION=eu-west-1), or a region in your AWS profile; for MinIO and other S3-compatible stores any region, such as us-east-1, with %s", spec, EnvS3Endpoint)
	}
	if err := RequireCredentials(ctx, client.Options().Credentials, spec); err != nil {
		return nil, err
	}
	return client, nil
}

// ErrNoCredentials: the default chain found no AWS credentials.
var ErrNoCredentials = errors.New("no AWS credentials")

// RequireCredentials fails with the remedy when the default chain finds no AWS credentials
// for what (a ledger or a queue, for the message), rather than at the first request with the
// SDK's own account of every place it looked. In Lambda the function's role provides them.
func RequireCredentials(ctx context.Context, creds aws.CredentialsProvider, what string) error {
	if creds == nil {
		return fmt.Errorf("%s: %w", what, ErrNoCredentials)
	}
	if _, err := creds.Retrieve(ctx); err != nil {
		return fmt.Errorf("%s: %w (%v). Sign in first: aws sso login --profile NAME with AWS_PROFILE=NAME, or "+
			"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, as a principal allowed what the command does "+
			"(docs/deployment.md, Operator access: the read-only and the republish policies)", what, ErrNoCredentials, err)
	}
	return nil
}

// Duration reads a duration variable (such as AMISS_LEASE=45s), or def when unset.
func Duration(name string, def time.Duration) (time.Duration, error) {
	v := Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive duration", name, v)
	}
	return d, nil
}

// SQSClient returns an SQS client, pointed at AMISS_SQS_ENDPOINT when it is set.
func SQSClient(awsCfg aws.Config) *sqs.Client {
	endpoint := Getenv(EnvSQSEndpoint)
	return sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
}

// SQSQueue returns the SQS queue AMISS_QUEUE_URL names.
func SQSQueue(awsCfg aws.Config) (*queue.SQS, error) {
	url := Getenv(EnvQueueURL)
	if url == "" {
		return nil, errors.New(EnvQueueURL + " is not set")
	}
	return &queue.SQS{Client: SQSClient(awsCfg), QueueURL: url}, nil
}

// DeadLetters returns the dead-letter queue AMISS_DEAD_LETTER_QUEUE_URL names, through the
// SQS client SQSClient returns; nil when the variable is not set.
func DeadLetters(awsCfg aws.Config) *cleanup.SQSDeadLetters {
	url := Getenv(EnvDeadLetterQueueURL)
	if url == "" {
		return nil
	}
	return &cleanup.SQSDeadLetters{Client: SQSClient(awsCfg), QueueURL: url}
}

// Secrets returns a resolver reading Secrets Manager (cached a minute; AMISS_SECRETS_ENDPOINT
// when set), the environment and files.
func Secrets(awsCfg *aws.Config) *secrets.Resolver {
	r := &secrets.Resolver{Getenv: Getenv}
	if awsCfg != nil {
		endpoint := Getenv(EnvSecretsEndpoint)
		r.SecretsManager = secretsmanager.NewFromConfig(*awsCfg, func(o *secretsmanager.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
		})
	}
	return r
}
