package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/runner"
)

type visibility struct {
	got []*sqs.ChangeMessageVisibilityInput
}

func (v *visibility) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.got = append(v.got, in)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func TestSQSBatch(t *testing.T) {
	w := newWorld(t)
	w.clock.Set(time.Now())
	// Hold the row with another owner: the message is Busy and comes back at retryAt.
	w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "other", time.Minute)
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: w.runner("a", verdict("success", "x")), SQS: vis, QueueURL: "https://sqs.example/q"}
	out, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", ReceiptHandle: "rh1", Body: w.msg.Body()},
		{MessageId: "m2", ReceiptHandle: "rh2", Body: "not a message"},
	}})
	if err != nil || len(out.BatchItemFailures) != 1 || out.BatchItemFailures[0].ItemIdentifier != "m1" {
		t.Fatalf("%+v %v: want m1 to come back and m2 (unreadable) acknowledged", out, err)
	}
	if len(vis.got) != 1 || aws.ToString(vis.got[0].ReceiptHandle) != "rh1" || vis.got[0].VisibilityTimeout < 50 || vis.got[0].VisibilityTimeout > 60 {
		t.Fatalf("visibility %+v", vis.got)
	}
}
