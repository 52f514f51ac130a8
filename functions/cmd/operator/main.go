// Command operator is the operator function (the EFS variant): amiss ledger's read commands
// and republish, invoked with the AWS CLI, on a ledger only the stack's network reaches.
// Wiring only (see package operator).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	b := wiring.Start(context.Background(), wiring.Function{Name: "operator", Operator: true})
	q, err := wiring.SQSQueue(b.AWS)
	if err != nil {
		b.Fail("queue", err)
	}
	h := &operator.Handler{Ledger: b.Ledger, Queue: q}
	lambda.Start(wiring.Invoked(b.Invocations, func(ctx context.Context, req operator.Request) (operator.Response, error) {
		resp, err := h.Handle(ctx, req)
		if err != nil {
			b.Log.ErrorContext(ctx, "operator request failed", "command", req.Command, "err", err.Error())
		} else {
			b.Log.InfoContext(ctx, "operator request", "command", req.Command, "key", req.Key, "republished", len(resp.Republished))
		}
		return resp, err
	}))
}
