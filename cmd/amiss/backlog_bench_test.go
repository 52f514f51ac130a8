package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/webhook"
)

const backlogSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// verdictClock is serve's log: it notes when the log publisher printed each commit's verdict.
type verdictClock struct {
	mu    sync.Mutex
	seen  *sync.Cond // broadcast at each verdict
	buf   []byte
	at    map[string]time.Time
	count int
}

func newVerdictClock() *verdictClock {
	v := &verdictClock{at: map[string]time.Time{}}
	v.seen = sync.NewCond(&v.mu)
	return v
}

// wait waits until the verdict of sha was printed, at most until deadline.
func (v *verdictClock) wait(sha string, deadline time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.at[sha].IsZero() {
		if time.Now().After(deadline) {
			return false
		}
		v.seen.Wait()
	}
	return true
}

func (v *verdictClock) Write(p []byte) (int, error) {
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.buf = append(v.buf, p...)
	for {
		i := bytes.IndexByte(v.buf, '\n')
		if i < 0 {
			break
		}
		var line struct{ Msg, SHA string }
		if json.Unmarshal(v.buf[:i], &line) == nil && line.Msg == "verdict" {
			v.at[line.SHA] = now
			v.count++
			v.seen.Broadcast()
		}
		v.buf = v.buf[i+1:]
	}
	return len(p), nil
}

func (v *verdictClock) done() int { v.mu.Lock(); defer v.mu.Unlock(); return v.count }

// A backlog on one repository: amiss serve (four workers, a file root that syncs, the log
// publisher) takes n signed pushes to one repository, each its own commit, from c senders over
// HTTP, each sending its next push once the last one's verdict is out: c deliveries of the
// repository are always in flight, more than the gate lets post at once. The route's publish
// gate is at its default (four requests to the API, two to one repository) or wide open (64).
// Reported: webhook (the request sent) to verdict (the log publisher's line) p50, p99 and max,
// and verdicts per second.
//
//	go test -run '^$' -bench ServeBacklogOnOneRepository -benchtime 3x ./cmd/amiss/
func BenchmarkServeBacklogOnOneRepository(b *testing.B) {
	const n = 1000
	b.Setenv("AMISS_DEMO_SECRET", backlogSecret)
	for _, gate := range []struct {
		name        string
		concurrency int
	}{{"default-gate", 4}, {"wide-open", 64}} {
		for _, c := range []int{8, 32} {
			b.Run(fmt.Sprintf("%s/in-flight-%d", gate.name, c), func(b *testing.B) {
				var lat []time.Duration
				var rate float64
				for range b.N {
					l, r := backlogTrial(b, n, c, gate.concurrency)
					lat = append(lat, l...)
					rate += r / float64(b.N)
				}
				pct := func(p float64) float64 {
					slices.Sort(lat)
					return float64(lat[min(max(int(float64(len(lat))*p/100+0.5)-1, 0), len(lat)-1)].Microseconds()) / 1000
				}
				b.ReportMetric(pct(50), "p50-ms")
				b.ReportMetric(pct(99), "p99-ms")
				b.ReportMetric(pct(100), "max-ms")
				b.ReportMetric(pct(99)/pct(50), "p99/p50")
				b.ReportMetric(rate, "verdicts/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func backlogTrial(b *testing.B, n, c, concurrency int) ([]time.Duration, float64) {
	dir := b.TempDir()
	cfg := filepath.Join(dir, "amiss.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, `routes:
  demo:
    provider: standard-webhooks
    secrets: [{id: local, from: "env:AMISS_DEMO_SECRET"}]
    events: [push]
    repositories: ["acme/*"]
    publish: {provider: log, context: amiss/demo, concurrency: %d}
`, concurrency), 0o600)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	out := newVerdictClock()
	served := make(chan error, 1)
	go func() {
		served <- runServe(ctx, serveOptions{config: cfg, root: filepath.Join(dir, "root"), listen: "127.0.0.1:0", workers: 4,
			lease: 30 * time.Second, cleanupEvery: time.Hour, strandedAfter: time.Hour, grace: 5 * time.Second, ready: ready}, out)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		b.Fatalf("serve: %v", err)
	}
	defer func() { stop(); <-served }()
	go func() { // a waiter past its deadline notices it
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			out.mu.Lock()
			out.seen.Broadcast()
			out.mu.Unlock()
		}
	}()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				sha, t0, err := sendPush("http://"+addr+"/hooks/demo", backlogSecret)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				sent[sha] = t0
				mu.Unlock()
				if !out.wait(sha, time.Now().Add(time.Minute)) {
					b.Errorf("no verdict for %s after a minute", sha)
					return
				}
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Minute); out.done() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d verdicts after 5 minutes", out.done(), n)
		}
	}
	elapsed := time.Since(start)
	out.mu.Lock()
	defer out.mu.Unlock()
	var lat []time.Duration
	for sha, t0 := range sent {
		lat = append(lat, out.at[sha].Sub(t0))
	}
	return lat, float64(n) / elapsed.Seconds()
}

// sendPush sends a signed Standard Webhooks push of a new commit to acme/app, and answers the
// commit and when the request was sent.
func sendPush(url, secret string) (string, time.Time, error) {
	b := make([]byte, 20)
	rand.Read(b)
	sha := hex.EncodeToString(b)
	body := fmt.Appendf(nil, `{"type":"push","data":{"repository":"acme/app","sha":%q,"ref":"refs/heads/main","commits":[{"id":%q,"message":"Update the README"}],"changed_paths":["README.md"]}}`, sha, sha)
	id, now := "msg_"+sha[:24], time.Now()
	sig, err := webhook.Sign(secret, id, now, body)
	if err != nil {
		return "", now, err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", now, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", now, err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", now, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return sha, now, nil
}
