// Command cleanup is the scheduled cleanup Lambda function: wiring only.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/metrics"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "cleanup", Prepare: true})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "cleanup"}, Out: os.Stdout}
	h := &cleanup.Handler{Ledger: b.Ledger, Queue: q, Log: b.Log, Metrics: m}
	lambda.Start(func(ctx context.Context) (cleanup.Summary, error) {
		defer m.Flush()
		return h.Handle(ctx)
	})
}
