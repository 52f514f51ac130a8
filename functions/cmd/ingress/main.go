// Command ingress is the ingress Lambda function: wiring only (see package wiring).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "ingress", Secrets: true})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	h := &ingress.Handler{Config: b.Config, Ledger: b.Ledger, Queue: q, Secrets: b.Secrets, Log: b.Log}
	lambda.Start(h.Handle)
}
