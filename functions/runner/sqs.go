package runner

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
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

// Handle processes the batch's records side by side, each with the whole invocation's time
// (each is the first of its invocation): a record whose provider is slow holds its own
// goroutine, never the records behind it. What bounds the requests to one provider is the
// route's publish gate (publish.concurrency for the API, half of it for one repository): a
// record that finds no room waits for it while the invocation has time for its requests, and
// is otherwise handed back uncounted, visible again a second later.
func (h *SQSHandler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx = waitForRoom(FirstOfInvocation(ctx)) // every record has all the invocation's time
	back := make([]bool, len(ev.Records))
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				// A panic in one record fails that record, not the process and the batch's
				// other records (the Lambda runtime recovers only its handler's goroutine).
				if p := recover(); p != nil {
					h.Runner.log().Error("panic while processing a record; it comes back after the queue's visibility timeout",
						"message", rec.MessageId, "panic", p, "stack", string(debug.Stack()))
					back[i] = true
				}
			}()
			back[i] = h.handle(ctx, rec)
		}()
	}
	wg.Wait()
	var out events.SQSEventResponse
	for i, rec := range ev.Records {
		if back[i] {
			out.BatchItemFailures = append(out.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		}
	}
	return out, nil
}

// handle processes one record and reports whether it must come back; it then makes the
// message visible again at its retry time. A record whose verdict waits for another's post on
// its subject is then parked there with its receipt handle: the holder's report, made by
// whichever invocation holds the grant, makes it visible again at once (SQSHandler.wake).
func (h *SQSHandler) handle(ctx context.Context, rec events.SQSMessage) bool {
	log := h.Runner.log().With("message", rec.MessageId)
	m, err := queue.Parse(rec.Body)
	if err != nil {
		log.Error("unreadable message acknowledged", "err", err)
		return false
	}
	res, err := h.Runner.Process(withWaker(ctx, h.wake), m)
	if err != nil {
		log.Error("process", "err", err)
	}
	if res.Done {
		return false
	}
	if h.SQS != nil && rec.ReceiptHandle != "" {
		if !h.comeBack(ctx, log, rec.ReceiptHandle, res.RetryAt) {
			return true
		}
		if at, ok := h.Runner.park(ctx, res, sqsWakePrefix+rec.ReceiptHandle); ok {
			h.comeBack(ctx, log, rec.ReceiptHandle, at) // the grant it waited for ended meanwhile
		}
	}
	return true
}

// comeBack makes the message of handle visible again at at (the runner's clock), and reports
// whether it could.
func (h *SQSHandler) comeBack(ctx context.Context, log *slog.Logger, handle string, at time.Time) bool {
	// Whole seconds, rounded up: a record must not come back before its retry time (a second
	// measured a few milliseconds late is not zero).
	wait := min(max(at.Sub(h.Runner.now()), 0), maxVisibility)
	secs := int32((wait + time.Second - 1) / time.Second)
	if _, err := h.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(h.QueueURL),
		ReceiptHandle: aws.String(handle), VisibilityTimeout: secs}); err != nil {
		log.Warn("visibility not changed; the queue's own timeout applies", "err", err)
		return false
	}
	return true
}

const sqsWakePrefix = "sqs:"

// wake makes the parked message a wake names visible now. Its receipt handle is the one it was
// parked with, valid while the message is in flight; once the message came back by itself and
// was received again, SQS refuses the old handle, and nothing is lost.
func (h *SQSHandler) wake(ctx context.Context, w string) {
	handle, ok := strings.CutPrefix(w, sqsWakePrefix)
	if !ok || h.SQS == nil {
		return
	}
	if _, err := h.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(h.QueueURL),
		ReceiptHandle: aws.String(handle), VisibilityTimeout: 0}); err != nil {
		h.Runner.log().Info("a parked message was not woken; it comes back when the grant it waited for ends", "err", err)
	}
}
