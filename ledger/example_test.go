package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// One delivery through the contract, on a FileLedger in a temporary folder: admitted, claimed
// for evaluation, its verdict saved, published and completed; a redelivery afterwards is
// answered from the row, and a claim grants nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "amiss-example")
	defer os.RemoveAll(dir)
	l, err := localfs.Open(ctx, filepath.Join(dir, "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	body := []byte(`{"after":"4f2c..."}`)
	d := ledger.Delivery{
		Binding: ledger.Binding{Route: "main", Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
			BodyDigest: ledger.SumBody(body)},
		Change: []byte(`{"repository":"acme/app","sha":"4f2c"}`),
	}
	a, _ := l.Admit(ctx, d)
	fmt.Println("admit:", a.Outcome)

	c, _ := l.Claim(ctx, d.Key(), d.Binding.Digest(), "runner-1", time.Minute)
	fmt.Println("claim:", c.Outcome, "fence", c.Lease.Fence)

	staged, _ := l.Save(ctx, *c.Lease, []byte(`{"state":"success"}`))
	// ... publish staged.Report as the commit status, then:
	if err := l.Complete(ctx, staged); err != nil {
		fmt.Println(err)
	}

	a, _ = l.Admit(ctx, d)
	fmt.Println("redelivery:", a.Outcome)
	c, _ = l.Claim(ctx, d.Key(), d.Binding.Digest(), "runner-2", time.Minute)
	fmt.Println("claim again:", c.Outcome)
	// Output:
	// admit: admitted
	// claim: execute fence 1
	// redelivery: duplicate
	// claim again: duplicate
}
