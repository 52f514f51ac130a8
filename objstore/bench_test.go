package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// Measurements against MinIO, recorded in docs/benchmarks.md; nothing here asserts a timing.

func benchDelivery(prefix string, i int, signedAt time.Time) ledger.Delivery {
	body := fmt.Appendf(nil, `{"after":"%040d"}`, i)
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{Binding: ledger.Binding{Route: "bench", Scheme: scheme, Identity: fmt.Sprintf("%s-%d", prefix, i),
		BodyDigest: ledger.SumBody(body)}, Subject: body, SignedAt: signedAt}
}

// lifecycle takes one delivery through admit, claim, save and complete, and returns the
// requests each step made.
func lifecycle(tb testing.TB, l ledger.Ledger, c *counter, d ledger.Delivery) [4]int {
	ctx := context.Background()
	var out [4]int
	step := func(i int, f func() error) {
		c.reset()
		if err := f(); err != nil {
			tb.Fatalf("step %d: %v", i, err)
		}
		out[i], _ = c.snapshot()
	}
	var cl ledger.Claim
	var s ledger.Staged
	step(0, func() error { _, err := l.Admit(ctx, d); return err })
	step(1, func() (err error) {
		cl, err = l.Claim(ctx, d.Key(), d.Binding.Digest(), "bench", time.Minute)
		if err == nil && cl.Outcome != ledger.Execute {
			err = fmt.Errorf("claim answered %v", cl.Outcome)
		}
		return err
	})
	step(2, func() (err error) { s, err = l.Save(ctx, *cl.Lease, []byte(`{"state":"success"}`)); return err })
	step(3, func() error { return l.Complete(ctx, s) })
	return out
}

// TestRequestsPerLifecycle counts (does not time) the requests of one uncontended delivery
// lifecycle, for a permanent and for a signed delivery. The target is at most 10.
func TestRequestsPerLifecycle(t *testing.T) {
	requireMinIO(t)
	c := &counter{}
	l := openOn(t, newPrefix(t), newTransport(c), ledger.SystemClock{}, ledgertest.Limits(), 0)
	for _, signed := range []bool{false, true} {
		at := time.Time{}
		if signed {
			at = time.Now()
		}
		steps := lifecycle(t, l, c, benchDelivery("count", map[bool]int{false: 1, true: 2}[signed], at))
		total := steps[0] + steps[1] + steps[2] + steps[3]
		t.Logf("signed=%v: admit %d, claim %d, save %d, complete %d: %d requests", signed, steps[0], steps[1], steps[2], steps[3], total)
		if total > 10 {
			t.Fatalf("signed=%v: %d requests for one lifecycle, target at most 10", signed, total)
		}
	}
}

// BenchmarkOperationLatency times each step of the lifecycle against MinIO (no added latency).
func BenchmarkOperationLatency(b *testing.B) {
	requireMinIO(b)
	limits := ledgertest.Limits()
	limits.RecordCap = 1_000_000
	l := openOn(b, newPrefix(b), newTransport(&counter{}), ledger.SystemClock{}, limits, 0)
	names := []string{"admit", "claim", "save", "complete"}
	durs := make([][]time.Duration, 4)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N*200; i++ {
		d := benchDelivery("lat", i, time.Time{})
		var cl ledger.Claim
		var s ledger.Staged
		steps := []func() error{
			func() error { _, err := l.Admit(ctx, d); return err },
			func() (err error) {
				cl, err = l.Claim(ctx, d.Key(), d.Binding.Digest(), "bench", time.Minute)
				return err
			},
			func() (err error) { s, err = l.Save(ctx, *cl.Lease, []byte(`{"state":"success"}`)); return err },
			func() error { return l.Complete(ctx, s) },
		}
		for j, f := range steps {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			durs[j] = append(durs[j], time.Since(start))
		}
	}
	b.StopTimer()
	for j, n := range names {
		slices.Sort(durs[j])
		b.ReportMetric(float64(durs[j][len(durs[j])/2].Microseconds()), n+"-median-µs")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAdmissionConcurrency measures admissions per second with 20 ms added to every
// request (as from a Lambda to S3), with 1 and with 16 concurrent admitters, and in the same
// run 16 workers incrementing one shared object by compare-and-swap.
func BenchmarkAdmissionConcurrency(b *testing.B) {
	requireMinIO(b)
	const latency = 20 * time.Millisecond
	const window = 5 * time.Second
	limits := ledgertest.Limits()
	limits.RecordCap = 1_000_000
	rate := func(workers int, op func(worker, i int) error) float64 {
		var done atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(window)
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					if err := op(w, i); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(done.Load()) / time.Since(start).Seconds()
	}
	slowTransport := func() *transport {
		tr := newTransport(&counter{})
		tr.latency = latency
		return tr
	}
	admitRate := func(workers int) float64 {
		l := openOn(b, newPrefix(b), slowTransport(), ledger.SystemClock{}, limits, 0)
		ctx := context.Background()
		return rate(workers, func(w, i int) error {
			a, err := l.Admit(ctx, benchDelivery(fmt.Sprintf("w%d", w), i, time.Time{}))
			if err == nil && a.Outcome != ledger.Admitted {
				err = fmt.Errorf("admit answered %v", a.Outcome)
			}
			return err
		})
	}
	one := admitRate(1)
	sixteen := admitRate(16)
	cas := casRate(b, slowTransport(), 16, rate)
	b.ReportMetric(one, "admits/s-1")
	b.ReportMetric(sixteen, "admits/s-16")
	b.ReportMetric(sixteen/one, "x-16/1")
	b.ReportMetric(cas, "shared-cas/s-16")
	b.ReportMetric(0, "ns/op")
}

// casRate has workers increment one shared object by compare-and-swap (read, then PUT with
// If-Match, retried on 412), counting successful increments per second.
func casRate(b *testing.B, tr *transport, workers int, rate func(int, func(int, int) error) float64) float64 {
	ctx := context.Background()
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		b.Fatal(err)
	}
	key := newPrefix(b) + "counter"
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testBucket), Key: aws.String(key), Body: bytes.NewReader([]byte("0"))}); err != nil {
		b.Fatal(err)
	}
	return rate(workers, func(int, int) error {
		for {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(testBucket), Key: aws.String(key)})
			if err != nil {
				return err
			}
			var n int
			fmt.Fscan(out.Body, &n)
			out.Body.Close()
			_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testBucket), Key: aws.String(key),
				Body: bytes.NewReader(fmt.Appendf(nil, "%d", n+1)), IfMatch: out.ETag})
			if err == nil {
				return nil
			}
			if !isPreconditionErr(err) {
				return err
			}
		}
	})
}

func isPreconditionErr(err error) bool {
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && (re.HTTPStatusCode() == http.StatusPreconditionFailed || re.HTTPStatusCode() == http.StatusConflict)
}
