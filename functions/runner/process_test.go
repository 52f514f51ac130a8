package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

func TestExecutePublishComplete(t *testing.T) {
	w := newWorld(t)
	res, err := w.runner("a", verdict("failure", "failed: pull request title")).Process(context.Background(), w.msg)
	if err != nil || !res.Done {
		t.Fatalf("%+v %v", res, err)
	}
	got := w.pub.all()
	if len(got) != 1 || got[0].State != "failure" || got[0].Repository != "acme/app" || got[0].Context != "amiss/verdict" {
		t.Fatalf("statuses %+v", got)
	}
	if w.state(t) != ledger.StateDone {
		t.Fatalf("row %v", w.state(t))
	}
	// A redelivered message is a duplicate: nothing more is posted.
	if res, _ := w.runner("b", verdict("success", "x")).Process(context.Background(), w.msg); !res.Done || len(w.pub.all()) != 1 {
		t.Fatalf("redelivery posted again")
	}
}

func TestBusyComesBackAtRetryAt(t *testing.T) {
	w := newWorld(t)
	c, _ := w.l.Claim(context.Background(), w.msg.Key, w.msg.Binding, "other", time.Minute)
	res, err := w.runner("a", verdict("success", "x")).Process(context.Background(), w.msg)
	if err != nil || res.Done || !res.RetryAt.Equal(c.Lease.Expires) {
		t.Fatalf("%+v %v, want retry at %v", res, err, c.Lease.Expires)
	}
}
