package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/subject"
	"github.com/amiss-ci/amiss/ledger"
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

// In Lambda the message carries the publish schedule: a failed publication makes it visible
// again at the next attempt (here, the provider's Retry-After of two hours), never sooner, and
// the row is not abandoned.
func TestSQSVisibilityCarriesThePublishSchedule(t *testing.T) {
	w := newWorld(t)
	w.clock.Set(time.Now())
	p := &scripted{clock: w.clock, answer: func(time.Time) error {
		return &publish.Error{Class: publish.Transient, Status: 503, RetryAfter: 2 * time.Hour, Err: errors.New("503")}
	}}
	r := w.runner("a", verdict("success", "ok"))
	r.Routes = func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: verdict("success", "ok"), Publisher: p, Context: "c"}, nil
	}
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	out, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", ReceiptHandle: "rh1", Body: w.msg.Body()}}})
	if err != nil || len(out.BatchItemFailures) != 1 || w.state(t) != ledger.StateSaved {
		t.Fatalf("%+v %v, row %v", out, err, w.state(t))
	}
	if len(vis.got) != 1 || vis.got[0].VisibilityTimeout < 7190 || vis.got[0].VisibilityTimeout > 7200 {
		t.Fatalf("visibility %+v: want about two hours", vis.got)
	}
}

// The first message of an invocation is claimed with whatever time the invocation has; a
// later one only with a whole lease window left besides the two margins, so that no message
// late in a batch spends an attempt on an evaluation given no time. It goes back to the queue
// at once, unclaimed.
func TestALateMessageOfABatchWaitsForAnInvocationOfItsOwn(t *testing.T) {
	w := newWorld(t)
	w.clock.Set(time.Now())
	// The first message's evaluation takes more than a margin of the invocation.
	r := w.runner("a", evalFunc(func(context.Context, subject.Subject) (evaluate.Verdict, error) {
		time.Sleep(200 * time.Millisecond)
		return evaluate.Verdict{State: evaluate.Success, Description: "x"}, nil
	}))
	r.Margin = 100 * time.Millisecond // the lease window is 30 s
	vis := &visibility{}
	h := &runner.SQSHandler{Runner: r, SQS: vis, QueueURL: "https://sqs.example/q"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m0", ReceiptHandle: "rh0", Body: "not a message"}, // acknowledged: not the first processed
		{MessageId: "m1", ReceiptHandle: "rh1", Body: w.msg.Body()},
		{MessageId: "m2", ReceiptHandle: "rh2", Body: w.msg.Body()},
	}})
	if err != nil || len(out.BatchItemFailures) != 1 || out.BatchItemFailures[0].ItemIdentifier != "m2" {
		t.Fatalf("%+v %v: want m1 processed and m2 back to the queue unclaimed", out, err)
	}
	if len(w.pub.all()) != 1 || w.state(t) != ledger.StateDone {
		t.Fatalf("published %v, row %v", w.pub.all(), w.state(t))
	}
	if len(vis.got) != 1 || vis.got[0].VisibilityTimeout != 0 {
		t.Fatalf("visibility %+v: want m2 visible again at once", vis.got)
	}
}
