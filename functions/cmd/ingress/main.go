// Command ingress is the ingress Lambda function: wiring only (see package wiring).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/wiring"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx := context.Background()
	fail := func(what string, err error) {
		log.Error("ingress cannot start", "step", what, "err", err)
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
	q, err := wiring.SQSQueue(awsCfg)
	if err != nil {
		fail("queue", err)
	}
	h := &ingress.Handler{Config: cfg, Ledger: l, Queue: q, Secrets: wiring.Secrets(&awsCfg), Log: log}
	lambda.Start(h.Handle)
}
