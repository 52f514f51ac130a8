package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/internal/miniotest"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// The ledger commands take an S3 prefix as well as a file root.
func TestLedgerCommandsOnAnS3Prefix(t *testing.T) {
	s := miniotest.Require(t)
	defer miniotest.Stop()
	t.Setenv("AMISS_S3_ENDPOINT", s.Endpoint)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", miniotest.User)
	t.Setenv("AWS_SECRET_ACCESS_KEY", miniotest.Secret)
	ctx := context.Background()
	prefix := fmt.Sprintf("cli-%d/", time.Now().UnixNano())
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: s.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := objstore.Open(ctx, objstore.Config{Client: client, Bucket: miniotest.Bucket, Prefix: prefix, Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		l.Admit(ctx, ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: fmt.Sprint(i)}})
	}
	root := "s3://" + miniotest.Bucket + "/" + prefix
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"ledger", "stats", "-root", root}, &out, &errOut); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if !strings.Contains(out.String(), "rows 2 (capacity used 2") || !strings.Contains(out.String(), "pending   2") {
		t.Fatalf("stats:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "verify", "-root", root}, &out, &errOut); err != nil || !strings.Contains(out.String(), "ok") {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if err := run(ctx, []string{"ledger", "stats", "-root", "s3://" + miniotest.Bucket + "/nothing-here/"}, &out, &errOut); err == nil {
		t.Fatal("stats of an empty prefix succeeded")
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	bar := progressBar(&b)
	for i := 1; i <= 2000; i++ {
		bar(i, 2000)
	}
	if got := strings.Count(b.String(), "\r"); got != 101 {
		t.Fatalf("%d redraws for 2,000 rows, want one per percent from 0%% to 100%%", got)
	}
	if !strings.HasSuffix(b.String(), "[########################################] 100% 2000/2000 rows\n") {
		t.Fatalf("final bar %q", b.String()[len(b.String())-70:])
	}
	b.Reset()
	small := progressBar(&b)
	small(5, 10)
	if b.Len() != 0 {
		t.Fatal("a bar for a short run")
	}
}
