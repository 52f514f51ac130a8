// Package miniotest starts MinIO for tests with testcontainers-go, once per test binary, and
// checks that it honours the conditional writes the S3 ledger's safety rests on.
//
// The image comes from AMISS_MINIO_IMAGE (default: a pinned public release; `make
// minio-image` builds one from source for machines without a registry). Without Docker the
// tests that need MinIO skip with a loud message, unless AMISS_REQUIRE_DOCKER=1. Containers
// are reached through 127.0.0.1 only (TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1).
package miniotest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultImage is the public MinIO release used on a normal machine.
const DefaultImage = "minio/minio:RELEASE.2025-09-07T16-13-09Z"

// Credentials and bucket of the test server.
const (
	User   = "amiss-test"
	Secret = "amiss-test-secret"
	Bucket = "amiss-ledger"
)

// Server is a running MinIO.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// Raw is an independent client, for creating buckets and reading or damaging objects.
	Raw       *minio.Client
	container testcontainers.Container
}

var (
	once     sync.Once
	server   *Server
	startErr error // MinIO could not be started
	probeErr error // it runs but does not honour conditional writes
)

// Remedy says how to get MinIO for the tests.
const Remedy = "make test builds the image itself when Docker runs; by hand: start dockerd, make minio-image, then AMISS_MINIO_IMAGE=amiss-minio:local go test ..."

// Start starts the shared server (once) and reports why it is unavailable, if it is.
func Start() (*Server, error) {
	once.Do(func() {
		server, startErr = start(context.Background())
		if startErr != nil {
			fmt.Fprintf(os.Stderr, "\n*** MinIO not started: %v\n*** %s.\n*** Tests that need it will %s.\n\n", startErr, Remedy,
				map[bool]string{true: "FAIL (AMISS_REQUIRE_DOCKER=1)", false: "be SKIPPED"}[os.Getenv("AMISS_REQUIRE_DOCKER") == "1"])
		}
	})
	return server, startErr
}

// Stop terminates the shared server (call it from TestMain after m.Run).
func Stop() {
	if server != nil && server.container != nil {
		server.container.Terminate(context.Background())
	}
}

// Require returns the server, or skips (loudly) or fails the test when there is none, and
// always fails it when the store does not honour conditional writes.
func Require(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if probeErr != nil {
		t.Fatalf("%v", probeErr) // a store that runs but cannot fence is a failure, never a skip
	}
	if err == nil {
		return s
	}
	if os.Getenv("AMISS_REQUIRE_DOCKER") == "1" {
		t.Fatalf("MinIO is required (AMISS_REQUIRE_DOCKER=1) but not available: %v", err)
	}
	t.Skipf("SKIPPED: MinIO not available (%v). %s; AMISS_REQUIRE_DOCKER=1 makes this a failure", err, Remedy)
	return nil
}

func start(ctx context.Context) (*Server, error) {
	image := os.Getenv("AMISS_MINIO_IMAGE")
	if image == "" {
		image = DefaultImage
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        image,
			Cmd:          []string{"server", "/data"},
			Env:          map[string]string{"MINIO_ROOT_USER": User, "MINIO_ROOT_PASSWORD": Secret},
			ExposedPorts: []string{"9000/tcp"},
			WaitingFor:   wait.ForHTTP("/minio/health/live").WithPort("9000/tcp").WithStartupTimeout(90 * time.Second),
		},
		Started: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", image, err)
	}
	s := &Server{container: c}
	host, err := c.Host(ctx)
	if err != nil {
		return s, err
	}
	if host != "127.0.0.1" && host != "localhost" {
		c.Terminate(ctx)
		return nil, fmt.Errorf("testcontainers reaches Docker at %q: set TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 (tests talk only to loopback)", host)
	}
	port, err := c.MappedPort(ctx, "9000/tcp")
	if err != nil {
		return s, err
	}
	s.Endpoint = "http://127.0.0.1:" + port.Port()
	if s.Raw, err = minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{Creds: credentials.NewStaticV4(User, Secret, "")}); err != nil {
		return s, err
	}
	if err := s.Raw.MakeBucket(ctx, Bucket, minio.MakeBucketOptions{}); err != nil {
		return s, fmt.Errorf("create bucket: %w", err)
	}
	// The S3 ledger deletes by version id and refuses a bucket that keeps no versions.
	if err := s.Raw.EnableVersioning(ctx, Bucket); err != nil {
		return s, fmt.Errorf("enable versioning: %w", err)
	}
	probeErr = s.probe(ctx)
	return s, nil
}

// probe checks If-None-Match and If-Match on PUT, failing with a clear message if the store
// does not honour them.
func (s *Server) probe(ctx context.Context) error {
	key := fmt.Sprintf("probe/%d", time.Now().UnixNano())
	put := func(header map[string]string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, s.Endpoint+"/"+Bucket+"/"+key, bytes.NewReader([]byte("x")))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		u, err := s.Raw.PresignHeader(ctx, http.MethodPut, Bucket, key, time.Minute, nil, req.Header)
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
