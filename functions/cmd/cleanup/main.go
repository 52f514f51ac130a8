// Command cleanup is the scheduled cleanup Lambda function: wiring only.
package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "cleanup", Prepare: true})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	m := wiring.Metrics(os.Stdout, "cleanup")
	h := &cleanup.Handler{Ledger: b.Ledger, Queue: q, Log: b.Log, Metrics: m}
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
