// Command cleanup is the scheduled cleanup Lambda function: wiring only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "cleanup", Prepare: true, Secrets: wiring.CatchUpSecrets})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	m := wiring.Metrics(os.Stdout, "cleanup")
	h := &cleanup.Handler{Ledger: b.Ledger, Queue: q, Log: b.Log, Metrics: m}
	if st, ok := b.Ledger.(ledger.StateStore); ok {
		// Catch-up of the routes' failed webhook deliveries (docs/catchup.md); its credentials,
		// read once at start to fail early, are read again at each run, so a rotated one needs
		// no restart.
		r := &catchup.Runner{State: st, Log: b.Log, Metrics: m}
		h.CatchUp = func(ctx context.Context) error {
			sources, err := catchup.Sources(ctx, b.Config, b.Secrets, nil)
			_, rerr := r.RunAll(ctx, sources)
			return errors.Join(err, rerr)
		}
	}
	if dl := wiring.DeadLetters(b.AWS); dl != nil {
		h.DeadLetters = dl
	} else {
		b.Log.Warn("no dead-letter queue (" + wiring.EnvDeadLetterQueueURL + " is not set): dead letters are left alone")
	}
	// The schedule's event carries nothing the cleanup reads.
	lambda.Start(wiring.Invoked(b.Invocations, func(ctx context.Context, _ json.RawMessage) (cleanup.Summary, error) {
		defer m.Flush()
		return h.Handle(ctx)
	}))
}
