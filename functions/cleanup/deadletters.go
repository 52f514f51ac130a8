package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

// A message reaches the dead-letter queue after ten receives: by design when a publication
// keeps failing through a long provider outage, or when the runner keeps dying on it. Its row
// tells what the message still means, so the cleanup reads the dead-letter queue and empties
// it of every message a row explains:
//
//   - the row is pending, running or saved: the delivery is re-driven (a fresh message on the
//     delivery queue, receive count zero), then the dead letter is deleted;
//   - the row is done, abandoned or superseded, or there is no row (forgotten, or never in
//     this ledger): nothing is left to do, the dead letter is deleted;
//   - the body is not a delivery message, or the row is bound to another body: no row explains
//     the message, and it stays for an operator (counted as unexplained).
//
// So a message left in the dead-letter queue means something no row can explain, and the
// dead-letter alarm (on the unexplained count) fires for those only. A re-drive is sent before
// the dead letter is deleted: a failure between the two leaves a duplicate message, which the
// runner answers as any other duplicate, never a lost delivery.

// DeadLetter is one message received from the dead-letter queue.
type DeadLetter struct {
	ID      string
	Receipt string
	Body    string
}

// DeadLetterQueue is the dead-letter queue as the cleanup reads it.
type DeadLetterQueue interface {
	// Receive returns up to ten messages and hides them from other readers until the current
	// cleanup run is over; none when the queue has nothing visible.
	Receive(ctx context.Context) ([]DeadLetter, error)
	// Delete removes a message Receive returned.
	Delete(ctx context.Context, m DeadLetter) error
}

// DeadLetterSummary is what one run did with the dead-letter queue.
type DeadLetterSummary struct {
	// Redriven messages had an unfinished row: the delivery was queued again.
	Redriven int
	// Removed messages had a finished row, or none.
	Removed int
	// Unexplained messages were left in the queue: no row explains them.
	Unexplained int
	// Complete reports that the queue was read until it had nothing visible (or the run's
	// share of messages was read) without an error.
	Complete bool
}

// maxDeadLetterBatches bounds the receives of one run (ten messages each): the rest waits for
// the next run.
const maxDeadLetterBatches = 20

// deadLetters empties the dead-letter queue of the messages a row explains, within the time
// the run has left above margin. A message seen twice in one run means the queue handed out
// again what it had hidden: the run stops reading there. An error of the queue or the ledger
// stops the reading and is returned; the messages not dealt with come back by themselves.
func (h *Handler) deadLetters(ctx context.Context, log *slog.Logger, margin time.Duration) (DeadLetterSummary, error) {
	var s DeadLetterSummary
	seen := map[string]bool{}
	for range maxDeadLetterBatches {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < margin {
			return s, nil
		}
		batch, err := h.DeadLetters.Receive(ctx)
		if err != nil {
			return s, fmt.Errorf("cleanup: reading the dead-letter queue: %w", err)
		}
		if len(batch) == 0 {
			s.Complete = true
			return s, nil
		}
		for _, m := range batch {
			if seen[m.ID] {
				s.Complete = true
				return s, nil
			}
			seen[m.ID] = true
			if err := h.deadLetter(ctx, log, m, &s); err != nil {
				return s, err
			}
		}
	}
	s.Complete = true
	return s, nil
}

// deadLetter deals with one message (see the package's dead-letter comment).
func (h *Handler) deadLetter(ctx context.Context, log *slog.Logger, m DeadLetter, s *DeadLetterSummary) error {
	msg, err := queue.Parse(m.Body)
	if err != nil {
		s.Unexplained++
		log.Error("dead letter kept: it is not a delivery message", "message_id", m.ID, "err", err)
		return nil
	}
	key := msg.Key.String()
	row, err := h.Ledger.Inspect(ctx, msg.Key)
	switch {
	case errors.Is(err, ledger.ErrUnknownDelivery):
		log.Info("dead letter removed: the ledger holds no such delivery (forgotten, or never admitted here)", "message_id", m.ID, "key", key)
		return h.removeDeadLetter(ctx, m, &s.Removed)
	case err != nil:
		return fmt.Errorf("cleanup: dead letter %s: reading row %s: %w", m.ID, key, err)
	case row.Binding.Digest() != msg.Binding:
		s.Unexplained++
		log.Error("dead letter kept: its binding is not the row's (a message from another ledger, or a stale queue)", "message_id", m.ID, "key", key)
		return nil
	case row.State.Terminal():
		log.Info("dead letter removed: the delivery is finished", "message_id", m.ID, "key", key, "state", row.State.String())
		return h.removeDeadLetter(ctx, m, &s.Removed)
	}
	if err := h.Queue.Send(ctx, queue.Message{Key: msg.Key, Binding: msg.Binding}); err != nil {
		return fmt.Errorf("cleanup: dead letter %s: re-driving %s: %w", m.ID, key, err)
	}
	log.Info("dead letter re-driven: the delivery is queued again", "message_id", m.ID, "key", key, "state", row.State.String())
	return h.removeDeadLetter(ctx, m, &s.Redriven)
}

func (h *Handler) removeDeadLetter(ctx context.Context, m DeadLetter, count *int) error {
	if err := h.DeadLetters.Delete(ctx, m); err != nil {
		return fmt.Errorf("cleanup: deleting dead letter %s: %w", m.ID, err)
	}
	*count++
	return nil
}

// SQSDeadLetterAPI is the SQS calls the cleanup makes on the dead-letter queue.
type SQSDeadLetterAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// SQSDeadLetters is an SQS dead-letter queue.
type SQSDeadLetters struct {
	Client   SQSDeadLetterAPI
	QueueURL string
	// Hide is how long a received message stays hidden: at least a cleanup run, so one run
	// never reads a message twice, and less than the schedule's period, so the next run reads
	// again what this one kept (default 4 minutes, the cleanup function's timeout).
	Hide time.Duration
}

// Receive implements DeadLetterQueue with a one-second long poll, which asks every SQS server
// (a short poll may answer nothing while messages wait).
func (q *SQSDeadLetters) Receive(ctx context.Context) ([]DeadLetter, error) {
	hide := q.Hide
	if hide <= 0 {
		hide = 4 * time.Minute
	}
	out, err := q.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.QueueURL),
		MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: int32(hide / time.Second)})
	if err != nil {
		return nil, err
	}
	batch := make([]DeadLetter, 0, len(out.Messages))
	for _, m := range out.Messages {
		batch = append(batch, DeadLetter{ID: aws.ToString(m.MessageId), Receipt: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body)})
	}
	return batch, nil
}

// Delete implements DeadLetterQueue.
func (q *SQSDeadLetters) Delete(ctx context.Context, m DeadLetter) error {
	_, err := q.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.QueueURL), ReceiptHandle: aws.String(m.Receipt)})
	return err
}
