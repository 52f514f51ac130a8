// Command hooks sends signed Standard Webhooks pushes to a running `amiss serve`, n of them,
// c at a time, each with its own id, and waits until the ledger root holds them all done. It is
// the load of docs/benchmarks.md's count of syncs per webhook (see serve-syncs.sh).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/hooks/demo", "route URL")
	n := flag.Int("n", 2000, "webhooks to send")
	c := flag.Int("c", 1, "webhooks in flight at once")
	root := flag.String("root", "", "ledger root to watch until every webhook is done")
	flag.Parse()
	secret := os.Getenv("AMISS_DEMO_SECRET")
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*n) {
				if err := send(*url, secret); err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	sent := time.Since(start)
	if *root != "" {
		limits, err := localfs.ReadLimits(*root, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		l, err := localfs.Open(context.Background(), *root, localfs.Config{Limits: limits})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer l.Close()
		for {
			st, err := l.Stats(context.Background())
			if err == nil && st.ByState[ledger.StateDone] >= int64(*n) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	fmt.Printf("sent %d (%d failed) in %v (%.0f/s); all done after %v\n", *n, failed.Load(), sent, float64(*n)/sent.Seconds(), time.Since(start))
}

func send(url, secret string) error {
	b := make([]byte, 20)
	rand.Read(b)
	sha := hex.EncodeToString(b)
	body := fmt.Appendf(nil, `{"type":"push","data":{"repository":"acme/app","sha":%q,"ref":"refs/heads/main","commits":[{"id":%q,"message":"Update the README"}],"changed_paths":["README.md"]}}`, sha, sha)
	id, now := "msg_"+sha[:24], time.Now()
	sig, err := webhook.Sign(secret, id, now, body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
