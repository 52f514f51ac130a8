// Command runner is the runner Lambda function (SQS batches): wiring only.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	ctx := context.Background()
	b := wiring.Start(ctx, wiring.Function{Name: "runner", Secrets: wiring.RunnerSecrets})
	lease, err := wiring.Duration(wiring.EnvLease, time.Minute)
	if err != nil {
		b.Fail("lease", err)
	}
	m := wiring.Metrics(os.Stdout, "runner")
	owner := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME") // names this execution environment in leases
	if owner == "" {
		owner = fmt.Sprintf("runner-%d", os.Getpid())
	}
	r := &runner.Runner{Ledger: b.Ledger, Routes: wiring.Routes(b.Config, b.Secrets, nil, b.Log),
		Owner: owner, Lease: lease, Log: b.Log, Metrics: m, PublishBudget: b.Config.PublishBudget()}
	h := &runner.SQSHandler{Runner: r, SQS: wiring.SQSClient(b.AWS), QueueURL: wiring.Getenv(wiring.EnvQueueURL)}
	lambda.Start(wiring.Invoked(b.Invocations, func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		defer m.Flush()
		return h.Handle(ctx, ev)
	}))
}
