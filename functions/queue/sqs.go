package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQSAPI is the one SQS call the sender makes.
type SQSAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// SQS sends messages to an SQS queue.
type SQS struct {
	Client   SQSAPI
	QueueURL string
}

// maxDelay is SQS's longest message delay.
const maxDelaySeconds = 900

// Send implements Queue. A delay longer than SQS allows is cut to 15 minutes: the runner
// answers Busy again and the message comes back.
func (q *SQS) Send(ctx context.Context, m Message) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.QueueURL), MessageBody: aws.String(m.Body())}
	if secs := int32((m.Delay + 999_999_999) / 1_000_000_000); secs > 0 {
		in.DelaySeconds = min(secs, maxDelaySeconds)
	}
	if _, err := q.Client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("queue: send %s: %w", m.Key, err)
	}
	return nil
}
