package objstore_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/internal/miniotest"
)

// The MinIO every objstore test shares (see internal/miniotest).
const (
	minioUser   = miniotest.User
	minioSecret = miniotest.Secret
	testBucket  = miniotest.Bucket
)

var (
	minioEndpoint string
	minioRaw      *minio.Client
)

func TestMain(m *testing.M) {
	if s, err := miniotest.Start(); err == nil {
		minioEndpoint, minioRaw = s.Endpoint, s.Raw
	}
	code := m.Run()
	miniotest.Stop()
	os.Exit(code)
}

// requireMinIO skips (loudly) or fails a test when MinIO is not available.
func requireMinIO(t testing.TB) {
	t.Helper()
	miniotest.Require(t)
}

var prefixSeq atomic.Int64

func newPrefix(t testing.TB) string {
	return fmt.Sprintf("t%d-%d/", time.Now().UnixNano()%1e9, prefixSeq.Add(1))
}
