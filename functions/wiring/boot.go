package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/ledger"
)

// Boot is what every function starts with.
type Boot struct {
	Log     *slog.Logger
	Config  *config.Config
	AWS     aws.Config
	Ledger  ledger.Ledger
	Secrets *secrets.Resolver
}

// Function says what one Lambda function needs at start.
type Function struct {
	Name string
	// Prepare prepares the ledger (long-lived work such as cleanup); otherwise a cold start
	// only opens it.
	Prepare bool
	// Secrets reads every secret the configuration refers to at start, so that one that
	// cannot be read stops the function instead of failing each request.
	Secrets bool
}

// Start builds a function's start-up: JSON logs on stdout, the configuration (checked against
// AMISS_SECRET_ARNS), the AWS configuration, the secrets (each read once when fn.Secrets) and
// the ledger. A failure is logged with its step and the process exits: a function that cannot
// start must not take traffic.
func Start(ctx context.Context, fn Function) *Boot {
	b := &Boot{Log: slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", fn.Name)}
	var err error
	if b.Config, err = Config(); err != nil {
		b.Fail("configuration", err)
	}
	if b.AWS, err = AWS(ctx); err != nil {
		b.Fail("aws", err)
	}
	b.Secrets = Secrets(&b.AWS)
	if fn.Secrets {
		if err := ResolveSecrets(ctx, b.Config, b.Secrets); err != nil {
			b.Fail("secrets", err)
		}
	}
	if b.Ledger, err = Ledger(ctx, b.Config, fn.Prepare); err != nil {
		b.Fail("ledger", err)
	}
	return b
}

// Fail logs why the function cannot start and exits.
func (b *Boot) Fail(step string, err error) {
	b.Log.Error(fmt.Sprintf("cannot start: %s", step), "err", err.Error())
	os.Exit(1)
}
