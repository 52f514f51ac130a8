package objstore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ClientConfig describes how to reach the store.

// ClientConfig describes how to reach the store.
type ClientConfig struct {
	// Region is the bucket's region (for MinIO any region, such as us-east-1).
	Region string
	// Endpoint is the URL of an S3-compatible store; empty for AWS.
	Endpoint string
	// PathStyle addresses buckets as endpoint/bucket (most S3-compatible stores need it).
	PathStyle bool
	// AccessKey and SecretKey are static credentials; empty means the default credential
	// chain (environment, shared files, the Lambda execution role).
	AccessKey, SecretKey string
	// HTTPClient replaces the SDK's HTTP client (tests wrap its transport).
	HTTPClient aws.HTTPClient
	// MaxAttempts bounds the SDK's retries of one request (default: the SDK's 3).
	MaxAttempts int
	// Retryer replaces the SDK's retryer (tests use short back-offs).
	Retryer func() aws.Retryer
	// DisableClockSkewCorrection stops the SDK from signing with the store's time. Only for
	// tests whose transport reports a made-up store time in Date headers: in production the
	// correction keeps every signature, and so every held request's life, on the store's
	// clock.
	DisableClockSkewCorrection bool
}

// NewClient builds an S3 client for AWS or for an S3-compatible endpoint.
func NewClient(ctx context.Context, cc ClientConfig) (*s3.Client, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(cc.Region)}
	if cc.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cc.AccessKey, cc.SecretKey, "")))
	}
	if cc.MaxAttempts > 0 {
		opts = append(opts, config.WithRetryMaxAttempts(cc.MaxAttempts))
	}
	if cc.Retryer != nil {
		opts = append(opts, config.WithRetryer(cc.Retryer))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: load AWS configuration: %w", err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if cc.Endpoint != "" {
			o.BaseEndpoint = aws.String(cc.Endpoint)
		}
		o.UsePathStyle = cc.PathStyle
		o.DisableClockSkewCorrection = cc.DisableClockSkewCorrection
		if cc.HTTPClient != nil {
			o.HTTPClient = cc.HTTPClient
		}
		// MinIO and other stores do not all speak the newer flexible checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}), nil
}
