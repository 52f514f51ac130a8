package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/internal/buildinfo"
	"github.com/amiss-ci/amiss/ledger"
)

// Boot is what every function starts with.
type Boot struct {
	Log *slog.Logger
	// Invocations marks the log lines with the invocation they belong to: wrap the handler
	// with Invoked.
	Invocations *Invocations
	Config      *config.Config
	AWS         aws.Config
	Ledger      ledger.Ledger
	Secrets     *secrets.Resolver
}

// Function says what one Lambda function needs at start.
type Function struct {
	Name string
	// Prepare prepares the ledger (long-lived work such as cleanup); otherwise a cold start
	// only opens it.
	Prepare bool
	// Secrets are the configuration's secrets the function reads. They are checked against
	// AMISS_SECRET_ARNS and each read once at start, so that one that cannot be read stops the
	// function instead of failing each request; the others are neither checked nor read (the
	// function's role may not read them).
	Secrets SecretSet
	// Operator starts the operator function: no configuration is read (Boot.Config is nil),
	// and the ledger is opened with the limits its root records, never made, prepared or
	// migrated (LedgerOptions.ReadOnly): a root that is missing or of an older format stops
	// the function at start, saying so.
	Operator bool
}

// Start builds a function's start-up: JSON logs on stdout (see NewLog), whose first line,
// "starting", names the build (version, commit: which build is deployed), the configuration
// (its fn.Secrets checked against AMISS_SECRET_ARNS), the AWS configuration, the secrets (each
// of fn.Secrets read once) and the ledger. A failure is logged with its step and the process
// exits. Lambda then fails the invocation that started it, and starts the function again at
// the next one: a function that cannot start fails every invocation, each with this log line.
func Start(ctx context.Context, fn Function) *Boot {
	b := &Boot{}
	b.Log, b.Invocations = NewLog(os.Stdout, fn.Name)
	build := buildinfo.Read()
	b.Log.Info("starting", "version", build.Version, "commit", build.Commit, "modified", build.Modified, "go", build.Go)
	var err error
	if fn.Operator {
		if b.AWS, err = AWS(ctx); err != nil {
			b.Fail("aws", err)
		}
		if b.Ledger, err = OpenLedger(ctx, Getenv(EnvLedger), LedgerOptions{ReadOnly: true}); err != nil {
			b.Fail("ledger", err)
		}
		return b
	}
	if b.Config, err = ConfigFor(fn.Secrets); err != nil {
		b.Fail("configuration", err)
	}
	if b.AWS, err = AWS(ctx); err != nil {
		b.Fail("aws", err)
	}
	b.Secrets = Secrets(&b.AWS)
	if err := resolveSecrets(ctx, b.Config, b.Secrets, fn.Secrets); err != nil {
		b.Fail("secrets", err)
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
