package queue_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
)

func msg(i int) queue.Message {
	k := ledger.NewKey("r", "s", string(rune('a'+i)))
	return queue.Message{Key: k, Binding: ledger.Digest(k)}
}

func TestLocalOrderAndDelay(t *testing.T) {
	q := queue.NewLocal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	late := msg(1)
	late.Delay = 150 * time.Millisecond
	// The delay runs from the send: measured from before it, so a slow machine cannot make a
	// correct queue look early.
	start := time.Now()
	q.Send(ctx, late)
	q.Send(ctx, msg(2))
	first, _ := q.Receive(ctx)
	second, _ := q.Receive(ctx)
	if first.Key != msg(2).Key || second.Key != late.Key {
		t.Fatalf("order: %s then %s", first.Key.Short(), second.Key.Short())
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Fatalf("delayed message handed out early")
	}
	q.Close()
	if err := q.Send(ctx, msg(3)); err != queue.ErrClosed {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := q.Receive(ctx); err != queue.ErrClosed {
		t.Fatalf("receive after close: %v", err)
	}
}

// On a manual clock a delayed message is ready once the clock has reached its time.
func TestLocalOnAManualClock(t *testing.T) {
	clock := ledger.NewManualClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	q := queue.NewLocalOn(clock)
	late := msg(1)
	late.Delay = time.Hour
	q.Send(context.Background(), late)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := q.Receive(short); err == nil {
		t.Fatal("a message an hour away on the clock was handed out")
	}
	clock.Advance(time.Hour)
	if m, err := q.Receive(context.Background()); err != nil || m.Key != late.Key || m.Delay != 0 {
		t.Fatalf("after the clock reached it: %+v, %v", m, err)
	}
}

// A message sent again while it waits is not added twice; the earlier time wins.
func TestLocalKeepsOneOfEachMessage(t *testing.T) {
	q := queue.NewLocal()
	ctx := context.Background()
	late := msg(1)
	late.Delay = time.Hour
	q.Send(ctx, late)
	q.Send(ctx, late)
	if q.Len() != 1 {
		t.Fatalf("%d messages waiting, want 1", q.Len())
	}
	q.Send(ctx, msg(1)) // the same message, ready now: it moves up
	other := msg(1)
	other.Binding = ledger.Digest{1} // another binding is another message
	q.Send(ctx, other)
	if q.Len() != 2 {
		t.Fatalf("%d messages waiting, want 2", q.Len())
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 2 {
		if _, err := q.Receive(rctx); err != nil {
			t.Fatalf("the re-sent message did not become ready at once: %v", err)
		}
	}
	// Closing leaves what is not ready yet, without spinning or waiting for it.
	late.Delay = time.Hour
	q.Send(ctx, late)
	q.Close()
	if _, err := q.Receive(rctx); err != queue.ErrClosed || q.Len() != 1 {
		t.Fatalf("receive after close with a delayed message: %v, %d left", err, q.Len())
	}
}

func TestCloseWakesEveryReceiver(t *testing.T) {
	q := queue.NewLocal()
	errs := make(chan error, 4)
	for range 4 {
		go func() { _, err := q.Receive(context.Background()); errs <- err }()
	}
	time.Sleep(20 * time.Millisecond)
	q.Close()
	for range 4 {
		select {
		case err := <-errs:
			if err != queue.ErrClosed {
				t.Fatalf("receive: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a receiver was not woken by Close")
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := msg(4)
	back, err := queue.Parse(m.Body())
	if err != nil || back.Key != m.Key || back.Binding != m.Binding {
		t.Fatalf("%+v %v", back, err)
	}
	for _, bad := range []string{"", "{}", "not json", `{"key":"zz"}`} {
		if _, err := queue.Parse(bad); err == nil {
			t.Fatalf("parsed %q", bad)
		}
	}
}

// fakeSQS is a minimal endpoint speaking the SQS JSON protocol (AmazonSQS.SendMessage over
// application/x-amz-json-1.0), as the current SDK does.
type fakeSQS struct {
	mu   sync.Mutex
	sent []map[string]any
	fail bool
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessage" || r.Header.Get("Content-Type") != "application/x-amz-json-1.0" {
		http.Error(w, `{"__type":"InvalidAction"}`, http.StatusBadRequest)
		return
	}
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, `{"__type":"MalformedInput"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	fail := f.fail
	if !fail {
		f.sent = append(f.sent, in)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"__type":"com.amazonaws.sqs#InternalError","message":"injected"}`))
		return
	}
	sum := md5.Sum([]byte(in["MessageBody"].(string)))
	json.NewEncoder(w).Encode(map[string]string{"MessageId": "5fea7756-0ea4-451a-a703-a558b933e274",
		"MD5OfMessageBody": hex.EncodeToString(sum[:])})
}

func TestSQSAgainstAJSONProtocolEndpoint(t *testing.T) {
	fake := &fakeSQS{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 1})
	q := &queue.SQS{Client: client, QueueURL: srv.URL + "/123456789012/amiss-deliveries"}
	m := msg(5)
	m.Delay = 2500 * time.Millisecond
	if err := q.Send(context.Background(), m); err != nil {
		t.Fatalf("send: %v", err)
	}
	long := msg(6)
	long.Delay = time.Hour
	if err := q.Send(context.Background(), long); err != nil {
		t.Fatalf("send: %v", err)
	}
	if len(fake.sent) != 2 {
		t.Fatalf("%d messages sent", len(fake.sent))
	}
	got := fake.sent[0]
	if got["QueueUrl"] != q.QueueURL || got["DelaySeconds"].(float64) != 3 {
		t.Fatalf("request %+v", got)
	}
	back, err := queue.Parse(got["MessageBody"].(string))
	if err != nil || back.Key != m.Key || back.Binding != m.Binding {
		t.Fatalf("body %v: %+v %v", got["MessageBody"], back, err)
	}
	if fake.sent[1]["DelaySeconds"].(float64) != 900 {
		t.Fatalf("delay over 15 minutes not cut: %v", fake.sent[1]["DelaySeconds"])
	}
	fake.fail = true
	if err := q.Send(context.Background(), m); err == nil {
		t.Fatal("a failed send reported success")
	}
}
