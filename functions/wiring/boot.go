package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/ledger"
)

// Boot is what every function starts with.
type Boot struct {
	Log    *slog.Logger
	Config *config.Config
	AWS    aws.Config
	Ledger ledger.Ledger
}

// Start builds a function's start-up: JSON logs on stdout, the configuration (checked against
// AMISS_SECRET_ARNS), the AWS configuration and the ledger (prepared for long-lived work such as
// cleanup, only opened on a cold start otherwise). A failure is logged with its step and the
// process exits: a function that cannot start must not take traffic.
func Start(ctx context.Context, function string, prepare bool) *Boot {
	b := &Boot{Log: slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", function)}
	var err error
	if b.Config, err = Config(); err != nil {
		b.Fail("configuration", err)
	}
	if b.AWS, err = AWS(ctx); err != nil {
		b.Fail("aws", err)
	}
	if b.Ledger, err = Ledger(ctx, b.Config, prepare); err != nil {
		b.Fail("ledger", err)
	}
	return b
}

// Fail logs why the function cannot start and exits.
func (b *Boot) Fail(step string, err error) {
	b.Log.Error(fmt.Sprintf("cannot start: %s", step), "err", err)
	os.Exit(1)
}
