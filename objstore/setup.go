package objstore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/amiss-ci/amiss/ledger"
)

// SetupBucket makes bucket fit for a ledger under prefix: it turns versioning on (the ledger
// deletes by version id and refuses a bucket without versions) and sets a lifecycle rule on the
// prefix that expires versions noncurrentDays after they stopped being current, and delete
// markers left with no version. It is for operators (`amiss ledger s3-setup`) and stores such
// as a local MinIO; the SAM template does the same for the bucket it creates. It replaces the
// bucket's lifecycle configuration.
func SetupBucket(ctx context.Context, client *s3.Client, bucket, prefix string, noncurrentDays int32) error {
	if noncurrentDays < 1 {
		return fmt.Errorf("%w: noncurrent versions must be kept at least a day, got %d", ledger.ErrInvalid, noncurrentDays)
	}
	_, err := client.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}})
	if err != nil {
		return fmt.Errorf("%w: enable versioning on bucket %s: %v", ledger.ErrUnavailable, bucket, err)
	}
	_, err = client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String(bucket),
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{
			ID:                          aws.String("amiss-ledger-noncurrent"),
			Status:                      types.ExpirationStatusEnabled,
			Filter:                      &types.LifecycleRuleFilter{Prefix: aws.String(prefix)},
			NoncurrentVersionExpiration: &types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(noncurrentDays)},
			Expiration:                  &types.LifecycleExpiration{ExpiredObjectDeleteMarker: aws.Bool(true)},
		}}}})
	if err != nil {
		return fmt.Errorf("%w: set the lifecycle rule of bucket %s: %v", ledger.ErrUnavailable, bucket, err)
	}
	return nil
}
