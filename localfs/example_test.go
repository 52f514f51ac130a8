package localfs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// A long-running process prepares its root once (recovery and debris collection, bounded),
// then gives each worker a session: a handle on the same root, its locks and settings, made
// without any I/O. Closing a session leaves the root open; closing the prepared handle ends
// them all. A Lambda cold start calls Open instead, which reads one file.
func ExamplePrepare() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "amiss-example")
	defer os.RemoveAll(dir)
	root, err := localfs.Prepare(ctx, filepath.Join(dir, "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer root.Close()

	// Two workers, each with its own session, admit and run one delivery each.
	var wg sync.WaitGroup
	outcomes := make([]string, 2)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := root.Session()
			defer s.Close()
			body := fmt.Appendf(nil, `{"after":"%d"}`, i)
			d := ledger.Delivery{Binding: ledger.Binding{Route: "main", Scheme: "github-sha256",
				Identity: ledger.SumBody(body).String(), BodyDigest: ledger.SumBody(body)}, Change: []byte(`{}`)}
			a, _ := s.Admit(ctx, d)
			c, _ := s.Claim(ctx, d.Key(), d.Binding.Digest(), fmt.Sprintf("worker-%d", i), time.Minute)
			staged, _ := s.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
			err := s.Complete(ctx, staged)
			outcomes[i] = fmt.Sprintf("worker %d: %v, %v, completed: %v", i, a.Outcome, c.Outcome, err == nil)
		}()
	}
	wg.Wait()
	for _, o := range outcomes {
		fmt.Println(o)
	}
	st, _ := root.Stats(ctx)
	fmt.Println("done:", st.ByState[ledger.StateDone])
	// Output:
	// worker 0: admitted, execute, completed: true
	// worker 1: admitted, execute, completed: true
	// done: 2
}
