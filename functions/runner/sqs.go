package runner

import (
	"context"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/queue"
)

// VisibilityAPI is the SQS call that holds a message back until its retry time.
type VisibilityAPI interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// SQSHandler is the runner Lambda's handler: an SQS batch in, the messages to retry out
// (ReportBatchItemFailures). A message that must come back later is made visible again at its
// retry time.
type SQSHandler struct {
	Runner   *Runner
	SQS      VisibilityAPI
	QueueURL string
}

// maxVisibility is SQS's longest visibility timeout (12 hours).
const maxVisibility = 12 * time.Hour

// Handle processes every record of the batch.
func (h *SQSHandler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var out events.SQSEventResponse
	ctx = FirstOfInvocation(ctx) // a message is "fresh" while at most a margin of it is spent
	for _, rec := range ev.Records {
		log := h.Runner.log().With("message", rec.MessageId)
		m, err := queue.Parse(rec.Body)
		if err != nil {
			log.Error("unreadable message acknowledged", "err", err)
			continue
		}
		res, err := h.Runner.Process(ctx, m)
		if err != nil {
			log.Error("process", "err", err)
		}
		if res.Done {
			continue
		}
		out.BatchItemFailures = append(out.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		if h.SQS != nil && rec.ReceiptHandle != "" {
			wait := min(max(time.Until(res.RetryAt), 0), maxVisibility)
			if _, err := h.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(h.QueueURL),
				ReceiptHandle: aws.String(rec.ReceiptHandle), VisibilityTimeout: int32(wait.Seconds())}); err != nil {
				log.Warn("visibility not changed; the queue's own timeout applies", "err", err)
			}
		}
	}
	return out, nil
}
