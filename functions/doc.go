// Package functions holds the handlers of amiss's three Lambda functions and what they share;
// it has no code of its own. Handlers depend on the ledger contract only, never on a backend:
// functions/wiring is the one place that opens a FileLedger or an S3 ledger (see DESIGN.md
// section 2).
//
//   - ingress: authenticates a webhook (webhook), reads its change (change, by the provider
//     table in provider), admits it into the ledger and queues its key (queue); it serves API
//     Gateway, and plain HTTP for amiss serve.
//   - runner: claims a queued delivery, evaluates it (evaluate), saves the verdict and
//     publishes it as a commit status (publish); SQS batches in AWS, runner.Local over the
//     in-process queue locally.
//   - providerapi: one client per provider API (github, gitea, gitlab, bitbucket,
//     bitbucketdc) over a shared core; the publishers and the readers of what a webhook
//     leaves out speak to the providers only through them.
//   - cleanup: the scheduled cleanup passes, which re-enqueue stranded rows.
//   - config and secrets: the YAML configuration, and secrets read at run time.
//   - operator: listing rows, republishing abandoned verdicts, recovery at a server's start,
//     and the operator function's commands (Handler).
//   - metrics: CloudWatch Embedded Metric Format lines.
//   - wiring: builds the configuration, the ledger, the queue, the secrets and the routes
//     from the environment; cmd/ingress, cmd/runner, cmd/cleanup and cmd/operator are the four mains,
//     wiring only. e2e runs the whole path in one process.
package functions
