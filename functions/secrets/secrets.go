// Package secrets reads the secrets a configuration refers to, at run time: from environment
// variables or files (locally) and from AWS Secrets Manager (deployed). Values fetched from
// Secrets Manager are cached briefly, so a rotated secret is picked up without a redeploy.
// Secret values never appear in errors or logs.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// ErrNotFound: the referenced secret does not exist or is empty.
var ErrNotFound = errors.New("secrets: not found")

// Source resolves a secret reference (env:NAME, file:PATH, aws-secretsmanager:ARN[#key]) to
// its value. The Resolver is the one the functions use; tests give fixed values. An error
// never holds a secret's value.
type Source interface {
	Get(ctx context.Context, ref string) (string, error)
}

var _ Source = (*Resolver)(nil)

// SecretsManagerAPI is the one Secrets Manager call the resolver makes.
type SecretsManagerAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Resolver resolves references of the form env:NAME, file:PATH and aws-secretsmanager:ARN
// (with an optional #key naming a field of a JSON secret). It is safe for concurrent use.
type Resolver struct {
	// SecretsManager is used for aws-secretsmanager references (nil: they fail).
	SecretsManager SecretsManagerAPI
	// TTL is how long a Secrets Manager value is reused (default one minute).
	TTL time.Duration
	// Now is the clock for the cache (default time.Now).
	Now func() time.Time
	// Getenv and ReadFile default to the process environment and the file system.
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	value string
	at    time.Time
}

// Get returns the secret ref refers to.
func (r *Resolver) Get(ctx context.Context, ref string) (string, error) {
	kind, rest, _ := strings.Cut(ref, ":")
	switch kind {
	case "env":
		getenv := r.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		if v := getenv(rest); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: environment variable %s is not set", ErrNotFound, rest)
	case "file":
		read := r.ReadFile
		if read == nil {
			read = os.ReadFile
		}
		b, err := read(rest)
		if err != nil {
			return "", fmt.Errorf("%w: secret file %s: %v", ErrNotFound, rest, errors.Unwrap(err))
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%w: secret file %s is empty", ErrNotFound, rest)
		}
		return v, nil
	case "aws-secretsmanager":
		return r.fromSecretsManager(ctx, rest)
	}
	return "", fmt.Errorf("secrets: unknown reference kind %q", kind)
}

func (r *Resolver) fromSecretsManager(ctx context.Context, ref string) (string, error) {
	arn, key, _ := strings.Cut(ref, "#")
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	ttl := r.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	r.mu.Lock()
	if c, ok := r.cache[arn]; ok && now().Sub(c.at) < ttl {
		r.mu.Unlock()
		return pick(arn, key, c.value)
	}
	r.mu.Unlock()
	if r.SecretsManager == nil {
		return "", fmt.Errorf("secrets: no Secrets Manager client for %s", arn)
	}
	out, err := r.SecretsManager.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("secrets: get %s: %w", arn, err)
	}
	v := aws.ToString(out.SecretString)
	if v == "" {
		return "", fmt.Errorf("%w: %s has no string value", ErrNotFound, arn)
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]cached{}
	}
	r.cache[arn] = cached{value: v, at: now()}
	r.mu.Unlock()
	return pick(arn, key, v)
}

// pick returns the whole value, or the named field of a JSON object value.
func pick(arn, key, value string) (string, error) {
	if key == "" {
		return value, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return "", fmt.Errorf("secrets: %s is not a JSON object, so it has no key %q", arn, key)
	}
	s, ok := m[key].(string)
	if !ok || s == "" {
		return "", fmt.Errorf("%w: %s has no string key %q", ErrNotFound, arn, key)
	}
	return s, nil
}
