// Command ingress is the ingress Lambda function: wiring only (see package wiring).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "ingress", Secrets: wiring.WebhookSecrets})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	m := wiring.Metrics(os.Stdout, "ingress")
	h := &ingress.Handler{Config: b.Config, Ledger: b.Ledger, Queue: q, Secrets: b.Secrets, Log: b.Log, Metrics: m}
	lambda.Start(wiring.Invoked(b.Invocations, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		defer m.Flush()
		return h.Handle(ctx, req)
	}))
}
