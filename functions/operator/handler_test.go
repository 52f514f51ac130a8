package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/ledger"
)

// The operator function's commands read what amiss ledger reads: stats by state, the rows of a
// state page by page, one row with its frozen verdict.
func TestTheOperatorFunctionReads(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var abandoned []ledger.Key
	for i := range 5 {
		abandoned = append(abandoned, w.row(t, i, ledger.StateAbandoned))
	}
	w.row(t, 10, ledger.StatePending)
	w.row(t, 11, ledger.StateDone)
	h := &operator.Handler{Ledger: w.l, Queue: w.q}

	resp, err := h.Handle(ctx, operator.Request{Command: "stats"})
	if err != nil || resp.Stats == nil || resp.Stats.Rows != 7 || resp.Stats.ByState["abandoned"] != 5 || resp.Stats.ByState["pending"] != 1 ||
		resp.Stats.RecordCap != ledger.DefaultLimits().RecordCap || resp.Build == "" {
		t.Fatalf("stats: %+v %v", resp.Stats, err)
	}
	listed := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("list never ended")
		}
		resp, err := h.Handle(ctx, operator.Request{Command: "list", State: "abandoned", Limit: 2, Cursor: cursor})
		if err != nil || len(resp.Rows) > 2 {
			t.Fatalf("list: %+v %v", resp, err)
		}
		for _, r := range resp.Rows {
			if r.State != "abandoned" || r.Reason != "provider refused it for good: 422" || listed[r.Key] {
				t.Fatalf("list: row %+v (listed before: %v)", r, listed[r.Key])
			}
			listed[r.Key] = true
		}
		if cursor = resp.Next; cursor == "" {
			break
		}
	}
	for _, k := range abandoned {
		if !listed[k.String()] {
			t.Fatalf("abandoned row %s not listed (%d listed)", k, len(listed))
		}
	}
	resp, err = h.Handle(ctx, operator.Request{Command: "inspect", Key: abandoned[2].String()})
	if err != nil || resp.Row == nil || resp.Row.Key != abandoned[2] || string(resp.Row.Verdict) != `{"state":"failure","description":"verdict 2"}` {
		t.Fatalf("inspect: %+v %v", resp.Row, err)
	}
	// The answer is what aws lambda invoke prints: JSON, the change as JSON (under its key "subject").
	b, _ := json.Marshal(resp)
	if !strings.Contains(string(b), `"subject":{}`) || !strings.Contains(string(b), `"verdict":{"state":"failure"`) {
		t.Fatalf("inspect's answer: %s", b)
	}
	if _, err := h.Handle(ctx, operator.Request{Command: "inspect", Key: ledger.NewKey("r", "s", "nobody").String()}); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("inspect of an unknown key: %v", err)
	}
	if w.q.Len() != 0 {
		t.Fatalf("reading queued %d messages", w.q.Len())
	}
}

// republish revives one abandoned row, or every one abandoned since a time, and queues each;
// the answer says what became of each row.
func TestTheOperatorFunctionRepublishes(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	one := w.row(t, 1, ledger.StateAbandoned)
	w.clock.Advance(2 * time.Hour)
	recent := w.row(t, 2, ledger.StateAbandoned)
	h := &operator.Handler{Ledger: w.l, Queue: w.q, Now: w.clock.Now}
	resp, err := h.Handle(ctx, operator.Request{Command: "republish", Key: one.String()})
	if err != nil || len(resp.Republished) != 1 || resp.Republished[0].Key != one.String() || !resp.Republished[0].Queued ||
		resp.Republished[0].State != "saved" || !w.queued(t)[one] {
		t.Fatalf("republish one: %+v %v", resp, err)
	}
	w.row(t, 3, ledger.StatePending)
	resp, err = h.Handle(ctx, operator.Request{Command: "republish", Abandoned: true, Since: "1h"})
	if q := w.queued(t); err != nil || len(resp.Republished) != 1 || resp.Republished[0].Key != recent.String() || len(q) != 1 || !q[recent] {
		t.Fatalf("republish abandoned since 1h: %+v %v", resp, err)
	}
	resp, err = h.Handle(ctx, operator.Request{Command: "republish", Abandoned: true})
	if err != nil || len(resp.Republished) != 0 || resp.Note != "no abandoned row to republish" {
		t.Fatalf("republish with none abandoned: %+v %v", resp, err)
	}
}

// A request that cannot be carried out as written is refused (ErrRequest), saying what to
// give, and changes nothing.
func TestTheOperatorFunctionRefusesABadRequest(t *testing.T) {
	w := newWorld(t)
	abandoned := w.row(t, 1, ledger.StateAbandoned)
	h := &operator.Handler{Ledger: w.l, Queue: w.q}
	for _, c := range []struct {
		req  operator.Request
		want string
	}{
		{operator.Request{}, `no "command"`},
		{operator.Request{Command: "migrate"}, `unknown command "migrate"`},
		{operator.Request{Command: "inspect"}, `inspect needs "key"`},
		{operator.Request{Command: "inspect", Key: "abcdef"}, `key "abcdef"`},
		{operator.Request{Command: "list", State: "finished"}, `state "finished"`},
		{operator.Request{Command: "list", Limit: operator.MaxListLimit + 1}, "limit"},
		{operator.Request{Command: "republish"}, `republish needs "key"`},
		{operator.Request{Command: "republish", Key: abandoned.String(), Abandoned: true}, `"abandoned" takes no "key"`},
		{operator.Request{Command: "republish", Abandoned: true, Since: "yesterday"}, `since "yesterday"`},
		{operator.Request{Command: "republish", Key: abandoned.String(), Since: "1h"}, `"since" goes with "abandoned"`},
	} {
		_, err := h.Handle(context.Background(), c.req)
		if !errors.Is(err, operator.ErrRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a bad request saying %s", c.req, err, c.want)
		}
	}
	if r, _ := w.l.Inspect(context.Background(), abandoned); r.State != ledger.StateAbandoned || w.q.Len() != 0 {
		t.Fatalf("a refused request changed the ledger (%v) or queued %d", r.State, w.q.Len())
	}
}
