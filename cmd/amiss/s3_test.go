package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/internal/miniotest"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// The ledger commands take an S3 prefix as well as a file root.
func TestLedgerCommandsOnAnS3Prefix(t *testing.T) {
	s := miniotest.Require(t)
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

	// An abandoned row: list prints its full key, republish revives it and sends it to SQS.
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "abandoned"}, Change: []byte(`{}`)}
	l.Admit(ctx, d)
	c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Save(ctx, *c.Lease, []byte(`{"state":"failure","description":"frozen"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abandon(ctx, st, `provider refused it for good: 422 (verdict failure: "frozen")`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "list", "-root", root, "-state", "abandoned"}, &out, &errOut); err != nil ||
		!strings.HasPrefix(out.String(), d.Key().String()+"\tabandoned\t") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("list: %v\n%s", err, out.String())
	}
	fake := &fakeSQS{}
	sqsSrv := httptest.NewServer(fake)
	defer sqsSrv.Close()
	t.Setenv("AWS_ENDPOINT_URL_SQS", sqsSrv.URL)
	queueURL := sqsSrv.URL + "/123456789012/amiss-deliveries"
	out.Reset()
	if err := run(ctx, []string{"ledger", "republish", "-root", root, "-queue", queueURL, d.Key().String()}, &out, &errOut); err != nil {
		t.Fatalf("republish: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "queued: the runner publishes") || len(fake.bodies()) != 1 {
		t.Fatalf("republish output:\n%s\nsent %q", out.String(), fake.bodies())
	}
	m, err := queue.Parse(fake.bodies()[0])
	if err != nil || m.Key != d.Key() || m.Binding != d.Binding.Digest() {
		t.Fatalf("message %+v %v", m, err)
	}
	c, err = l.Claim(ctx, d.Key(), d.Binding.Digest(), "o", time.Minute)
	if err != nil || c.Outcome != ledger.Publish || string(c.Staged.Report) != `{"state":"failure","description":"frozen"}` {
		t.Fatalf("claim after republish: %+v %v", c, err)
	}
}

// fakeSQS speaks the SQS JSON protocol's SendMessage, as the current SDK does.
type fakeSQS struct {
	mu   sync.Mutex
	sent []string
}

func (f *fakeSQS) bodies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ QueueUrl, MessageBody string }
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessage" || json.NewDecoder(r.Body).Decode(&in) != nil || in.QueueUrl == "" {
		http.Error(w, `{"__type":"InvalidAction"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.sent = append(f.sent, in.MessageBody)
	f.mu.Unlock()
	sum := md5.Sum([]byte(in.MessageBody))
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	json.NewEncoder(w).Encode(map[string]string{"MessageId": "5fea7756-0ea4-451a-a703-a558b933e274", "MD5OfMessageBody": hex.EncodeToString(sum[:])})
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

// A bucket that keeps no versions is refused, with a message that says how to fix it;
// `amiss ledger s3-setup` fixes it (versioning and a lifecycle rule for noncurrent versions).
func TestS3SetupReadiesABucket(t *testing.T) {
	s := miniotest.Require(t)
	t.Setenv("AMISS_S3_ENDPOINT", s.Endpoint)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", miniotest.User)
	t.Setenv("AWS_SECRET_ACCESS_KEY", miniotest.Secret)
	ctx := context.Background()
	bucket := fmt.Sprintf("plain-%d", time.Now().UnixNano())
	if err := s.Raw.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: s.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	open := func() error {
		l, err := objstore.Open(ctx, objstore.Config{Client: client, Bucket: bucket, Prefix: "ledger/", Limits: ledger.DefaultLimits(), Create: true})
		if err == nil {
			l.Close()
		}
		return err
	}
	err = open()
	if !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), "versioning") || !strings.Contains(err.Error(), "amiss ledger s3-setup") {
		t.Fatalf("a ledger in a bucket without versions: %v", err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"ledger", "s3-setup", "-root", "s3://" + bucket + "/ledger/"}, &out, &errOut); err != nil {
		t.Fatalf("s3-setup: %v\n%s", err, errOut.String())
	}
	if err := open(); err != nil {
		t.Fatalf("open after s3-setup: %v", err)
	}
	rules, err := s.Raw.GetBucketLifecycle(ctx, bucket)
	if err != nil || len(rules.Rules) != 1 || rules.Rules[0].NoncurrentVersionExpiration.NoncurrentDays != 1 ||
		rules.Rules[0].RuleFilter.Prefix != "ledger/" {
		t.Fatalf("lifecycle after s3-setup: %+v %v", rules, err)
	}
}
