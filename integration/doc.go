// Package integration holds the tests that cross real processes and the deployment's own
// files; it has no code of its own.
//
//   - template_test.go: template.yaml against the code: every function's build target exists,
//     the environment the code reads is the one the template sets (and events/env.json sets
//     only declared variables), each function's event decodes into its handler's input, the
//     IAM policies cover the S3 and SQS calls the ledger and the queue make, and the defects a
//     first deploy found stay fixed.
//   - lambda_test.go: the ingress, runner and cleanup built as they are deployed (bootstrap, lambda.norpc)
//     and run under the pinned runtime interface emulator on loopback, with stand-in SQS and
//     provider servers, over a file ledger and over MinIO (the S3 ledger): a runner killed
//     mid-evaluation, invoked again once its lease has ended, publishes exactly one verdict.
//   - template_ops_test.go: the template as an operator runs it: an alarm for each way the
//     deployment fails (with OK actions and a runbook entry), the API's throttling and each
//     function's reserved concurrency, the EFS variant's own network, each role's grants.
//   - lambda_ops_test.go: the cleanup bootstrap emptying the dead-letter queue of what the
//     ledger explains, the request id and cold-start mark on every log line, and a function
//     that cannot start failing every invocation.
//   - template_alarms_test.go: the alarms on what users feel (refused and abandoned verdicts,
//     refused webhooks, the oldest unfinished row, the EFS ledger's throughput), each threshold
//     against the code's schedules, no page on a new stack, and a runbook section per alarm.
//   - template_access_test.go: the throttles' sizing, the access log, each role's log group,
//     the operator's way to either ledger and its IAM, the dashboard, the log groups kept, the
//     build's stamp and the linted variants.
//   - lambda_operator_test.go: the operator function's bootstrap reading and republishing, and
//     refusing to migrate a root of an older format.
//   - invoke_test.go: the README's local Lambda loop (make invoke-ingress, invoke-runner,
//     invoke-cleanup) run as a user runs it, the ingress's start-up line naming the build.
//
// The emulator comes from make rie and MinIO from the local image (make minio-image, selected
// by AMISS_MINIO_IMAGE); a test whose tool is missing is skipped and says why, unless
// AMISS_REQUIRE_RIE=1 or AMISS_REQUIRE_DOCKER=1 makes that a failure.
package integration
