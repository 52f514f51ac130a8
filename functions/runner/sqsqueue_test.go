package runner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
)

// sqsQueue is an SQS queue as the runner Lambda meets it: pollers receive batches of up to ten
// visible messages, each receive hiding a message for the queue's visibility timeout under a
// new receipt handle; ChangeMessageVisibility takes the handle of the latest receive only (SQS
// refuses an older one); a message the handler does not report back is deleted. Visibility is
// reckoned on clock.
type sqsQueue struct {
	mu      sync.Mutex
	clock   func() time.Time
	timeout time.Duration
	msgs    []*sqsMsg
	seq     int
	// handleLen, when set, is the length every receipt handle is padded to (SQS's are at most
	// 1,024 characters).
	handleLen int
}

type sqsMsg struct {
	id, body, handle string
	visibleAt        time.Time
	receives         int
	deleted          bool
}

func newSQSQueue(clock func() time.Time) *sqsQueue {
	return &sqsQueue{clock: clock, timeout: 18 * time.Minute}
}

var errStaleHandle = errors.New("ReceiptHandleIsInvalid: the receipt handle has expired")

// send queues m, visible at once, and returns its message id.
func (q *sqsQueue) send(m queue.Message) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	id := fmt.Sprint("msg-", q.seq)
	q.msgs = append(q.msgs, &sqsMsg{id: id, body: m.Body(), visibleAt: q.clock()})
	return id
}

// receive takes up to n visible messages.
func (q *sqsQueue) receive(n int) events.SQSEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock()
	var ev events.SQSEvent
	for _, m := range q.msgs {
		if len(ev.Records) == n {
			break
		}
		if m.deleted || m.visibleAt.After(now) {
			continue
		}
		q.seq++
		m.receives++
		m.handle = fmt.Sprintf("AQEB%d+%s/%d==", q.seq, m.id, m.receives)
		if pad := q.handleLen - len(m.handle); pad > 0 {
			m.handle = strings.Repeat("A", pad) + m.handle
		}
		m.visibleAt = now.Add(q.timeout)
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: m.id, ReceiptHandle: m.handle, Body: m.body})
	}
	return ev
}

func (q *sqsQueue) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if !m.deleted && m.handle == aws.ToString(in.ReceiptHandle) {
			m.visibleAt = q.clock().Add(time.Duration(in.VisibilityTimeout) * time.Second)
			return &sqs.ChangeMessageVisibilityOutput{}, nil
		}
	}
	return nil, errStaleHandle
}

// done deletes the records of ev that out does not report back.
func (q *sqsQueue) done(ev events.SQSEvent, out events.SQSEventResponse) {
	back := map[string]bool{}
	for _, f := range out.BatchItemFailures {
		back[f.ItemIdentifier] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range ev.Records {
		for _, m := range q.msgs {
			if m.id == r.MessageId && m.handle == r.ReceiptHandle && !back[r.MessageId] {
				m.deleted = true
			}
		}
	}
}

// receives counts the times message id was received.
func (q *sqsQueue) receives(id string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if m.id == id {
			return m.receives
		}
	}
	return 0
}

// poll is one Lambda runner: until ctx ends it receives batches and hands each to a handler of
// r on this queue, in an invocation of the given length, polling every few milliseconds.
func (q *sqsQueue) poll(ctx context.Context, r *runner.Runner, invocation time.Duration) {
	h := &runner.SQSHandler{Runner: r, SQS: q, QueueURL: "https://sqs.example/q"}
	for ctx.Err() == nil {
		ev := q.receive(10)
		if len(ev.Records) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, invocation)
		out, _ := h.Handle(ictx, ev)
		cancel()
		q.done(ev, out)
	}
}

// pollers runs n Lambda runners, each made by mk, until the test's cleanup.
func (q *sqsQueue) pollers(t interface{ Cleanup(func()) }, n int, mk func(i int) *runner.Runner) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		r := mk(i)
		wg.Add(1)
		go func() { defer wg.Done(); q.poll(ctx, r, 3*time.Minute) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// visible reports whether message id is visible now (not in flight, not deleted).
func (q *sqsQueue) visible(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if m.id == id {
			return !m.deleted && !m.visibleAt.After(q.clock())
		}
	}
	return false
}

// visibleAt is when message id becomes visible.
func (q *sqsQueue) visibleAt(id string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if m.id == id {
			return m.visibleAt
		}
	}
	return time.Time{}
}
