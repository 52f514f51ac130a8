package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/wiring"
)

// noCredentials leaves the AWS SDK's default chain nothing to find, without a request to
// anywhere: no variables, empty shared files, no instance metadata.
func noCredentials(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "", "AWS_CONFIG_FILE": empty, "AWS_SHARED_CREDENTIALS_FILE": empty,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_REGION": "eu-west-1", "AMISS_S3_ENDPOINT": "http://127.0.0.1:1"} {
		t.Setenv(k, v)
	}
}

// An operator's command on the S3 ledger, or one queueing on SQS, without AWS credentials
// says so, with how to sign in and the policy to sign in as, before any request is sent.
func TestMissingCredentialsAreNamedWithTheRemedy(t *testing.T) {
	noCredentials(t)
	ctx := context.Background()
	for _, args := range [][]string{
		{"ledger", "stats", "-root", "s3://amiss-ledger/amiss/"},
		{"ledger", "republish", "-root", "s3://amiss-ledger/amiss/", "-abandoned"},
		{"ledger", "republish", "-root", t.TempDir(), "-queue", "https://sqs.eu-west-1.amazonaws.com/123456789012/q", "-abandoned"},
	} {
		err := run(ctx, args, io.Discard, io.Discard)
		if !errors.Is(err, wiring.ErrNoCredentials) {
			t.Errorf("amiss %s: %v, want ErrNoCredentials", strings.Join(args, " "), err)
			continue
		}
		for _, want := range []string{"no AWS credentials", "aws sso login", "AWS_ACCESS_KEY_ID", "docs/deployment.md"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("amiss %s: %v, want it to say %q", strings.Join(args, " "), err, want)
			}
		}
	}
}
