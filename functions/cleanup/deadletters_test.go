package cleanup_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// deadLetterWorld is a ledger holding a row in each state a dead letter can name, and the
// dead letters for them.
type deadLetterWorld struct {
	l                             ledger.Ledger
	pending, saved, done, dropped ledger.Delivery
	// letters maps a message id to its body.
	letters map[string]string
}

func newDeadLetterWorld(t *testing.T) *deadLetterWorld {
	t.Helper()
	ctx := context.Background()
	l, err := localfs.Open(ctx, filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := func(id string) ledger.Delivery {
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: id}}
		if _, err := l.Admit(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	staged := func(d ledger.Delivery) ledger.Staged {
		c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Minute)
		if err != nil || c.Lease == nil {
			t.Fatalf("claim %s: %+v %v", d.Binding.Identity, c, err)
		}
		s, err := l.Save(ctx, *c.Lease, []byte("report"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w := &deadLetterWorld{l: l, pending: d("pending"), saved: d("saved"), done: d("done"), dropped: d("abandoned")}
	// The saved row's publication failed and waits for its next attempt, as after an outage.
	if err := l.Release(ctx, staged(w.saved).Lease, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, staged(w.done)); err != nil {
		t.Fatal(err)
	}
	if err := l.Abandon(ctx, staged(w.dropped), "refused for good"); err != nil {
		t.Fatal(err)
	}
	msg := func(d ledger.Delivery) string { return queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}.Body() }
	forgotten := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "forgotten"}}
	w.letters = map[string]string{
		"m-pending":    msg(w.pending),
		"m-saved":      msg(w.saved),
		"m-done":       msg(w.done),
		"m-abandoned":  msg(w.dropped),
		"m-forgotten":  msg(forgotten),
		"m-other-body": queue.Message{Key: w.pending.Key(), Binding: ledger.Digest{7}}.Body(),
		"m-not-ours":   `{"hello":"world"}`,
	}
	return w
}

// memoryDeadLetters is a dead-letter queue in memory: Receive hands out what is not hidden,
// ten at a time, and hides it for the rest of the run.
type memoryDeadLetters struct {
	mu      sync.Mutex
	order   []string
	bodies  map[string]string
	hidden  map[string]bool
	deleted []string
	// failDelete makes Delete fail.
	failDelete error
}

func newMemoryDeadLetters(letters map[string]string) *memoryDeadLetters {
	q := &memoryDeadLetters{bodies: map[string]string{}, hidden: map[string]bool{}}
	for id, body := range letters {
		q.order = append(q.order, id)
		q.bodies[id] = body
	}
	sort.Strings(q.order)
	return q
}

func (q *memoryDeadLetters) Receive(context.Context) ([]cleanup.DeadLetter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []cleanup.DeadLetter
	for _, id := range q.order {
		if _, ok := q.bodies[id]; ok && !q.hidden[id] && len(out) < 10 {
			q.hidden[id] = true
			out = append(out, cleanup.DeadLetter{ID: id, Receipt: "rh-" + id, Body: q.bodies[id]})
		}
	}
	return out, nil
}

func (q *memoryDeadLetters) Delete(_ context.Context, m cleanup.DeadLetter) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failDelete != nil {
		return q.failDelete
	}
	delete(q.bodies, m.ID)
	q.deleted = append(q.deleted, m.ID)
	return nil
}

// left lists the messages still in the queue.
func (q *memoryDeadLetters) left() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, id := range q.order {
		if _, ok := q.bodies[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

func drain(t *testing.T, q *queue.Local) map[ledger.Key]ledger.Digest {
	t.Helper()
	got := map[ledger.Key]ledger.Digest{}
	for q.Len() > 0 {
		m, err := q.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got[m.Key] = m.Binding
	}
	return got
}

// The dead-letter queue keeps only what no row explains: an unfinished row's message is
// re-driven onto the delivery queue and removed, a finished or forgotten row's is removed, a
// message that is not a delivery message or names another body stays, and only those are
// counted as unexplained (the dead-letter alarm's metric).
func TestDeadLettersKeepOnlyWhatNoRowExplains(t *testing.T) {
	w := newDeadLetterWorld(t)
	dlq := newMemoryDeadLetters(w.letters)
	q := queue.NewLocal()
	g := gauges{}
	logs := &bytes.Buffer{}
	h := &cleanup.Handler{Ledger: w.l, Queue: q, DeadLetters: dlq, Metrics: g, Log: slog.New(slog.NewJSONHandler(logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := h.Handle(ctx)
	if err != nil || !sum.LapDone {
		t.Fatalf("%+v %v", sum, err)
	}
	if got := strings.Join(dlq.left(), ","); got != "m-not-ours,m-other-body" {
		t.Fatalf("left in the dead-letter queue: %s, want only the two no row explains\n%s", got, logs)
	}
	redriven := drain(t, q)
	if len(redriven) != 2 || redriven[w.pending.Key()] != w.pending.Binding.Digest() || redriven[w.saved.Key()] != w.saved.Binding.Digest() {
		t.Fatalf("re-driven %v: want the pending and the saved rows, with their bindings", redriven)
	}
	d := sum.DeadLetters
	if d.Redriven != 2 || d.Removed != 3 || d.Unexplained != 2 || !d.Complete {
		t.Fatalf("summary %+v", d)
	}
	if g["dead_letters_unexplained Count"] != 2 || g["dead_letters_redriven Count"] != 2 || g["dead_letters_removed Count"] != 3 ||
		g["cleanup_succeeded Count"] != 1 {
		t.Fatalf("metrics %v", g)
	}
	for _, want := range []string{`"msg":"dead letter kept: it is not a delivery message","message_id":"m-not-ours"`,
		`"msg":"dead letter kept: its binding is not the row's`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line %s\n%s", want, logs)
		}
	}

	// The next run finds the two kept messages again (the queue shows them once hidden no
	// more), and the alarm's metric still counts them: it stays on while they are there.
	dlq.hidden = map[string]bool{}
	g = gauges{}
	h.Metrics = g
	if sum, err = h.Handle(ctx); err != nil || sum.DeadLetters.Unexplained != 2 || g["dead_letters_unexplained Count"] != 2 {
		t.Fatalf("second run: %+v %v %v", sum.DeadLetters, err, g)
	}
	// Once an operator removed them, the metric says zero: the alarm returns to OK.
	dlq.hidden, dlq.bodies = map[string]bool{}, map[string]string{}
	g = gauges{}
	h.Metrics = g
	if sum, err = h.Handle(ctx); err != nil || g["dead_letters_unexplained Count"] != 0 || len(g) == 0 {
		t.Fatalf("empty queue: %+v %v %v", sum.DeadLetters, err, g)
	}
	if _, ok := g["dead_letters_unexplained Count"]; !ok {
		t.Fatal("an empty dead-letter queue reported no unexplained count: the alarm could not return to OK")
	}
}

// failingQueue refuses every send.
type failingQueue struct{}

func (failingQueue) Send(context.Context, queue.Message) error { return errors.New("queue down") }

// A dead letter whose re-drive could not be sent stays in the dead-letter queue (the delivery
// must not lose its last message); the run reports the error, still cleans the ledger, and
// reports no unexplained count it did not finish counting.
func TestADeadLetterIsDeletedOnlyAfterItsRedriveWasSent(t *testing.T) {
	w := newDeadLetterWorld(t)
	dlq := newMemoryDeadLetters(map[string]string{"m-pending": w.letters["m-pending"]})
	g := gauges{}
	h := &cleanup.Handler{Ledger: w.l, Queue: failingQueue{}, DeadLetters: dlq, Metrics: g}
	sum, err := h.Handle(context.Background())
	if err == nil || !strings.Contains(err.Error(), "re-driving") {
		t.Fatalf("a failed re-drive: %v", err)
	}
	if len(dlq.deleted) != 0 || strings.Join(dlq.left(), ",") != "m-pending" {
		t.Fatalf("deleted %v although its re-drive failed", dlq.deleted)
	}
	if sum.Passes == 0 || !sum.LapDone || g["cleanup_succeeded Count"] != 1 {
		t.Fatalf("the ledger was not cleaned after the dead-letter error: %+v %v", sum, g)
	}
	if _, ok := g["dead_letters_unexplained Count"]; ok {
		t.Fatalf("an unfinished reading reported an unexplained count: %v", g)
	}
}

// brokenLedger fails every read of a row.
type brokenLedger struct{ ledger.Ledger }

func (brokenLedger) Inspect(context.Context, ledger.Key) (ledger.Row, error) {
	return ledger.Row{}, errors.New("store unavailable")
}

// A ledger that cannot be read explains nothing, and removes nothing: the dead letters stay
// and the error is returned.
func TestADeadLetterStaysWhileTheLedgerCannotBeRead(t *testing.T) {
	w := newDeadLetterWorld(t)
	dlq := newMemoryDeadLetters(w.letters)
	h := &cleanup.Handler{Ledger: brokenLedger{w.l}, Queue: queue.NewLocal(), DeadLetters: dlq}
	_, err := h.Handle(context.Background())
	if err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("%v", err)
	}
	if len(dlq.deleted) != 0 {
		t.Fatalf("deleted %v without reading their rows", dlq.deleted)
	}
}

// A delete that fails leaves the message for the next run, which finds the delivery queued
// twice at worst (a duplicate the runner answers as such).
func TestAFailedDeleteIsAnError(t *testing.T) {
	w := newDeadLetterWorld(t)
	dlq := newMemoryDeadLetters(map[string]string{"m-done": w.letters["m-done"]})
	dlq.failDelete = errors.New("throttled")
	_, err := (&cleanup.Handler{Ledger: w.l, Queue: queue.NewLocal(), DeadLetters: dlq}).Handle(context.Background())
	if err == nil || !strings.Contains(err.Error(), "throttled") || len(dlq.left()) != 1 {
		t.Fatalf("%v, left %v", err, dlq.left())
	}
}

// againDeadLetters hands the same message out on every receive (its hiding ended).
type againDeadLetters struct {
	body     string
	receives int
}

func (a *againDeadLetters) Receive(context.Context) ([]cleanup.DeadLetter, error) {
	a.receives++
	return []cleanup.DeadLetter{{ID: "m-1", Receipt: fmt.Sprintf("rh-%d", a.receives), Body: a.body}}, nil
}
func (a *againDeadLetters) Delete(context.Context, cleanup.DeadLetter) error { return nil }

// A run reads each message once: one handed out again ends the reading.
func TestARunReadsEachDeadLetterOnce(t *testing.T) {
	a := &againDeadLetters{body: "not a message"}
	sum, err := (&cleanup.Handler{Ledger: passLedger{}, Queue: queue.NewLocal(), DeadLetters: a}).Handle(context.Background())
	if err != nil || a.receives != 2 || sum.DeadLetters.Unexplained != 1 || !sum.DeadLetters.Complete {
		t.Fatalf("%d receives, %+v, %v", a.receives, sum.DeadLetters, err)
	}
}

// fakeSQSDeadLetters speaks the SQS JSON protocol (ReceiveMessage, DeleteMessage) over a set
// of messages, hiding what it hands out for the VisibilityTimeout asked.
type fakeSQSDeadLetters struct {
	mu       sync.Mutex
	bodies   map[string]string
	order    []string
	hidden   map[string]bool
	requests []map[string]any
}

func (f *fakeSQSDeadLetters) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if r.Header.Get("Content-Type") != "application/x-amz-json-1.0" || json.NewDecoder(r.Body).Decode(&in) != nil {
		http.Error(w, `{"__type":"MalformedInput"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.ReceiveMessage":
		var msgs []map[string]string
		for _, id := range f.order {
			if body, ok := f.bodies[id]; ok && !f.hidden[id] && len(msgs) < int(in["MaxNumberOfMessages"].(float64)) {
				f.hidden[id] = true
				sum := md5.Sum([]byte(body))
				msgs = append(msgs, map[string]string{"MessageId": id, "ReceiptHandle": "rh-" + id, "Body": body, "MD5OfBody": hex.EncodeToString(sum[:])})
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"Messages": msgs})
	case "AmazonSQS.DeleteMessage":
		id, _ := strings.CutPrefix(in["ReceiptHandle"].(string), "rh-")
		delete(f.bodies, id)
		w.Write([]byte(`{}`))
	default:
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"InvalidAction"}`))
	}
}

// The SQS dead-letter queue through the SDK against a JSON-protocol endpoint: messages are
// received ten at a time with a long poll and hidden for the run, and deleted by receipt.
func TestSQSDeadLettersAgainstAJSONProtocolEndpoint(t *testing.T) {
	w := newDeadLetterWorld(t)
	fake := &fakeSQSDeadLetters{bodies: map[string]string{}, hidden: map[string]bool{}}
	for id, body := range w.letters {
		fake.bodies[id] = body
		fake.order = append(fake.order, id)
	}
	// More than one batch: fill up with finished deliveries' messages.
	for i := range 12 {
		id := fmt.Sprintf("m-done-%02d", i)
		fake.bodies[id], fake.order = w.letters["m-done"], append(fake.order, id)
	}
	sort.Strings(fake.order)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 1})
	url := srv.URL + "/123456789012/amiss-dead-letters"
	q := queue.NewLocal()
	h := &cleanup.Handler{Ledger: w.l, Queue: q, DeadLetters: &cleanup.SQSDeadLetters{Client: client, QueueURL: url}}
	sum, err := h.Handle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for id := range fake.bodies {
		left = append(left, id)
	}
	sort.Strings(left)
	if strings.Join(left, ",") != "m-not-ours,m-other-body" || sum.DeadLetters.Removed != 15 || sum.DeadLetters.Redriven != 2 || len(drain(t, q)) != 2 {
		t.Fatalf("left %v, %+v", left, sum.DeadLetters)
	}
	first := fake.requests[0]
	if first["QueueUrl"] != url || first["MaxNumberOfMessages"].(float64) != 10 || first["WaitTimeSeconds"].(float64) != 1 ||
		first["VisibilityTimeout"].(float64) != 240 {
		t.Fatalf("receive request %v", first)
	}
}
