package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultMinIOImage is the public MinIO release the tests use on a normal machine. On a machine
// without a registry, `make minio-image` builds one from source and AMISS_MINIO_IMAGE selects it.
const DefaultMinIOImage = "minio/minio:RELEASE.2025-09-07T16-13-09Z"

const (
	minioUser   = "amiss-test"
	minioSecret = "amiss-test-secret"
	testBucket  = "amiss-ledger"
)

var (
	minioEndpoint string // http://127.0.0.1:PORT
	minioErr      error  // why MinIO is not available
	probeErr      error  // the store runs but does not honour conditional writes
	minioRaw      *minio.Client
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	var c testcontainers.Container
	c, minioErr = startMinIO(ctx)
	if minioErr != nil {
		fmt.Fprintf(os.Stderr, "\n*** MinIO not started: %v\n*** The S3 ledger tests will %s.\n\n", minioErr,
			map[bool]string{true: "FAIL (AMISS_REQUIRE_DOCKER=1)", false: "be SKIPPED"}[os.Getenv("AMISS_REQUIRE_DOCKER") == "1"])
	}
	code := m.Run()
	if c != nil {
		c.Terminate(ctx)
	}
	os.Exit(code)
}

func startMinIO(ctx context.Context) (testcontainers.Container, error) {
	image := os.Getenv("AMISS_MINIO_IMAGE")
	if image == "" {
		image = DefaultMinIOImage
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        image,
			Cmd:          []string{"server", "/data"},
			Env:          map[string]string{"MINIO_ROOT_USER": minioUser, "MINIO_ROOT_PASSWORD": minioSecret},
			ExposedPorts: []string{"9000/tcp"},
			WaitingFor:   wait.ForHTTP("/minio/health/live").WithPort("9000/tcp").WithStartupTimeout(90 * time.Second),
		},
		Started: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", image, err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return c, err
	}
	if host != "127.0.0.1" && host != "localhost" {
		c.Terminate(ctx)
		return nil, fmt.Errorf("testcontainers reaches Docker at %q: set TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 (tests talk only to loopback)", host)
	}
	port, err := c.MappedPort(ctx, "9000/tcp")
	if err != nil {
		return c, err
	}
	minioEndpoint = fmt.Sprintf("http://127.0.0.1:%s", port.Port())
	minioRaw, err = minio.New(strings.TrimPrefix(minioEndpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(minioUser, minioSecret, ""), Secure: false})
	if err != nil {
		return c, err
	}
	if err := minioRaw.MakeBucket(ctx, testBucket, minio.MakeBucketOptions{}); err != nil {
		return c, fmt.Errorf("create bucket: %w", err)
	}
	probeErr = probeConditionalWrites(ctx)
	return c, nil
}

// requireMinIO skips (loudly) or fails a test when MinIO is not available.
func requireMinIO(t testing.TB) {
	t.Helper()
	if probeErr != nil {
		t.Fatalf("%v", probeErr) // a store that runs but cannot fence is a failure, never a skip
	}
	if minioErr == nil {
		return
	}
	if os.Getenv("AMISS_REQUIRE_DOCKER") == "1" {
		t.Fatalf("MinIO is required (AMISS_REQUIRE_DOCKER=1) but not available: %v", minioErr)
	}
	t.Skipf("SKIPPED: MinIO not available (%v); set AMISS_REQUIRE_DOCKER=1 to make this a failure", minioErr)
}

// probeConditionalWrites checks the store honours If-None-Match and If-Match on PUT, the two
// conditions the ledger's safety rests on, and fails with a clear message if it does not.
func probeConditionalWrites(ctx context.Context) error {
	key := fmt.Sprintf("probe/%d", time.Now().UnixNano())
	put := func(header map[string]string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, minioEndpoint+"/"+testBucket+"/"+key, bytes.NewReader([]byte("x")))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		u, err := minioRaw.PresignHeader(ctx, http.MethodPut, testBucket, key, time.Minute, nil, req.Header)
		if err != nil {
			return 0, "", err
		}
		req.URL = u
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("ETag"), nil
	}
	fail := func(what string, code int) error {
		return fmt.Errorf("the store does not honour conditional PUTs (%s answered %d); the S3 ledger needs MinIO RELEASE.2025-09-07T16-13-09Z or later", what, code)
	}
	if code, _, err := put(map[string]string{"If-Match": `"0123"`}); err != nil {
		return err
	} else if code/100 == 2 {
		return fail("If-Match on a missing object", code)
	}
	code, etag, err := put(map[string]string{"If-None-Match": "*"})
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fail("If-None-Match: * on a missing object", code)
	}
	if code, _, _ := put(map[string]string{"If-None-Match": "*"}); code != http.StatusPreconditionFailed {
		return fail("If-None-Match: * on an existing object", code)
	}
	if code, _, _ := put(map[string]string{"If-Match": `"0123"`}); code != http.StatusPreconditionFailed {
		return fail("If-Match with a stale ETag", code)
	}
	if code, _, _ := put(map[string]string{"If-Match": etag}); code/100 != 2 {
		return fail("If-Match with the current ETag", code)
	}
	return nil
}

var prefixSeq atomic.Int64

func newPrefix(t testing.TB) string {
	return fmt.Sprintf("t%d-%d/", time.Now().UnixNano()%1e9, prefixSeq.Add(1))
}
