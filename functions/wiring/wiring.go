// Package wiring builds what the Lambda functions and the local server share from their
// environment: the configuration, the ledger, the queue and the secrets resolver. It is the one
// place that knows the backends; handlers see only the ledger contract.
//
// Environment:
//
//	AMISS_CONFIG       path of the YAML configuration (default amiss.yaml beside the binary)
//	AMISS_LEDGER       file:/mnt/ledger (a FileLedger root, EFS in AWS) or s3://bucket/prefix/
//	AMISS_S3_ENDPOINT  an S3-compatible endpoint (optional; path-style addressing is then used)
//	AMISS_QUEUE_URL    the SQS queue the ingress and cleanup send to (the runner's, for visibility)
//	AMISS_LEASE        the runner's lease window (default 1m; keep it short in tests)
//	AMISS_SECRET_ARNS  the Secrets Manager ARNs the functions may read (the template's IAM grant)
//	AWS_REGION         set by Lambda
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
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
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
)

// Getenv reads the environment (tests replace it).
var Getenv = os.Getenv

// Config loads the configuration named by AMISS_CONFIG. An invalid one is an error naming the
// field: the function fails at start rather than at the first request. So is a Secrets Manager
// reference outside AMISS_SECRET_ARNS (when set): the function's role could not read it.
func Config() (*config.Config, error) {
	c, err := loadConfig()
	if err != nil {
		return nil, err
	}
	if allowed := Getenv(EnvSecretARNs); allowed != "" {
		if err := checkSecretARNs(c, strings.Split(allowed, ",")); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkSecretARNs fails on a secret reference the function may not read.
func checkSecretARNs(c *config.Config, allowed []string) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[strings.TrimSpace(a)] = true
	}
	check := func(field, ref string) error {
		arn, isSM := strings.CutPrefix(ref, "aws-secretsmanager:")
		if !isSM {
			return nil
		}
		arn, _, _ = strings.Cut(arn, "#")
		if !ok[arn] {
			return fmt.Errorf("%s: %s is not among %s (the function's role cannot read it)", field, arn, EnvSecretARNs)
		}
		return nil
	}
	for _, name := range c.RouteNames() {
		r := c.Route(name)
		for i, s := range r.Secrets {
			if err := check(fmt.Sprintf("routes.%s.secrets[%d].from", name, i), s.From); err != nil {
				return err
			}
		}
		if err := check("routes."+name+".publish.token.from", r.Publish.Token.From); err != nil {
			return err
		}
		if err := check("routes."+name+".evaluator.secret.from", r.Evaluator.Secret.From); err != nil {
			return err
		}
	}
	return nil
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
	return config.Load(path)
}

// AWS loads the AWS configuration (region and credentials from the default chain).
func AWS(ctx context.Context) (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(ctx)
}

// Ledger opens the ledger AMISS_LEDGER names, with the limits of cfg. A Lambda cold start
// only opens (no scan); prepare is for long-lived processes and cleanup.
func Ledger(ctx context.Context, cfg *config.Config, prepare bool) (ledger.Ledger, error) {
	spec := Getenv(EnvLedger)
	switch {
	case strings.HasPrefix(spec, "file:"):
		dir := strings.TrimPrefix(spec, "file:")
		c := localfs.Config{Limits: cfg.Limits(), Create: true}
		if prepare {
			return localfs.Prepare(ctx, dir, c)
		}
		return localfs.Open(ctx, dir, c)
	case strings.HasPrefix(spec, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(spec, "s3://"), "/")
		if bucket == "" {
			return nil, fmt.Errorf("%s: %q names no bucket", EnvLedger, spec)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		endpoint := Getenv(EnvS3Endpoint)
		client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: Getenv("AWS_REGION"), Endpoint: endpoint,
			PathStyle: endpoint != ""})
		if err != nil {
			return nil, err
		}
		return objstore.Open(ctx, objstore.Config{Client: client, Bucket: bucket, Prefix: prefix, Limits: cfg.Limits(), Create: true})
	case spec == "":
		return nil, errors.New(EnvLedger + " is not set (file:/path or s3://bucket/prefix/)")
	}
	return nil, fmt.Errorf("%s: %q is neither file:/path nor s3://bucket/prefix/", EnvLedger, spec)
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

// SQSQueue returns the SQS queue AMISS_QUEUE_URL names.
func SQSQueue(awsCfg aws.Config) (*queue.SQS, error) {
	url := Getenv(EnvQueueURL)
	if url == "" {
		return nil, errors.New(EnvQueueURL + " is not set")
	}
	return &queue.SQS{Client: sqs.NewFromConfig(awsCfg), QueueURL: url}, nil
}

// Secrets returns a resolver reading Secrets Manager (cached a minute), the environment and
// files.
func Secrets(awsCfg *aws.Config) *secrets.Resolver {
	r := &secrets.Resolver{Getenv: Getenv}
	if awsCfg != nil {
		r.SecretsManager = secretsmanager.NewFromConfig(*awsCfg)
	}
	return r
}
