package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// TestHeldRequestsHaveABoundedLife measures what the design's arguments about held requests
// may rest on: the store refuses a SigV4-signed request whose signing time is more than 15
// minutes from its own clock, so a request held in flight lands within 15 minutes of being
// signed, or never. (The S3 ledger's safety no longer rests on it: deletes name versions and
// rows are created over reservations.)
func TestHeldRequestsHaveABoundedLife(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	ctx := context.Background()
	put := func(signedAt time.Time) int {
		t.Helper()
		body := []byte("held")
		sum := sha256.Sum256(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut,
			fmt.Sprintf("%s/%s/%sheld-%d", minioEndpoint, testBucket, newPrefix(t), signedAt.UnixNano()), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		creds := aws.Credentials{AccessKeyID: minioUser, SecretAccessKey: minioSecret}
		if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "s3", "us-east-1", signedAt); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	for _, c := range []struct {
		age  time.Duration
		want int
	}{{0, http.StatusOK}, {14 * time.Minute, http.StatusOK}, {16 * time.Minute, http.StatusForbidden}, {-16 * time.Minute, http.StatusForbidden}} {
		if got := put(now.Add(-c.age)); got != c.want {
			t.Errorf("a PUT signed %s before the store's time answered %d, want %d", c.age, got, c.want)
		}
	}
}
