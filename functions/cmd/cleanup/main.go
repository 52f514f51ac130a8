// Command cleanup is the scheduled cleanup Lambda function: wiring only.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx := context.Background()
	fail := func(what string, err error) {
		log.Error("cleanup cannot start", "step", what, "err", err)
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
	l, err := wiring.Ledger(ctx, cfg, true)
	if err != nil {
		fail("ledger", err)
	}
	q, err := wiring.SQSQueue(awsCfg)
	if err != nil {
		fail("queue", err)
	}
	h := &cleanup.Handler{Ledger: l, Queue: q, Log: log}
	lambda.Start(func(ctx context.Context) (cleanup.Summary, error) { return h.Handle(ctx) })
}
