package secrets_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/amiss-ci/amiss/functions/secrets"
)

type fakeSM struct {
	values map[string]string
	calls  int
}

func (f *fakeSM) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.calls++
	v, ok := f.values[aws.ToString(in.SecretId)]
	if !ok {
		return nil, errors.New("ResourceNotFoundException")
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

func TestEnvAndFile(t *testing.T) {
	r := &secrets.Resolver{Getenv: func(k string) string { return map[string]string{"A": "from-env"}[k] }}
	ctx := context.Background()
	if v, err := r.Get(ctx, "env:A"); err != nil || v != "from-env" {
		t.Fatalf("env: %q %v", v, err)
	}
	if _, err := r.Get(ctx, "env:MISSING"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("missing env: %v", err)
	}
	p := filepath.Join(t.TempDir(), "s")
	os.WriteFile(p, []byte("from-file\n"), 0o600)
	if v, err := r.Get(ctx, "file:"+p); err != nil || v != "from-file" {
		t.Fatalf("file: %q %v", v, err)
	}
	if _, err := r.Get(ctx, "file:"+p+".none"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestSecretsManagerIsCachedBrieflyAndRotates(t *testing.T) {
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:amiss-AbCdEf"
	sm := &fakeSM{values: map[string]string{arn: `{"webhook":"v1","token":"t1"}`}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &secrets.Resolver{SecretsManager: sm, TTL: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	for range 3 {
		if v, err := r.Get(ctx, "aws-secretsmanager:"+arn+"#webhook"); err != nil || v != "v1" {
			t.Fatalf("get: %q %v", v, err)
		}
	}
	if v, _ := r.Get(ctx, "aws-secretsmanager:"+arn+"#token"); v != "t1" || sm.calls != 1 {
		t.Fatalf("cached read made %d calls", sm.calls)
	}
	sm.values[arn] = `{"webhook":"v2","token":"t1"}` // rotated
	now = now.Add(61 * time.Second)
	if v, _ := r.Get(ctx, "aws-secretsmanager:"+arn+"#webhook"); v != "v2" || sm.calls != 2 {
		t.Fatalf("rotation not picked up after the TTL: %q, %d calls", v, sm.calls)
	}
	_, err := r.Get(ctx, "aws-secretsmanager:"+arn+"#nokey")
	if !errors.Is(err, secrets.ErrNotFound) || strings.Contains(err.Error(), "v2") {
		t.Fatalf("missing key: %v (must not print the value)", err)
	}
	if _, err := r.Get(ctx, "aws-secretsmanager:arn:aws:secretsmanager:eu-west-1:1:secret:none"); err == nil {
		t.Fatal("unknown secret resolved")
	}
}
