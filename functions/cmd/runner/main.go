// Command runner is the runner Lambda function (SQS batches): wiring only.
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/metrics"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx := context.Background()
	fail := func(what string, err error) {
		log.Error("runner cannot start", "step", what, "err", err)
		os.Exit(1)
	}
	cfg, err := wiring.Config()
	if err != nil {
		fail("configuration", err)
	}
	awsCfg, err := wiring.AWS(ctx)
	if err != nil {
		fail("aws", err)
	}
	l, err := wiring.Ledger(ctx, cfg, false)
	if err != nil {
		fail("ledger", err)
	}
	lease, err := wiring.Duration(wiring.EnvLease, time.Minute)
	if err != nil {
		fail("lease", err)
	}
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "runner"}, Out: os.Stdout}
	r := &runner.Runner{Ledger: l, Routes: wiring.Routes(cfg, wiring.Secrets(&awsCfg), nil, log), Owner: os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"),
		Lease: lease, Log: log, Metrics: m}
	h := &runner.SQSHandler{Runner: r, SQS: sqs.NewFromConfig(awsCfg), QueueURL: wiring.Getenv(wiring.EnvQueueURL)}
	lambda.Start(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		defer m.Flush()
		return h.Handle(ctx, ev)
	})
}
