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
// lifecycle, for a permanent and for a signed delivery: admitted by one handle (the ingress),
// claimed, saved and completed by another (the runner), as in Lambda. The target is at most 10.
// It also counts what cleanup spends on each row it removes.
func TestRequestsPerLifecycle(t *testing.T) {
	requireMinIO(t)
	ctx := context.Background()
	prefix := newPrefix(t)
	clock := ledger.NewManualClock(time.Now().Truncate(time.Second))
	ci, cr := &counter{}, &counter{}
	ingress := openOn(t, prefix, newTransport(ci), clock, ledgertest.Limits(), 0)
	runner := openOn(t, prefix, newTransport(cr), clock, ledgertest.Limits(), 0)
	var signed []ledger.Delivery
	for _, sig := range []bool{false, true} {
		at := time.Time{}
		if sig {
			at = clock.Now()
		}
		d := benchDelivery(prefix, map[bool]int{false: 1, true: 2}[sig], at)
		ci.reset()
		if _, err := ingress.Admit(ctx, d); err != nil {
			t.Fatal(err)
		}
		admit, _ := ci.snapshot()
		var steps [3]int
		var s ledger.Staged
		for i, f := range []func() error{
			func() error {
				c, err := runner.Claim(ctx, d.Key(), d.Binding.Digest(), "runner", time.Minute)
				if err == nil {
					s, err = runner.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
				}
				return err
			},
			func() error { return runner.Complete(ctx, s) },
		} {
			cr.reset()
			if err := f(); err != nil {
				t.Fatal(err)
			}
			steps[i], _ = cr.snapshot()
		}
		total := admit + steps[0] + steps[1]
		t.Logf("signed=%v: admit %d (ingress), claim and save %d, complete %d (runner): %d requests", sig, admit, steps[0], steps[1], total)
		if total > 10 {
			t.Fatalf("signed=%v: %d requests for one lifecycle, target at most 10", sig, total)
		}
		if sig {
			signed = append(signed, d)
		}
	}
	// Cleanup: ten more signed rows, then one pass past their retention.
	for i := range 10 {
		d := benchDelivery(prefix, 10+i, clock.Now())
		ledgertest.MustAdmit(t, ingress, d)
		ledgertest.MustComplete(t, runner, ledgertest.MustSave(t, runner, *ledgertest.MustClaim(t, runner, d, ledger.Execute).Lease, "r"))
	}
	clock.Advance(2 * time.Hour)
	cc := &counter{}
	cleaner := openOn(t, prefix, newTransport(cc), clock, ledgertest.Limits(), 0)
	cc.reset()
	rep, err := cleaner.Cleanup(ctx, "")
	if err != nil || len(rep.Removed) != 11 {
		t.Fatalf("cleanup removed %d rows: %v", len(rep.Removed), err)
	}
	ops, _ := cc.snapshot()
	t.Logf("cleanup pass removing %d rows (each with the %d versions its lifecycle wrote; a lifecycle rule leaves one): %d requests %v",
		len(rep.Removed), 5, ops, cc.kinds())
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
