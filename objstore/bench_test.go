package objstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"

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
		BodyDigest: ledger.SumBody(body)}, Change: body, SignedAt: signedAt}
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
// lifecycle, for a permanent and for a signed delivery: admitted by one handle (the ingress,
// warm: it has taken slots before), claimed, saved, granted its post on a commit nothing was
// published to, reported and completed by another (the runner), as in Lambda. The target is at
// most 10. It also counts what one cleanup pass spends removing rows.
func TestRequestsPerLifecycle(t *testing.T) {
	requireMinIO(t)
	ctx := context.Background()
	prefix := newPrefix(t)
	clock := ledger.NewManualClock(time.Now().Truncate(time.Second))
	ci, cr := &counter{}, &counter{}
	ingress := openOn(t, prefix, newTransport(ci), clock, ledgertest.Limits(), 0)
	runner := openOn(t, prefix, newTransport(cr), clock, ledgertest.Limits(), 0)
	// The ingress has taken a slot in every shard before, as a busy one has: it holds a copy of
	// every capacity shard (a key's home shard is its second byte modulo the 16 shards).
	homes := map[int]bool{}
	for i := 100; len(homes) < 16; i++ {
		d := benchDelivery(prefix, i, time.Time{})
		if home := int(d.Key()[1]) % 16; !homes[home] {
			homes[home] = true
			ledgertest.MustAdmit(t, ingress, d)
		}
	}
	for _, sig := range []bool{false, true} {
		at := time.Time{}
		if sig {
			at = clock.Now()
		}
		n := map[bool]int{false: 1, true: 2}[sig]
		d := benchDelivery(prefix, n, at)
		count := func(c *counter, f func() error) int {
			t.Helper()
			c.reset()
			if err := f(); err != nil {
				t.Fatal(err)
			}
			ops, _ := c.snapshot()
			return ops
		}
		var s ledger.Staged
		var g ledger.SubjectGrant
		admit := count(ci, func() error { _, err := ingress.Admit(ctx, d); return err })
		run := count(cr, func() error {
			c, err := runner.Claim(ctx, d.Key(), d.Binding.Digest(), "runner", time.Minute)
			if err == nil {
				s, err = runner.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
			}
			return err
		})
		q := ledger.SubjectRequest{Subject: ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app",
			SHA: fmt.Sprintf("%040d", n), Context: "amiss"}, Order: s.Lease.Order(), EvaluationID: s.Lease.EvaluationID,
			HoldFor: time.Minute, Settle: 10 * time.Second}
		subject := count(cr, func() (err error) {
			if g, err = runner.AcquireSubject(ctx, q); err == nil {
				_, err = runner.ReportSubject(ctx, g, ledger.PostApplied)
			}
			return err
		})
		complete := count(cr, func() error { return runner.Complete(ctx, s) })
		total := admit + run + subject + complete
		t.Logf("signed=%v: admit %d (ingress), claim and save %d, subject grant and report %d, complete %d (runner): %d requests",
			sig, admit, run, subject, complete, total)
		if total > 10 {
			t.Fatalf("signed=%v: %d requests for one lifecycle, target at most 10", sig, total)
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

// S3 Standard list prices in us-east-1, dollars per 1,000 requests: PUT, COPY, POST and LIST
// requests (ListObjectVersions included) cost the first, GET and every other request the
// second; DELETE is free.
const (
	priceWrite = 0.005
	priceRead  = 0.0004
)

// dollars prices requests counted by kind (the transport's classes).
func dollars(kinds map[string]int) float64 {
	var d float64
	for k, n := range kinds {
		switch k {
		case "PUT", "POST", "LIST", "LIST-VERSIONS":
			d += float64(n) * priceWrite / 1000
		case "DELETE":
		default:
			d += float64(n) * priceRead / 1000
		}
	}
	return d
}

// BenchmarkSimulatedDay runs days of a deployment against MinIO on the store's clock, and
// counts the requests of the deliveries' own lifecycles (admission by the ingress; claim,
// save, subject grant, post report and completion by the runner, each delivery to a commit of
// its own) and of cleanup (a pass every 5 minutes, as many as a run needs to be Done), at
// default limits: signed deliveries kept 72 hours, subject records forgotten 97 hours after
// their newest event. Deliveries arrive on days 1, 2 and 5, evenly (AMISS_BENCH_PER_DAY a day,
// default 10,000); day 5 is measured: its cleanup looks at its own deliveries and forgets the
// rows of day 2 and the subject records of day 1, as every day does at steady state (days 3
// and 4, without traffic, have a pass an hour). It reports
// requests and dollars (S3 Standard list prices) per million deliveries, lifecycle and cleanup
// apart, the most requests and reads one pass made, and the most reads one pass made beyond
// the looks due at it (counted from the index straight from the store, outside the counted
// transports). It takes tens of minutes (it prints each simulated day's end). Run it alone:
//
//	go test -run '^$' -bench SimulatedDay -benchtime 1x ./objstore/
func BenchmarkSimulatedDay(b *testing.B) {
	requireMinIO(b)
	perDay := 10_000
	if n, err := strconv.Atoi(os.Getenv("AMISS_BENCH_PER_DAY")); err == nil && n > 0 {
		perDay = n
	}
	ctx := context.Background()
	prefix := newPrefix(b)
	clock := ledger.NewManualClock(time.Now().Truncate(time.Second))
	limits := ledger.DefaultLimits()
	life, clean := &counter{}, &counter{}
	ingress := openDefault(b, prefix, newTransport(life), clock, limits) // creates it: 16 capacity shards
	runner := openDefault(b, prefix, newTransport(life), clock, limits)
	cleaner := openDefault(b, prefix, newTransport(clean), clock, limits)
	const (
		pass  = 5 * time.Minute
		slots = int(24 * time.Hour / pass)
	)
	var seq atomic.Int64
	deliver := func() error {
		i := int(seq.Add(1))
		d := benchDelivery(prefix, i, clock.Now())
		if a, err := ingress.Admit(ctx, d); err != nil || a.Outcome != ledger.Admitted {
			return fmt.Errorf("admit: %v %v", a.Outcome, err)
		}
		c, err := runner.Claim(ctx, d.Key(), d.Binding.Digest(), "runner", time.Minute)
		if err != nil || c.Outcome != ledger.Execute {
			return fmt.Errorf("claim: %v %v", c.Outcome, err)
		}
		s, err := runner.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
		if err != nil {
			return err
		}
		q := ledger.SubjectRequest{Subject: ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app",
			SHA: fmt.Sprintf("%040x", i), Context: "amiss"}, Order: s.Lease.Order(), EvaluationID: s.Lease.EvaluationID,
			HoldFor: time.Minute, Settle: 10 * time.Second}
		g, err := runner.AcquireSubject(ctx, q)
		if err != nil || g.Outcome != ledger.SubjectPost {
			return fmt.Errorf("acquire subject: %v %v", g.Outcome, err)
		}
		if a, err := runner.ReportSubject(ctx, g, ledger.PostApplied); err != nil || a.Outcome != ledger.SubjectStanding {
			return fmt.Errorf("report subject: %v %v", a.Outcome, err)
		}
		return runner.Complete(ctx, s)
	}
	var passes, maxOps, maxReads, maxDue, maxOver, removed, subjects int
	b.ResetTimer()
	start := time.Now()
	for day := 1; day <= 5; day++ {
		arrive := day <= 2 || day == 5
		if day == 5 {
			life.reset()
			clean.reset()
		}
		step := pass
		if !arrive {
			step = time.Hour // days with no traffic: a pass an hour is as good, and quicker
		}
		for slot := 0; slot < int(24*time.Hour/step); slot++ {
			if arrive {
				n := perDay/slots + map[bool]int{true: 1, false: 0}[slot < perDay%slots]
				var wg sync.WaitGroup
				errs := make(chan error, n)
				sem := make(chan struct{}, 4)
				for range n {
					wg.Add(1)
					sem <- struct{}{}
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						if err := deliver(); err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			clock.Advance(step)
			for range 20 {
				before := clean.kinds()
				due := 0
				if day == 5 {
					due = dueAt(b, prefix, clock.Now())
				}
				rep, err := cleaner.Cleanup(ctx, "")
				if err != nil {
					b.Fatalf("day %d: cleanup: %v", day, err)
				}
				if day == 5 {
					after := clean.kinds()
					ops, reads := 0, after["GET"]-before["GET"]
					for k, v := range after {
						ops += v - before[k]
					}
					passes++
					maxOps, maxReads = max(maxOps, ops), max(maxReads, reads)
					maxDue, maxOver = max(maxDue, due), max(maxOver, reads-due)
					removed += len(rep.Removed)
					subjects += rep.RemovedSubjects
				}
				if rep.Done {
					break
				}
			}
		}
		fmt.Fprintf(os.Stderr, "simulated day %d done after %s\n", day, time.Since(start).Round(time.Second))
	}
	b.StopTimer()
	perM := 1e6 / float64(perDay)
	total := func(kinds map[string]int) int {
		n := 0
		for _, v := range kinds {
			n += v
		}
		return n
	}
	lk, ck := life.kinds(), clean.kinds()
	b.Logf("day 5: %d deliveries; lifecycle %v; cleanup %d passes %v, %d rows and %d subject records forgotten, at most %d requests (%d GETs) in one pass; "+
		"at most %d looks due at a pass, and at most %d GETs more than the looks due in one pass",
		perDay, lk, passes, ck, removed, subjects, maxOps, maxReads, maxDue, maxOver)
	b.ReportMetric(float64(total(lk))/float64(perDay), "lifecycle-req/delivery")
	b.ReportMetric(float64(total(ck))/float64(perDay), "cleanup-req/delivery")
	b.ReportMetric(dollars(lk)*perM, "lifecycle-$/M")
	b.ReportMetric(dollars(ck)*perM, "cleanup-$/M")
	b.ReportMetric(float64(maxReads), "max-GETs/pass")
	b.ReportMetric(float64(maxDue), "max-due/pass")
	b.ReportMetric(float64(maxOver), "max-GETs-over-due/pass")
	b.ReportMetric(0, "ns/op")
}

// openDefault opens (creating) the ledger at prefix as openOn does, with the default number of
// capacity shards (16).
func openDefault(tb testing.TB, prefix string, tr *transport, clock ledger.Clock, limits ledger.Limits) *objstore.Ledger {
	tb.Helper()
	ctx := context.Background()
	tr.setStoreClock(clock)
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		Retryer: fastRetryer, DisableClockSkewCorrection: true})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := objstore.Open(ctx, objstore.Config{Client: client, Bucket: testBucket, Prefix: prefix, Limits: limits,
		Clock: clock, Create: true, Owner: "bench"})
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	return l
}

// dueAt counts the looks cleanup's index holds due at now under prefix, read straight from the
// store (not through a counted transport): each look an admission asked for, and each item
// due by now in the schedule's parts due by now. A pass looks at no more than these (and at
// most CleanupBatch); what it reads beyond them is its own bookkeeping.
func dueAt(tb testing.TB, prefix string, now time.Time) int {
	tb.Helper()
	ctx := context.Background()
	n := 0
	for o := range minioRaw.ListObjects(ctx, testBucket, minio.ListObjectsOptions{Prefix: prefix + "due/", Recursive: true}) {
		if o.Err != nil {
			tb.Fatal(o.Err)
		}
		at, tail, ok := strings.Cut(strings.TrimPrefix(o.Key, prefix+"due/"), "-")
		t, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || t > now.UnixNano() || tail == "" {
			continue
		}
		if tail[0] == 'r' {
			n++
			continue
		}
		obj, err := minioRaw.GetObject(ctx, testBucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		var part struct {
			Data struct {
				Items []struct {
					At int64 `json:"at_unix_nano"`
				} `json:"items"`
			} `json:"data"`
		}
		err = json.NewDecoder(obj).Decode(&part)
		obj.Close()
		if err != nil {
			tb.Fatalf("%s: %v", o.Key, err)
		}
		for _, it := range part.Data.Items {
			if it.At <= now.UnixNano() {
				n++
			}
		}
	}
	return n
}
